"""Proposers against real pieces: the lever catalogue, a real Optuna study, and the LLM researcher
talking HTTP to the scripted OpenAI test server (schema sent, seed and temperature on the wire)."""

from __future__ import annotations

import dataclasses
from typing import Iterator

import pytest

from memsys.config import LLMConfig, load_memory_config
from memsys.llm.client import LLMClient
from research.errors import ProposalFormatError
from research.journal.trajectory import ExperimentRecord
from research.levers.catalogue import lever_by_id, live_levers, resolve, static_noop
from research.levers.study import SharedStudy, field_levers
from research.proposers.base import Applied, Proposal, ResearchContext, mean_context_tokens
from research.proposers.hybrid import HybridProposer, subspace_schema
from research.proposers.llm import LLMProposer, pick_mode
from research.proposers.optuna_proposer import OptunaProposer
from research.proposers.random_proposer import RandomProposer
from tests.support.openai_server import OpenAITestServer, Reply


@pytest.fixture
def naive():
    return load_memory_config("naive")


def ctx_for(cfg, *, seed: int = 3, mode: str = "new", history=None, hyp=None, reader_free=True) -> ResearchContext:
    return ResearchContext("context_recall", 0.3, history or [], mode, hyp, [], {}, "levers", "naive",
                           goal="maximize context_recall", memory=cfg, seed=seed, reader_free=reader_free)


@pytest.fixture
def server() -> Iterator[OpenAITestServer]:
    with OpenAITestServer() as srv:
        yield srv


@pytest.fixture
def client(server: OpenAITestServer) -> Iterator[LLMClient]:
    cfg = LLMConfig(backend="openai", model="test-model", base_url=server.base_url, cache=False, max_retries=0)
    with LLMClient(cfg) as c:
        yield c


def test_pick_mode_by_model() -> None:
    assert pick_mode("auto", LLMConfig(backend="local")) == "menu"
    assert pick_mode("auto", LLMConfig(backend="openai", model="qwen2.5-1.5b-instruct")) == "menu"
    assert pick_mode("auto", LLMConfig(backend="openai", model="gpt-4.1")) == "code"
    assert pick_mode("code", LLMConfig(backend="local")) == "code"
    with pytest.raises(ProposalFormatError):
        pick_mode("poetry", LLMConfig())


def test_menu_reply_becomes_live_overrides(naive, server, client) -> None:
    server.enqueue(Reply.of_json({"hypothesis": "more dense hits", "targets": "retrieval_miss", "why": "evidence missing",
                                  "changes": [{"lever": "widen_dense", "value": 20}]}))
    prop = LLMProposer(client, mode="menu", max_tokens=200, temperature=0.7).propose(ctx_for(naive, seed=4))
    assert prop.config_overrides == ["retrieval.dense_k=20", "retrieval.top_k=20"]
    assert prop.discovery_type == "hyperparameter_tuning" and prop.seed == 400
    body = server.chat_requests[0]
    assert body["temperature"] == 0.7 and body["seed"] == 400
    schema = body["response_format"]["json_schema"]["schema"]
    ids = {item["properties"]["lever"]["const"] for item in schema["properties"]["changes"]["items"]["anyOf"]}
    assert ids == {lv.id for lv in live_levers(naive, reader_free=True)}
    assert "retrieval.sparse_k" not in ids and "answer.response_format" not in ids  # dead / reader-only
    assert static_noop(naive, prop.config_overrides) is None


def test_menu_reply_with_a_dead_lever_is_a_format_error(naive, server, client) -> None:
    server.enqueue(Reply.of_json({"hypothesis": "h", "targets": "other", "why": "w",
                                  "changes": [{"lever": "retrieval.rrf_k", "value": 30}]}))
    with pytest.raises(ProposalFormatError, match="dead"):
        LLMProposer(client, mode="menu").propose(ctx_for(naive))


def test_menu_researcher_cannot_repair_code(naive, client) -> None:
    p = LLMProposer(client, mode="menu")
    assert p.repair(ctx_for(naive), None, "boom", Applied()) is None  # type: ignore[arg-type]


