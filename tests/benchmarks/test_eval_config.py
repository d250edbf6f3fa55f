"""benchmarks.config: the objective an evaluation reports and the check slice, fixed at compose time."""

from __future__ import annotations

import pytest

from benchmarks.config import load_eval_setup
from benchmarks.runner import selection
from benchmarks.views import public_view
from harness.errors import ConfigError
from harness.paths import data_dir


@pytest.mark.parametrize(
    ("overrides", "objective"),
    [
        ([], "all_honest"),
        (["benchmark=memgallery"], "f1"),
        (["reader=none"], "context_recall"),  # evidence inside the context the reader would get
        (["reader=none", "benchmark=memgallery"], "context_recall"),
        (["reader=none", "objective=recall_at_10"], "recall_at_10"),
    ],
)
def test_objective(overrides, objective):
    assert load_eval_setup(overrides).objective == objective


def test_complement_defaults_off_and_needs_a_named_sample():
    assert load_eval_setup().options.complement is False
    assert load_eval_setup([], config_name="run").options.complement is False
    assert load_eval_setup(["sample=small", "complement=true"]).options.complement is True
    for sample in ("null", "full"):
        with pytest.raises(ConfigError, match="leaves no disjoint dev slice"):
            load_eval_setup([f"sample={sample}", "complement=true"])


@pytest.mark.skipif(not (data_dir() / "locomo" / "locomo10.json").is_file(), reason="LoCoMo data absent")
def test_the_public_view_of_the_complement_asks_its_questions(locomo_path):
    main = selection(load_eval_setup(["sample=tiny"]))
    check = selection(load_eval_setup(["sample=tiny", "complement=true"]))
    view = public_view(check)
    assert view.question_ids == [q.id for q in check.questions]
    assert not set(view.question_ids) & {q.id for q in main.questions}
    assert view.sample == "tiny-complement"


def test_the_reader_is_held_to_the_budget_only_when_asked_and_only_with_a_reader_and_a_budget():
    from benchmarks.config import READER_FIXED_TOKENS, reader_prompt_cap

    assert reader_prompt_cap(load_eval_setup(["reader=llm"]).options) is None  # the default: no cap
    capped = load_eval_setup(["reader=llm", "reader_at_budget=true", "context_budget_tokens=1000"]).options
    assert reader_prompt_cap(capped) == 1000 + READER_FIXED_TOKENS
    for bad in (["reader=none", "reader_at_budget=true"], ["reader=llm", "reader_at_budget=true", "context_budget_tokens=null"]):
        with pytest.raises(ConfigError, match="reader_at_budget=true caps the reader's prompt"):
            load_eval_setup(bad)
