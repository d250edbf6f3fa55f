"""research.proposers.context: the researcher's context from a real repo, real scored rows and real records,
within the token budget in priority order."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks.datasets import load_benchmark
from benchmarks.scoring import TurnCosts, score_row
from benchmarks.splits import select
from harness.tokens import count_tokens
from harness.views import Answer
from memsys.config import MemoryConfig
from memsys.paths import REPO_ROOT
from research.config import load_run_setup
from research.journal.trajectory import ExperimentRecord
from research.loop.state import LoopState
from research.proposers.context import (
    RETRIEVAL_FILES,
    build_context,
    context_tokens,
    excerpt,
    journal_line,
    resolved_memory,
    rotation,
    step_seed,
)
from tests.support.loop import git

#: what the repo under optimization holds for these tests: the files the context excerpts
SOURCES = (*RETRIEVAL_FILES, "memsys/answer/generate.py", "memsys/answer/prompts/default/system.txt",
           "memsys/answer/prompts/default/constraints.txt", "memsys/answer/prompts/default/user.txt",
           "configs/memory/naive_rag.yaml")
KNOBS = ("retrieval.top_k: 10  (candidates handed to the pyramid; 5-50)\n"
         "retrieval.dense_k: 10  (dense hits; 5-50)\n"
         "retrieval.merge: dense_only  (set_union | rrf | linear | dense_only | bm25_only)\n"
         "answer.context_text: full_text  (summary | full_text | both)")


@pytest.fixture
def tiny_repo(tmp_path: Path) -> tuple[Path, str]:
    repo = tmp_path / "repo"
    for rel in SOURCES:
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / rel, repo / rel)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "memsys files")
    return repo, git(repo, "rev-parse", "HEAD")


def scored_rows(kind: str, shift: int = 0) -> list[dict]:
    """The tiny dev sample (12 questions) scored by the real scorer: ``kind`` retrieval gives contexts
    without the evidence, reader gives contexts with it; every 4th question (from ``shift``) is
    answered right, the rest wrong."""
    bench = select(load_benchmark("locomo"), "dev", "tiny")
    rows = []
    for conv in bench.conversations:
        costs = TurnCosts(conv)
        others = [t for t in conv.turn_ids if t not in {e for q in conv.questions for e in q.evidence}]
        for n, q in enumerate(conv.questions):
            right = n % 4 == shift and q.category != "5"  # an adversarial question has no gold to copy
            ctx = tuple(q.evidence) + tuple(others[:3]) if kind == "reader" or right else tuple(others[n:n + 4])
            a = Answer(q.id, q.answer if right else "I do not know", retrieved_ids=ctx, context_ids=ctx)
            rows.append(score_row(bench, q, a, costs, with_reader=True, context_budget_tokens=6000))
    return rows


def write_eval(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return folder


def journal_records(commit: str) -> list[ExperimentRecord]:
    def rec(i: int, decision: str, **kw) -> ExperimentRecord:
        return ExperimentRecord("r", i, f"exp-{i:03d}", "llm" if i else "baseline", commit, commit=commit,
                                decision=decision, objective="all_honest", **kw)

    return [
        rec(0, "baseline", objective_value=0.30, eval_run_id="eval-0"),
        rec(1, "proceed", config_overrides=["retrieval.dense_k=20"], hypothesis="more dense hits",
            objective_value=0.34, delta=0.04, eval_run_id="eval-1",
            test={"n": 12, "mean_delta": 0.04, "ci_low": 0.01, "ci_high": 0.07, "p_better": 0.004, "p_worse": 0.99}),
        rec(2, "rejected", config_overrides=["retrieval.sparse_k=10"], hypothesis="fewer bm25 hits",
            failure={"cls": "no_effect", "message": "identical reader inputs"}),
        rec(3, "iterate", config_overrides=["retrieval.merge=rrf"], hypothesis="rank fusion",
            objective_value=0.33, delta=-0.01, eval_run_id="eval-3", lesson="rrf reorders but loses the dense order",
            test={"n": 12, "mean_delta": -0.01, "ci_low": -0.04, "ci_high": 0.02, "p_better": 0.7, "p_worse": 0.3}),
    ]


def make_state(repo: Path, commit: str, eval_dir: Path, next_index: int = 4) -> LoopState:
    return LoopState("r", str(repo), commit, commit, best_value=0.34, best_eval_dir=str(eval_dir),
                     next_index=next_index, mode="iterate", current_hypothesis="rank fusion")


def run_setup(repo: Path, budget: int, *extra: str):
    return load_run_setup([f"research.repo={repo}", "sample=tiny", "memory=naive_rag", "research.seed=7",
                           f"research.loop.context_budget_tokens={budget}", *extra])


@pytest.fixture
def run(tiny_repo, tmp_path: Path, locomo_path):
    """A run folder whose best evaluation missed mostly at retrieval, and whose last experiment
    (exp-003) was evaluated and did not win."""
    repo, commit = tiny_repo
    run_dir = tmp_path / "run"
    best = write_eval(run_dir / "evals" / "exp-001" / "eval-1", scored_rows("retrieval"))
    write_eval(run_dir / "evals" / "exp-003" / "eval-3", scored_rows("reader", shift=1))
    return repo, commit, run_dir, best


def test_sections_of_a_retrieval_bound_run(run) -> None:
    repo, commit, run_dir, best = run
    records = journal_records(commit)
    setup = run_setup(repo, 4000)
    ctx = build_context(make_state(repo, commit, best), records, setup, "naive_rag", run_dir, knobs=KNOBS,
                        mode_rule="iterate: the last change was within the noise floor")
    print(ctx.goal, ctx.journal, ctx.lessons, ctx.diagnosis, sep="\n\n")
    assert "maximize all_honest" in ctx.goal and "12 questions are scored" in ctx.goal
    assert "one question is worth 1/12 = 0.0833 points of all_honest" in ctx.goal
    assert ctx.knobs == KNOBS and ctx.rule.startswith("iterate:")
    # journal: every recent experiment with its changes, outcome, decision and lesson
    for exp in ("exp-000", "exp-001", "exp-002", "exp-003"):
        assert exp in ctx.journal
    assert "[proceed 0.3400] retrieval.dense_k=20: all_honest +0.040 [0.01, 0.07] over 12 questions, p=0.004: accepted" \
        in ctx.journal
    assert "lesson: rrf reorders but loses the dense order" in ctx.journal
    assert "What worked:\n- retrieval.dense_k=20" in ctx.lessons and "No effect / dead ends:" in ctx.lessons
    # diagnosis of the best evaluation: retrieval misses dominate; examples show real turn texts
    assert ctx.failure_kind == "retrieval"
    assert "9 retrieval misses" in ctx.diagnosis and "0 reader misses" in ctx.diagnosis
    assert "Dominant: retrieval misses" in ctx.diagnosis and "(NOT in context)" in ctx.diagnosis
    assert "Melanie:" in ctx.diagnosis or "Caroline:" in ctx.diagnosis or "Jon:" in ctx.diagnosis
    assert "(text not available)" not in ctx.diagnosis
    # the last experiment did not win: the comparison with the best follows
    assert "Last evaluated experiment (exp-003) vs best:" in ctx.diagnosis and "Broke (was right, now wrong)" in ctx.diagnosis
    # retrieval-bound: retrieval sources, the rotation's first file leading
    assert list(ctx.files)[0] == rotation(RETRIEVAL_FILES, 4)[0]
    assert set(ctx.files) <= set(RETRIEVAL_FILES)
    assert isinstance(ctx.memory, MemoryConfig) and ctx.memory.retrieval.merge == "dense_only"
    assert ctx.seed == step_seed(7, 4) and ctx.failed_questions == []


def test_reader_bound_run_shows_the_answer_prompt_and_generation(run) -> None:
    repo, commit, run_dir, _ = run
    best = run_dir / "evals" / "exp-003" / "eval-3"  # evidence in context, answers wrong
    ctx = build_context(make_state(repo, commit, best, next_index=0), journal_records(commit),
                        run_setup(repo, 4000), "naive_rag", run_dir, knobs=KNOBS)
    assert ctx.failure_kind == "reader"
    assert "Dominant: reader misses" in ctx.diagnosis and "(NOT in context)" not in ctx.diagnosis
    reader = {"memsys/answer/generate.py", "memsys/answer/prompts/default/constraints.txt",
              "memsys/answer/prompts/default/system.txt", "memsys/answer/prompts/default/user.txt"}
    # the reader's files first; what budget they leave goes to the retrieval files
    assert set(list(ctx.files)[:len(reader)]) == reader
    assert list(ctx.files)[len(reader):] == [p for p in RETRIEVAL_FILES if p in ctx.files]


@pytest.mark.parametrize("budget", [500, 700, 900, 1500, 2500])
def test_everything_fits_the_budget_goal_and_levers_always_there(run, budget: int) -> None:
    repo, commit, run_dir, best = run
    ctx = build_context(make_state(repo, commit, best), journal_records(commit), run_setup(repo, budget),
                        "naive_rag", run_dir, knobs=KNOBS, mode_rule="iterate: ambiguous")
    assert context_tokens(ctx) <= budget
    assert ctx.goal.startswith("maximize all_honest") and ctx.knobs == KNOBS
    if budget >= 900:
        assert ctx.journal and ctx.lessons and ctx.diagnosis
    if budget >= 1500:
        assert ctx.files


def test_lower_sections_go_first_when_the_budget_shrinks(run) -> None:
    repo, commit, run_dir, best = run
    state, records = make_state(repo, commit, best), journal_records(commit)
    small = build_context(state, records, run_setup(repo, 400), "naive_rag", run_dir, knobs=KNOBS)
    large = build_context(state, records, run_setup(repo, 2500), "naive_rag", run_dir, knobs=KNOBS)
    assert not small.files and large.files
    assert count_tokens(small.diagnosis) <= count_tokens(large.diagnosis)
    assert small.goal == large.goal


def test_goal_and_levers_survive_a_budget_they_overflow(run) -> None:
    repo, commit, run_dir, best = run
    ctx = build_context(make_state(repo, commit, best), journal_records(commit), run_setup(repo, 50), "naive_rag",
                        run_dir, knobs=KNOBS, mode_rule="iterate: ambiguous")
    assert ctx.goal.startswith("maximize all_honest") and ctx.knobs == KNOBS
    assert not (ctx.rule or ctx.journal or ctx.lessons or ctx.diagnosis or ctx.files)


def test_goal_counts_the_questions_with_evidence_for_context_recall(run) -> None:
    repo, commit, run_dir, best = run
    ctx = build_context(make_state(repo, commit, best), [], run_setup(repo, 2500, "objective=context_recall"),
                        "naive_rag", run_dir, knobs=KNOBS)
    assert "one question is worth 1/12 = 0.0833 points of context_recall" in ctx.goal
    assert ctx.journal == "" and ctx.lessons == ""


def test_rotation_leads_with_a_different_file_each_step(run) -> None:
    repo, commit, run_dir, best = run
    firsts = []
    for step in range(3):  # a budget that leaves room for about one excerpt
        ctx = build_context(make_state(repo, commit, best, next_index=step), [], run_setup(repo, 1500),
                            "naive_rag", run_dir, knobs=KNOBS)
        firsts.append(next(iter(ctx.files)))
    assert firsts == list(RETRIEVAL_FILES)
    assert rotation(["a", "b", "c"], 4) == ["b", "c", "a"] and rotation([], 3) == []


def test_no_evaluation_yet(tiny_repo, tmp_path: Path) -> None:
    repo, commit = tiny_repo
    state = LoopState("r", str(repo), commit, commit, next_index=0)
    ctx = build_context(state, [], run_setup(repo, 2500), "naive_rag", tmp_path, knobs=KNOBS)
    assert "No evaluation of the best system yet." in ctx.goal and ctx.failure_kind == ""
    assert ctx.diagnosis == "(no evaluation of the best system yet)"
    assert ctx.files  # both kinds' files are candidates


def test_excerpts_are_whole_functions_of_the_source() -> None:
    import ast

    path = "memsys/retrieve/retriever.py"
    text = (REPO_ROOT / path).read_text(encoding="utf-8")
    assert excerpt(path, text, count_tokens(text)) == text  # fits: whole
    for step in range(4):
        part = excerpt(path, text, 500, step=step)
        assert 0 < count_tokens(part) <= 500 and "not shown" in part
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef):
                body = "\n".join(lines[node.lineno - 1:node.end_lineno])
                assert (body in part) == (lines[node.lineno - 1] in part.splitlines()), node.name
    # the rotation moves the function that leads the excerpt
    assert len({excerpt(path, text, 500, step=s) for s in range(4)}) > 1
    assert excerpt(path, text, 5) == ""


def test_a_preset_key_the_schema_lacks_still_resolves() -> None:
    assert resolved_memory("retrieval: {top_k: 7}").retrieval.top_k == 7
    loose = resolved_memory("retrieval: {top_k: 7, new_knob: 1}")
    assert loose.retrieval.new_knob == 1 and loose.retrieval.dense_k == MemoryConfig().retrieval.dense_k


def test_step_seeds_of_different_run_seeds_never_meet() -> None:
    steps = range(3 * 60)  # a 60-experiment budget at the proposal cap
    streams = [{step_seed(run, i) for i in steps} for run in range(5)]
    for a in range(5):
        for b in range(a + 1, 5):
            assert not streams[a] & streams[b], (a, b)
    assert [step_seed(0, i) for i in steps] == list(steps)  # seed-0 runs replay as before
    assert 100 * step_seed(4000, 3 * 1000) + 99 < 2**32  # the researcher's derived seeds stay in 32 bits


def test_a_samplers_draw_is_journaled_as_one_short_line_and_never_as_a_hypothesis() -> None:
    """A draw of every lever (optuna, random, the hybrid's exploration): listing 41 overrides would spend
    the budget, and its stock words shown as a hypothesis were copied by the 1.5B model as its own."""
    from research.proposers.base import EXPLORE_HYPOTHESIS

    overrides = [f"retrieval.k{i}={i}" for i in range(41)]
    draw = ExperimentRecord("r", 3, "exp-003", "hybrid", "c", hypothesis=f"{EXPLORE_HYPOTHESIS} (step seed 7)",
                            config_overrides=overrides, decision="iterate", objective_value=0.5)
    line = journal_line(draw, "context_recall")
    assert "41 levers at once (retrieval.k0=0" in line and "retrieval.k40" not in line
    assert line.endswith("| a sampler's draw, not a hypothesis") and EXPLORE_HYPOTHESIS not in line
    # the model's hypothesis in the same words is still a hypothesis: it names its levers
    own = ExperimentRecord("r", 4, "exp-004", "hybrid", "c", hypothesis=draw.hypothesis, subspace=["retrieval.top_k"],
                           config_overrides=["retrieval.top_k=9"], decision="iterate", objective_value=0.5)
    assert f"| hypothesis: {draw.hypothesis}" in journal_line(own, "context_recall")


def test_a_hosted_model_sees_the_retriever_the_pyramid_and_the_answer_code(run) -> None:
    """The budget follows the model (research.loop.context_budget_tokens=auto): with llm=openai a step's context
    holds excerpts of the retriever, the pyramid and the answer code it can change; the embedded model keeps
    its 2,500 tokens, which a capable hosted model used to get too (it saw one file, merge.py)."""
    from memsys.config import load_memory_config
    from research.levers.catalogue import render_levers

    repo, commit, run_dir, best = run
    state, records = make_state(repo, commit, best), journal_records(commit)
    knobs = render_levers(load_memory_config("naive_rag"))  # the real lever list, as the loop renders it

    def context(llm: str):
        setup = load_run_setup([f"research.repo={repo}", "sample=tiny", "memory=naive_rag", "research.seed=7", llm])
        return build_context(state, records, setup, "naive_rag", run_dir, knobs=knobs)

    hosted, local = context("llm=openai"), context("llm=local")
    assert hosted.failure_kind == local.failure_kind == "retrieval"
    assert context_tokens(local) <= 2500 < context_tokens(hosted) <= 16000
    for path in ("memsys/retrieve/retriever.py", "memsys/retrieve/pyramid.py", "memsys/retrieve/merge.py",
                 "memsys/answer/generate.py"):
        assert path in hosted.files, path
        assert "not shown:" not in hosted.files[path]  # whole files
    assert list(hosted.files)[:len(RETRIEVAL_FILES)] == rotation(RETRIEVAL_FILES, state.next_index)  # the dominant kind first
    assert len(local.files) < len(hosted.files) and set(local.files) <= set(RETRIEVAL_FILES)