#: a code reply that names a macro lever as the lever list shows it, with an edit beside it
MACRO_REPLY = {"hypothesis": "hybrid retrieval", "discovery_type": "architectural_change", "expected_effect": "recall up",
               "config_overrides": ["widen_hybrid=20", "retrieval.expand_top=2"],
               "edits": [{"path": "memsys/retrieve/merge.py", "search": "a", "replace": "b"}]}


def test_a_code_reply_may_name_a_macro_lever_as_an_override(naive, server, client) -> None:
    """The lever list offers macros ("e.g. the lever id=value"); in code mode ``widen_hybrid=20`` becomes the
    memory keys it writes, so the preset editor and the static screen see real keys."""
    server.enqueue(Reply.of_json(MACRO_REPLY), Reply.of_json({**MACRO_REPLY, "config_overrides": ["widen_hybrid=500"]}))
    p = LLMProposer(client, mode="code")
    prop = p.propose(ctx_for(naive))
    assert prop.config_overrides == ["retrieval.merge=set_union", "retrieval.dense_k=20", "retrieval.sparse_k=20",
                                     "retrieval.top_k=20", "retrieval.expand_top=2"]
    assert resolve(naive, prop.config_overrides).retrieval.sparse_k == 20 and len(prop.edits) == 1
    with pytest.raises(ProposalFormatError, match=r"widen_hybrid=500 is outside \[2..60\]"):
        p.propose(ctx_for(naive))


ORIGINAL = Proposal("the original hypothesis", "architectural_change")
DIFF = ("diff --git a/memsys/retrieve/merge.py b/memsys/retrieve/merge.py\n"
        "-    return merge_set_union(dense, [], k)\n+    return merge_set_union(dense, sparse_hits, k)\n")


def test_the_repair_prompt_shows_the_applied_diff_the_levers_and_the_context_cost(naive, server, client) -> None:
    wide = resolve(naive, ["retrieval.dense_k=20", "retrieval.top_k=20"])
    server.enqueue(Reply.of_json(MACRO_REPLY))
    applied = Applied(DIFF, memory=wide, context_tokens=812.6, context_of="the parent commit's evaluation",
                      budget_tokens=6000)
    rep = LLMProposer(client, mode="code").repair(ctx_for(naive), ORIGINAL, "NameError: sparse_hits", applied)
    assert rep is not None and rep.hypothesis == "the original hypothesis"  # the repair keeps the hypothesis
    prompt = server.chat_requests[0]["messages"][-1]["content"]
    assert prompt.startswith("Your last change failed.\nError: NameError: sparse_hits")
    assert "Applied now (the diff against the parent commit" in prompt and "+    return merge_set_union(dense, sparse_hits, k)" in prompt
    assert "(no diff)" not in prompt and "with the diff above applied" in prompt
    assert "widen_dense = 20  [2..60]" in prompt and "retrieval.top_k = 20" in prompt  # the config in effect, not the parent's
    assert "813 context tokens per question on average in the last evaluation (the parent commit's evaluation)" in prompt
    assert "the scorer counts at most 6,000 tokens of context per question (context_budget_tokens)" in prompt


def test_the_repair_prompt_says_plainly_when_none_of_the_edit_is_applied(naive, server, client) -> None:
    server.enqueue(Reply.of_json(MACRO_REPLY), Reply.of_json(MACRO_REPLY))
    p = LLMProposer(client, mode="code")
    gone = Applied(not_applied="it did not apply, as the error says, so the worktree was reset to the parent commit",
                   memory=naive, budget_tokens=None)
    p.repair(ctx_for(naive), ORIGINAL, "edit 1 (memsys/x.py): SEARCH text not found", gone)
    prompt = server.chat_requests[0]["messages"][-1]["content"]
    assert "Applied now: nothing. None of your attempt is applied (it did not apply, as the error says, so the " \
           "worktree was reset to the parent commit); the files are the parent commit's." in prompt
    assert "(no diff)" not in prompt and "Edits apply to the parent commit's files" in prompt
    assert "widen_dense = 5  [2..60]" in prompt  # the parent's values: nothing moved them
    assert "unknown (no evaluation to measure it yet); the scorer sets no context budget." in prompt
    long = Applied(DIFF * 200, memory=None, context_tokens=90.0, budget_tokens=6000)
    p.repair(ctx_for(naive), ORIGINAL, "boom", long)
    prompt = server.chat_requests[1]["messages"][-1]["content"]
    assert "more characters]" in prompt and len(prompt) < len(DIFF * 200)
    assert "the levers' values are unknown" in prompt


def test_mean_context_tokens_of_scored_rows() -> None:
    assert mean_context_tokens([{"context_tokens": 100}, {"context_tokens": 301}, {"question_id": "q"}]) == 200.5
    assert mean_context_tokens([]) is None


def test_study_learns_from_any_proposer(naive) -> None:
    study = SharedStudy(seed=1, n_startup_trials=2)
    wide = resolve(naive, ["retrieval.dense_k=40", "retrieval.top_k=40"])
    for cfg, v in ((naive, 0.2), (wide, 0.6), (resolve(naive, ["retrieval.dense_k=30", "retrieval.top_k=30"]), 0.55)):
        study.add(cfg, v)
    assert study.n_added == 3 and len([t for t in study.study.trials if t.value is not None]) == 3
    best = study.study.best_trial.params
    assert best["retrieval.dense_k"] == 40 and best["retrieval.merge"] == "dense_only"
    picks = [study.suggest(["retrieval.top_k"], s)["retrieval.top_k"] for s in range(8)]
    assert all(isinstance(v, int) and lever_by_id("retrieval.top_k").low <= v <= lever_by_id("retrieval.top_k").high
               for v in picks)
    assert study.suggest(["retrieval.top_k"], 5) == study.suggest(["retrieval.top_k"], 5)  # seeded per step


def test_study_keeps_out_of_range_values_out(naive) -> None:
    study = SharedStudy(seed=0)
    odd = dataclasses.replace(naive, retrieval=dataclasses.replace(naive.retrieval, top_k=10_000))
    study.add(odd, 0.1)
    assert "retrieval.top_k" not in study.study.trials[0].params


def test_optuna_samples_the_whole_space_reproducibly(naive) -> None:
    a = OptunaProposer(SharedStudy(seed=0)).propose(ctx_for(naive, seed=9))
    b = OptunaProposer(SharedStudy(seed=0)).propose(ctx_for(naive, seed=9))
    assert a.config_overrides == b.config_overrides
    keys = {o.split("=")[0] for o in a.config_overrides}
    assert keys == {lv.id for lv in field_levers()}
    resolve(naive, a.config_overrides)  # every sample is a valid config


def test_random_draws_one_live_lever_with_a_new_value(naive) -> None:
    seen = set()
    for seed in range(20):
        p = RandomProposer().propose(ctx_for(naive, seed=seed))
        assert p.config_overrides and p.seed == seed
        seen.add(p.hypothesis.split(":")[1].split("=")[0].strip())
        assert static_noop(naive, p.config_overrides) is None or "equal" not in (static_noop(naive, p.config_overrides) or "")
    assert len(seen) >= 4
    assert RandomProposer().propose(ctx_for(naive, seed=7)).config_overrides == \
        RandomProposer().propose(ctx_for(naive, seed=7)).config_overrides


def test_hybrid_asks_the_llm_for_a_subspace_then_tunes_inside_it(naive, server, client) -> None:
    server.enqueue(Reply.of_json({"hypothesis": "widen dense", "targets": "retrieval_miss", "why": "misses",
                                  "levers": ["retrieval.dense_k", "retrieval.top_k", "retrieval.top_k"]}))
    study = SharedStudy(seed=0)
    hybrid = HybridProposer(client, study, trials=3, coupled=6)
    first = hybrid.propose(ctx_for(naive, seed=2))
    # the model's levers, then the one that caps them both under dense_only: a merge with BM25 hits
    assert first.subspace == ["retrieval.dense_k", "retrieval.top_k", "retrieval.merge"] and first.tokens > 0
    assert {o.split("=")[0] for o in first.config_overrides} == set(first.subspace)
    sent = server.chat_requests[0]["response_format"]["json_schema"]["schema"]["properties"]["levers"]["items"]["enum"]
    assert "retrieval.sparse_k" not in sent and "retrieval.dense_k" in sent
    # iterating on the same hypothesis: TPE only, no new LLM call
    rec = ExperimentRecord("r", 1, "exp-001", "hybrid", "c", hypothesis="widen dense", subspace=first.subspace,
                           decision="iterate")
    second = hybrid.propose(ctx_for(naive, seed=3, mode="iterate", history=[rec], hyp="widen dense"))
    assert len(server.chat_requests) == 1 and second.hypothesis == "widen dense" and second.tokens == 0
    assert {o.split("=")[0] for o in second.config_overrides} == set(first.subspace)
    # after `trials` attempts, a new hypothesis is asked for
    server.enqueue(Reply.of_json({"hypothesis": "graph", "targets": "retrieval_miss", "why": "w", "levers": ["graph.enabled"]}))
    history = [dataclasses.replace(rec, index=i, experiment_id=f"exp-00{i}") for i in (1, 2, 3)]
    third = hybrid.propose(ctx_for(naive, seed=4, mode="iterate", history=history, hyp="widen dense"))
    assert third.hypothesis == "graph" and len(server.chat_requests) == 2
    offered = server.chat_requests[1]["response_format"]["json_schema"]["schema"]["properties"]["levers"]["items"]["enum"]
    assert not set(first.subspace) & set(offered)  # tuned three times without a gain: not offered again
    assert "not offered now: retrieval.top_k, retrieval.dense_k" in server.chat_requests[1]["messages"][-1]["content"]


def test_hybrid_explores_the_whole_space_first_and_after_a_pivot(naive, server, client) -> None:
    from research.proposers.base import EXPLORE_HYPOTHESIS as EXPLORE
    from research.proposers.hybrid import is_exploration

    study = SharedStudy(seed=0)
    hybrid = HybridProposer(client, study, trials=3, explore_first=2, explore_on_pivot=True)
    rec = lambda i, decision, prop: ExperimentRecord(  # noqa: E731
        "r", i, f"exp-{i:03d}", "hybrid", "c", hypothesis=prop.hypothesis, subspace=prop.subspace, decision=decision)
    base = ExperimentRecord("r", 0, "exp-000", "baseline", "c", decision="baseline")
    # the first two experiments: TPE over every field lever, the draw research.proposer=optuna makes at that seed
    first = hybrid.propose(ctx_for(naive, seed=2, history=[base]))
    assert first.hypothesis.startswith(EXPLORE) and first.subspace == [] and first.tokens == 0
    assert first.config_overrides == OptunaProposer(SharedStudy(seed=0)).propose(ctx_for(naive, seed=2)).config_overrides
    assert len(first.config_overrides) == len(field_levers())
    second = hybrid.propose(ctx_for(naive, seed=3, mode="iterate", history=[base, rec(1, "iterate", first)],
                                    hyp=first.hypothesis))
    assert second.hypothesis.startswith(EXPLORE) and second.config_overrides != first.config_overrides
    assert not server.chat_requests
    # then the model: an iterate on an exploration has no subspace to tune, so a hypothesis is asked for
    history = [base, rec(1, "iterate", first), rec(2, "iterate", second)]
    server.enqueue(Reply.of_json({"hypothesis": "widen dense", "targets": "retrieval_miss", "why": "misses",
                                  "levers": ["retrieval.dense_k", "retrieval.top_k"]}))
    third = hybrid.propose(ctx_for(naive, seed=4, mode="iterate", history=history, hyp=second.hypothesis))
    assert third.hypothesis == "widen dense" and len(server.chat_requests) == 1
    asked = server.chat_requests[0]["messages"][-1]["content"]  # a new hypothesis, not "refine" the draw's words
    assert "Propose a new hypothesis." in asked and "Refine the current hypothesis" not in asked
    # a pivot away from the model's hypothesis: one exploration draw, then the model again
    history.append(rec(3, "pivot", third))
    fourth = hybrid.propose(ctx_for(naive, seed=5, mode="pivot", history=history))
    assert is_exploration(rec(4, "pivot", fourth)) and len(server.chat_requests) == 1
    history.append(rec(4, "pivot", fourth))
    # the small model copies what it reads: its hypothesis worded like a draw is still its own (it has levers)
    server.enqueue(Reply.of_json({"hypothesis": fourth.hypothesis, "targets": "other", "why": "w", "levers": ["graph.enabled"]}))
    copied = hybrid.propose(ctx_for(naive, seed=6, mode="pivot", history=history))
    assert copied.subspace == ["graph.enabled"] and not is_exploration(rec(5, "pivot", copied))
    history.append(rec(5, "pivot", copied))
    # a pivot right after the model's hypothesis: a draw again; tuning the copied hypothesis counts only its trials
    assert is_exploration(rec(6, "x", hybrid.propose(ctx_for(naive, seed=7, mode="pivot", history=history))))
    history[-1] = rec(5, "iterate", copied)
    tuned = hybrid.propose(ctx_for(naive, seed=7, mode="iterate", history=history, hyp=fourth.hypothesis))
    assert tuned.subspace == ["graph.enabled"] and len(server.chat_requests) == 2
    # off (research.researcher.hybrid_explore_first=0, hybrid_explore_on_pivot=false): the model from the start
    server.enqueue(Reply.of_json({"hypothesis": "h", "targets": "other", "why": "w", "levers": ["retrieval.top_k"]}))
    off = HybridProposer(client, SharedStudy(seed=0), trials=3)
    assert off.propose(ctx_for(naive, seed=2, history=[base])).hypothesis == "h"
    # a round of K candidates while exploring: K draws, each at its own step seed, no model call
    sent = len(server.chat_requests)
    batch = HybridProposer(client, SharedStudy(seed=0), explore_first=2).propose_batch(ctx_for(naive, seed=2, history=[base]), 2)
    assert all(p.hypothesis.startswith(EXPLORE) for p in batch) and batch[0].config_overrides == first.config_overrides
    assert batch[1].config_overrides != batch[0].config_overrides and len(server.chat_requests) == sent


def test_a_new_hypothesis_is_offered_only_levers_not_yet_tuned_from_the_best(naive) -> None:
    from research.proposers.hybrid import untried_levers

    ids = [lv.id for lv in live_levers(naive, reader_free=True) if lv.id in {f.id for f in field_levers()}]
    rec = lambda i, decision, space, who="hybrid": ExperimentRecord(  # noqa: E731
        "r", i, f"exp-{i:03d}", who, "c", hypothesis=f"h{i}", subspace=space, decision=decision)
    dense = ["retrieval.dense_k", "retrieval.top_k"]
    # two hypotheses since the last gain: both of their levers are spent; what came before the gain is not
    history = [rec(0, "baseline", []), rec(1, "iterate", ["graph.enabled"]), rec(2, "proceed", ["graph.enabled"]),
               rec(3, "iterate", dense), rec(4, "pivot", ["retrieval.merge"]), rec(5, "rejected", [], "optuna")]
    offered, spent = untried_levers(ids, history)
    assert set(spent) == {*dense, "retrieval.merge"} and "graph.enabled" in offered
    assert offered + spent == [i for i in ids if i in offered] + [i for i in ids if i in spent]  # menu order kept
    assert untried_levers(ids, history[:3]) == (ids, [])  # right after a gain: everything again
    # every live lever spent: offering nothing would end the run, so everything is offered again
    assert untried_levers(ids, [rec(0, "baseline", []), rec(1, "pivot", ids)]) == (ids, [])


def test_hybrid_tunes_the_levers_a_merge_change_brings_to_life(naive, server, client) -> None:
    """Under naive's dense_only the menu cannot offer sparse_k (dead): picking the merge must bring it."""
    server.enqueue(Reply.of_json({"hypothesis": "add BM25", "targets": "retrieval_miss", "why": "keyword misses",
                                  "levers": ["retrieval.merge"]}))
    prop = HybridProposer(client, SharedStudy(seed=0), trials=3, coupled=6).propose(ctx_for(naive, seed=5))
    assert prop.subspace[0] == "retrieval.merge" and len(prop.subspace) <= 1 + 6
    assert {"retrieval.sparse_k", "retrieval.rrf_k", "retrieval.top_k"} <= set(prop.subspace)
    sent = server.chat_requests[0]["response_format"]["json_schema"]["schema"]["properties"]["levers"]["items"]["enum"]
    assert "retrieval.sparse_k" not in sent  # the model could not have named it
    assert static_noop(naive, prop.config_overrides) is None


def test_hybrid_reply_without_a_live_lever_is_a_format_error(naive, server, client) -> None:
    server.enqueue(Reply.of_json({"hypothesis": "h", "targets": "other", "why": "w", "levers": ["retrieval.rrf_k"]}))
    with pytest.raises(ProposalFormatError, match="not in enum"):  # the client checks the reply against the schema
        HybridProposer(client, SharedStudy(seed=0)).propose(ctx_for(naive))


def test_subspace_schema_is_an_enum_of_the_given_levers() -> None:
    s = subspace_schema(["a", "b"])
    assert s["properties"]["levers"]["items"]["enum"] == ["a", "b"] and s["properties"]["levers"]["maxItems"] == 3


def test_researcher_prompt_and_reply_fit_the_local_window() -> None:
    from harness.errors import ConfigError
    from research.config import load_run_setup
    from research.proposers.factory import PROMPT_OVERHEAD_TOKENS, check_context_fits, context_budget, reply_tokens

    setup = load_run_setup(["llm=local", "research.proposer=hybrid"])
    check_context_fits(setup)  # the defaults fit
    n_ctx = setup.eval.llm.local.n_ctx
    assert context_budget(setup) + PROMPT_OVERHEAD_TOKENS + reply_tokens(setup) <= n_ctx
    quick = load_run_setup(["llm=local", "research.proposer=hybrid", "research.loop.context_budget_tokens=1500"])
    check_context_fits(quick)
    big = load_run_setup(["llm=local", "research.proposer=llm", "research.researcher.mode=code",
                          f"research.loop.context_budget_tokens={n_ctx}"])
    with pytest.raises(ConfigError, match="n_ctx"):
        check_context_fits(big)
    check_context_fits(load_run_setup(["llm=local", "research.proposer=optuna", f"research.loop.context_budget_tokens={n_ctx}"]))


def test_the_rendered_menu_prompt_stays_within_its_overhead(naive) -> None:
    """The prompt's fixed parts (system prompt, instructions) measured against the overhead the
    window check assumes, with every context section empty."""
    from harness.tokens import count_message_tokens
    from research.proposers.factory import PROMPT_OVERHEAD_TOKENS

    ctx = ctx_for(naive)
    ctx.knobs, ctx.goal = "", ""
    p = LLMProposer(None, mode="menu")
    fixed = count_message_tokens(p._messages(p.step_prompt(ctx)))
    assert fixed < PROMPT_OVERHEAD_TOKENS


# --------------------------------------------------------------------------- a round's batch (research.parallel=K)
def _batch_items(body: dict) -> dict:
    return body["response_format"]["json_schema"]["schema"]["properties"]["proposals"]


def test_menu_batch_is_one_request_for_k_different_proposals(naive, server, client) -> None:
    ok = {"hypothesis": "more dense hits", "targets": "retrieval_miss", "why": "w", "changes": [{"lever": "widen_dense", "value": 20}]}
    dead = {"hypothesis": "rrf", "targets": "other", "why": "w", "changes": [{"lever": "retrieval.rrf_k", "value": 30}]}
    server.enqueue(Reply.of_json({"proposals": [dead, ok]}, prompt_tokens=101, completion_tokens=0))
    props = LLMProposer(client, mode="menu", max_tokens=200).propose_batch(ctx_for(naive, seed=4), 2)
    assert len(server.chat_requests) == 1
    body = server.chat_requests[0]
    items = _batch_items(body)
    assert (items["minItems"], items["maxItems"]) == (2, 2) and "changes" in items["items"]["properties"]
    assert body["max_tokens"] == 400 and body["seed"] == 400  # room for two proposals; the step's seed
    assert "Propose 2 DIFFERENT hypotheses" in body["messages"][-1]["content"]
    # the dead lever's item is dropped (the round asks for that candidate on its own)
    assert [p.config_overrides for p in props] == [["retrieval.dense_k=20", "retrieval.top_k=20"]]
    assert props[0].tokens == 101 and props[0].seed == 400
    server.enqueue(Reply.of_json({"proposals": [dead]}))  # nothing usable: the round asks one at a time
    with pytest.raises(ProposalFormatError, match="no usable proposal .*dead"):
        LLMProposer(client, mode="menu").propose_batch(ctx_for(naive), 2)


def test_code_batch_shares_the_reply_and_single_asks_without_batch(naive, server, client) -> None:
    one = {"hypothesis": "a", "discovery_type": "hyperparameter_tuning", "config_overrides": ["retrieval.top_k=3"], "edits": []}
    two = {**one, "hypothesis": "b", "config_overrides": ["retrieval.top_k=4"]}
    server.enqueue(Reply.of_json({"proposals": [one, two]}, prompt_tokens=11, completion_tokens=0))
    props = LLMProposer(client, mode="code").propose_batch(ctx_for(naive, seed=1), 2)
    assert [p.hypothesis for p in props] == ["a", "b"] and sum(p.tokens for p in props) == 11
    assert _batch_items(server.chat_requests[0])["items"]["required"] == ["hypothesis", "discovery_type",
                                                                         "config_overrides", "edits"]
    server.enqueue(Reply.of_json(one), Reply.of_json(two))  # research.researcher.batch=false: today's K asks
    single = LLMProposer(client, mode="code", batch=False).propose_batch(ctx_for(naive, seed=1), 2)
    assert [p.hypothesis for p in single] == ["a", "b"] and [p.seed for p in single] == [100, 200]
    assert [b["seed"] for b in server.chat_requests[1:]] == [100, 200]
    assert all("proposals" not in b["response_format"]["json_schema"]["schema"]["properties"]
               for b in server.chat_requests[1:])


def test_samplers_batch_is_k_asks_with_their_own_seeds(naive) -> None:
    ctx = ctx_for(naive, seed=5)
    batch = OptunaProposer(SharedStudy(seed=0)).propose_batch(ctx, 3)
    alone = [OptunaProposer(SharedStudy(seed=0)).propose(dataclasses.replace(ctx, seed=5 + i)) for i in range(3)]
    assert [p.seed for p in batch] == [5, 6, 7]
    assert [p.config_overrides for p in batch] == [p.config_overrides for p in alone]


def test_hybrid_batch_asks_k_hypotheses_once_and_tunes_each(naive, server, client) -> None:
    server.enqueue(Reply.of_json({"proposals": [
        {"hypothesis": "widen dense", "targets": "retrieval_miss", "why": "w", "levers": ["retrieval.dense_k"]},
        {"hypothesis": "graph", "targets": "retrieval_miss", "why": "w", "levers": ["graph.enabled"]}]}))
    hybrid = HybridProposer(client, SharedStudy(seed=0), trials=3)  # the default: the model's levers only
    props = hybrid.propose_batch(ctx_for(naive, seed=2), 2)
    assert len(server.chat_requests) == 1 and _batch_items(server.chat_requests[0])["maxItems"] == 2
    assert [p.hypothesis for p in props] == ["widen dense", "graph"] and [p.seed for p in props] == [2, 3]
    assert [{o.split("=")[0] for o in p.config_overrides} for p in props] == [{"retrieval.dense_k"}, {"graph.enabled"}]
    # tuning the current hypothesis: TPE per candidate, no request
    rec = ExperimentRecord("r", 1, "exp-001", "hybrid", "c", hypothesis="widen dense", subspace=["retrieval.dense_k"],
                           decision="iterate")
    again = hybrid.propose_batch(ctx_for(naive, seed=3, mode="iterate", history=[rec], hyp="widen dense"), 2)
    assert len(server.chat_requests) == 1 and [p.hypothesis for p in again] == ["widen dense"] * 2


def test_batched_replies_must_fit_the_local_window() -> None:
    from harness.errors import ConfigError
    from research.config import load_run_setup
    from research.proposers.factory import check_context_fits

    wide = ["llm=local", "research.proposer=llm", "research.researcher.mode=code", "research.parallel=6"]
    with pytest.raises(ConfigError, match="6 proposals per reply: or research.researcher.batch=false"):
        check_context_fits(load_run_setup(wide))
    check_context_fits(load_run_setup([*wide, "research.researcher.batch=false"]))


def test_a_batch_asked_again_comes_from_the_reply_cache(naive, server, tmp_path) -> None:
    """A resumed round asks the same batch prompt with the same seed: one cached reply, the same proposals."""
    from harness.reply_cache import ResponseCache

    one = {"hypothesis": "a", "discovery_type": "hyperparameter_tuning", "config_overrides": ["retrieval.top_k=3"], "edits": []}
    server.enqueue(Reply.of_json({"proposals": [one, {**one, "hypothesis": "b", "config_overrides": ["retrieval.top_k=4"]}]}))
    cfg = LLMConfig(backend="openai", model="test-model", base_url=server.base_url, cache=True, max_retries=0)
    runs = []
    for _ in range(2):
        with LLMClient(cfg, cache=ResponseCache(tmp_path / "replies.sqlite")) as c:
            runs.append(LLMProposer(c, mode="code").propose_batch(ctx_for(naive, seed=6), 2))
    assert len(server.chat_requests) == 1
    assert [(p.hypothesis, p.config_overrides, p.seed) for p in runs[1]] == \
        [(p.hypothesis, p.config_overrides, p.seed) for p in runs[0]]


def test_the_context_budget_follows_the_model() -> None:
    """``research.loop.context_budget_tokens=auto`` (the default): the embedded model keeps 2,500 tokens, a
    hosted one gets 16,000, held within its window when ``llm.context_window`` says it; a number applies to
    any model."""
    from harness.errors import ConfigError
    from research.config import load_run_setup
    from research.proposers.factory import PROMPT_OVERHEAD_TOKENS, check_context_fits, context_budget, reply_tokens

    local = load_run_setup(["llm=local", "research.proposer=llm"])
    assert local.research.loop.context_budget_tokens == "auto"
    assert context_budget(local) == local.research.researcher.local_context_tokens == 2500
    hosted = load_run_setup(["llm=openai", "research.proposer=llm", "research.researcher.mode=code"])
    assert context_budget(hosted) == hosted.research.researcher.hosted_context_tokens == 16000
    check_context_fits(hosted)  # no window known: nothing to refuse
    small = load_run_setup(["llm=openai", "research.proposer=llm", "research.researcher.mode=code",
                            "llm.context_window=8192"])
    assert context_budget(small) == 8192 - PROMPT_OVERHEAD_TOKENS - reply_tokens(small)
    check_context_fits(small)
    fixed = load_run_setup(["llm=openai", "research.proposer=llm", "research.loop.context_budget_tokens=1500"])
    assert context_budget(fixed) == 1500
    over = load_run_setup(["llm=openai", "research.proposer=llm", "llm.context_window=4096",
                           "research.loop.context_budget_tokens=8000"])
    with pytest.raises(ConfigError, match="llm.context_window=4096"):
        check_context_fits(over)
    with pytest.raises(ConfigError, match="number of tokens or auto"):
        load_run_setup(["research.loop.context_budget_tokens=lots"])

