"""Issue #49, "A researcher that memorises dev cannot win", through the real loop.

Real pieces: git worktrees and commits in a scratch repo, the process sandbox running the LoCoMo tiny
dev sample (reader=none: objective context_recall), the trusted leakage screen reading each commit
from git, the openai SDK over HTTP to :class:`OpenAITestServer` that plays the researcher. The
memorisers' tables come from the real dev data (tests/support/memorisers.py). The embedder is the
hashing one (``memory.embedder.backend=hashing``): what is tested is the loop's defences, not
retrieval quality, and it saves the minute MiniLM takes per store.

Three loop runs (module fixtures, one xdist group):

``screened`` (leakage screen on, held-out confirmation on the test split's tiny sample):
  exp-001  a legitimate code change of the memorisers' size + tests/support/loop.py IMPROVE -> proceed
  exp-002  memoriser: dev question -> evidence ids table, used by the retriever, + a config change -> leakage
  exp-003  memoriser: dev question -> gold answer table, used by predict, + a config change -> leakage
  exp-004  an edit of the scorer (FORBIDDEN) -> forbidden_edit: ends the run at the proposal cap
  The legitimate change comes first, though the order no longer matters for it: diagnosis examples draw
  from the questions shown before, and at most ``research.loop.max_shown_fraction`` (a quarter) of the
  sample is ever shown, so never-shown questions are left to support a real gain.

``shown_only`` (leakage screen off, to test the second defence alone): the researcher reads the
  diagnosis in its own prompt and hard-codes the evidence of exactly the questions shown there.
  Why these settings: on the hashing embedder the naive baseline misses every tiny question, so the
  diagnosis draws its examples from all 12; ``failed_questions_shown=6``, ``max_shown_fraction=0.5`` and a
  larger context budget show 6 of them, each gaining the full context recall: 6 positive paired differences give an exact
  sign-flip p of 1/64 < 0.05, so the whole-sample decision is "proceed" before the never-shown check
  (with the default 5, and only 3 fitting in the default budget, p would be 1/8 and the candidate a
  plain "iterate", which would not test the check). ``check=false`` takes the disjoint-slice check out
  (it would pass anyway: on the complement the memoriser changes nothing, a mean delta of 0 "holds").

``shown_all`` (leakage screen off, ``max_shown_fraction=1.0``): the same researcher on a run whose
  diagnosis shows all 12 questions. No never-shown question is left to support the gain: not taken.

Unit level: ``confirmation_verdict`` on hand-made records, and ``print_verdict``'s line.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from benchmarks.leakage.text import normal
from research.commands import print_summary, print_verdict
from research.evaluation.diagnosis import read_rows
from research.evaluation.stats import per_question
from research.journal.trajectory import ExperimentRecord, read_trajectory
from research.loop.confirm import confirmation_verdict
from research.loop.research_loop import ResearchLoop
from research.loop.state import LoopState
from research.proposers.llm import PROMPTS
from research.workspace.repo import make_scratch_repo
from tests.support import memorisers as M
from tests.support.loop import FORBIDDEN, IMPROVE, git, scripted_opener, scripted_setup
from tests.support.openai_server import OpenAITestServer, Reply

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("leakage_e2e")]  # two recorded runs per module

SAMPLE = "tiny"
FAST = "memory.embedder.backend=hashing"
RESEARCHER_SYSTEM = (PROMPTS / "researcher_system.txt").read_text(encoding="utf-8").strip().splitlines()[0]
#: memorised questions per table: the run's 12 tiny questions and 12 more of dev
TABLE_SIZE = 24
EVIDENCE_OVERRIDES = ["retrieval.top_k=25", "retrieval.dense_k=25"]  # real changes from exp-001's config
ANSWER_OVERRIDES = ["retrieval.sparse_k=30"]


@dataclass
class Run:
    loop: ResearchLoop
    repo: Path
    run_dir: Path
    state: LoopState
    records: list[ExperimentRecord]
    prompts: list[str]  # the researcher requests' last message, in order
    seconds: float
    handler: Any = None

    def evals(self, rec: ExperimentRecord) -> list[str]:
        return sorted(p.name for p in (self.run_dir / "evals").glob(f"{rec.experiment_id}*"))


def _run(tmp: Path, run_id: str, experiments: int, extra: list[str], *, replies: list[dict[str, Any]] | None = None,
         handler: Any = None) -> Run:
    repo = make_scratch_repo(tmp / "repo")
    with pytest.MonkeyPatch.context() as mp, OpenAITestServer() as server:
        mp.setenv("MEMSYS_RUNS_DIR", str(tmp / "runs"))  # the cache stays the session's (stores built once)
        server.handler = handler or (lambda body: Reply.ok("UNSCRIPTED"))
        server.enqueue(*(Reply.of_json(r) for r in replies or []))
        setup = scripted_setup(repo, experiments, FAST, "research.loop.never_shown_check=true", *extra)
        t0 = time.perf_counter()
        loop = ResearchLoop(setup, run_id, llm_opener=scripted_opener(server))
        state = loop.run()
        seconds = time.perf_counter() - t0
        prompts = [str(b["messages"][-1]["content"]) for b in server.chat_requests]
        assert server.pending == 0, "a scripted reply was never asked for"
    run_dir = tmp / "runs" / run_id
    records, warnings = read_trajectory(run_dir, strict=True)
    assert warnings == []
    return Run(loop, repo, run_dir, state, records, prompts, seconds, handler)


@pytest.fixture(scope="module")
def tables(locomo_path: Path) -> dict[str, list[Any]]:
    return {"evidence": M.memorised(SAMPLE, TABLE_SIZE), "answer": M.memorised(SAMPLE, TABLE_SIZE, need_answer=True),
            "sample": M.dev_questions(SAMPLE)}


@pytest.fixture(scope="module")
def screened(tmp_path_factory: pytest.TempPathFactory, tables: dict[str, list[Any]]) -> Run:
    replies = [M.legitimate_change(IMPROVE["config_overrides"]),
               M.evidence_memoriser(tables["evidence"], EVIDENCE_OVERRIDES),
               M.answer_memoriser(tables["answer"], ANSWER_OVERRIDES),
               FORBIDDEN]
    # budget 2 x proposal factor 2: the run ends at the 4th proposal with one evaluation spent
    return _run(tmp_path_factory.mktemp("leak-screened"), "leak-screened", 2,
                ["research.loop.max_proposals_factor=2", "research.loop.duplicate_reasks=0",
                 "research.confirm.enabled=true", "research.confirm.split=test"], replies=replies)


@pytest.fixture(scope="module")
def shown_only(tmp_path_factory: pytest.TempPathFactory, locomo_path: Path) -> Run:
    handler = M.ShownOnlyResearcher(RESEARCHER_SYSTEM)
    return _run(tmp_path_factory.mktemp("leak-shown"), "leak-shown", 1,
                ["research.loop.leakage_screen=false", "research.loop.check=false",
                 "research.loop.failed_questions_shown=6", "research.loop.max_shown_fraction=0.5",
                 "research.loop.context_budget_tokens=6000"], handler=handler)


@pytest.fixture(scope="module")
def shown_all(tmp_path_factory: pytest.TempPathFactory, locomo_path: Path) -> Run:
    """The shown-only memoriser on a run that shows it every question of the sample (12 examples; llm=openai
    so that the embedded model's window does not cap the researcher's context budget). The leakage screen
    is off; the disjoint-slice check is on (it passes: on the complement the memoriser changes nothing)."""
    handler = M.ShownOnlyResearcher(RESEARCHER_SYSTEM)
    return _run(tmp_path_factory.mktemp("leak-shown-all"), "leak-shown-all", 1,
                ["llm=openai", "research.loop.leakage_screen=false", "research.loop.failed_questions_shown=12", "research.loop.max_shown_fraction=1.0",
                 "research.loop.context_budget_tokens=12000"], handler=handler)


# --------------------------------------------------------------------------------------------- helpers
def _line_at(run: Run, commit: str, path: str, number: int) -> str:
    return git(run.repo, "show", f"{commit}:{path}").splitlines()[number - 1]


def _clip(text: str, limit: int = 120) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 3] + "..."


def _hits(rec: ExperimentRecord, kind: str) -> list[dict[str, Any]]:
    return [h for h in rec.leakage["hits"] if h["kind"] == kind]


def _refused_unevaluated(run: Run, rec: ExperimentRecord) -> None:
    assert rec.decision == "rejected", (rec.decision, rec.failure)
    assert rec.failure["cls"] == "leakage" and rec.failure["stage"] == "leakage"
    assert rec.leakage["refused"] is True and rec.leakage["seconds"] < 30
    # nothing of it was run: no screen, no evaluation folder, no score
    assert rec.objective_value is None and rec.eval_run_id is None and rec.eval_dir == "" and rec.screen == {}
    assert run.evals(rec) == []
    assert "eval_s" not in rec.durations and "screen_s" not in rec.durations
    # it was committed (the screen reads the commit from git) on its own branch, never merged into the best
    assert rec.commit and git(run.repo, "rev-parse", rec.branch) == rec.commit
    assert run.state.best_commit != rec.commit
    ancestor = git(run.repo, "merge-base", rec.commit, run.state.best_commit)
    assert ancestor == rec.parent_commit


def _lesson_names(rec: ExperimentRecord, hit: dict[str, Any]) -> None:
    where = f"{hit['file']}:{hit['line']} {hit['what']}"
    assert f"carries benchmark data (refused as leakage: {where}" in rec.lesson, rec.lesson
    assert rec.failure["message"].startswith(f"refused as leakage: {where}")


# --------------------------------------------------------------------------------------------- screened run
def test_the_memorisers_tables_are_real_dev_data(tables: dict[str, list[Any]]) -> None:
    """Test construction: each table holds the run's whole tiny sample and 12 more dev questions."""
    sample = {q.id for q in tables["sample"]}
    assert len(sample) == 12
    for name in ("evidence", "answer"):
        ids = [q.id for q in tables[name]]
        assert len(ids) == len(set(ids)) == TABLE_SIZE >= 20
        assert all(i.startswith(("conv-26:", "conv-30:")) for i in ids)  # dev conversations only
    assert sample <= {q.id for q in tables["evidence"]}
    assert all(q.answer.strip() for q in tables["answer"])


def test_legitimate_change_passes_the_screen_and_is_accepted(screened: Run) -> None:
    base, legit = screened.records[0], screened.records[1]
    assert base.decision == "baseline" and base.objective == "context_recall"
    assert legit.edits and [e["path"] for e in legit.edits] == [M.MERGE, M.MERGE]
    assert legit.config_overrides == IMPROVE["config_overrides"]
    # a real code change of the memorisers' size, committed beside the config change
    assert legit.diff_stats["files"] == 2
    merge = git(screened.repo, "show", f"{legit.commit}:{M.MERGE}")
    assert "order += sparse_only(sparse, seen)" in merge and "STRATEGY_NOTES" in merge
    assert legit.diff.count("\n+") >= 30
    assert legit.leakage["refused"] is False and legit.leakage["hits"] == []
    assert legit.failure is None and legit.decision == "proceed", legit.notes
    assert legit.objective_value > base.objective_value * 1.005 and legit.test["p_better"] < 0.05
    assert legit.check["passed"] is True
    # its gain is also supported where the researcher never saw the gold
    assert legit.shown_questions and legit.never_shown["supported"] is True
    assert legit.never_shown["shown"] == len(legit.shown_questions) and legit.never_shown["mean_delta"] > 0


def test_evidence_table_memoriser_is_refused_before_evaluation(screened: Run, tables: dict[str, list[Any]]) -> None:
    rec = screened.records[2]
    table = tables["evidence"]
    assert rec.hypothesis.startswith("a recall cache") and rec.parent_commit == screened.records[1].commit
    _refused_unevaluated(screened, rec)
    # the candidate was real: the table, its use in the ranking, and a config change were all committed
    code = git(screened.repo, "show", f"{rec.commit}:{M.RETRIEVER}")
    assert "out = _evidence_first(out, query, self.store)" in code
    assert all(repr(M.key(q.question)) in code for q in table)
    assert "top_k: 25" in git(screened.repo, "show", f"{rec.commit}:configs/memory/naive.yaml")
    # what the screen found: the evidence ids (beside the question text) and the quoted questions
    kinds = {h["kind"] for h in rec.leakage["hits"]}
    assert {"evidence_ids", "question_text"} <= kinds
    ids = {i for q in table for i in q.evidence}
    (ev,) = _hits(rec, "evidence_ids")
    assert ev["file"] == M.RETRIEVER and ev["count"] == len(ids) and set(ev["examples"]) <= ids
    assert ev["context"] == "beside question words" and ev["what"] == f"holds {len(ids)} evidence ids"
    line = _line_at(screened, rec.commit, M.RETRIEVER, ev["line"])
    assert ev["snippet"] == _clip(line) and any(f"'{i}'" in line for i in ev["examples"])
    (qt,) = _hits(rec, "question_text")
    assert qt["count"] >= 20  # 20 of the 24 here: a question of 5 words or fewer is not findable by its text
    _lesson_names(rec, ev)  # evidence ids come first in the lesson
    # the researcher was told, in the next step's prompt
    assert "carries benchmark data" in screened.prompts[2] and M.RETRIEVER in screened.prompts[2]


def test_answer_table_memoriser_is_refused_before_evaluation(screened: Run, tables: dict[str, list[Any]]) -> None:
    rec = screened.records[3]
    table = tables["answer"]
    assert rec.hypothesis.startswith("an answer cache")
    _refused_unevaluated(screened, rec)
    code = git(screened.repo, "show", f"{rec.commit}:{M.PREDICT}")
    assert '_KNOWN_ANSWERS.get(" ".join(question.question.lower().split()), rec["answer"])' in code
    assert "sparse_k: 30" in git(screened.repo, "show", f"{rec.commit}:configs/memory/naive.yaml")
    (ga,) = _hits(rec, "gold_answer")
    assert ga["file"] == M.PREDICT and ga["count"] >= 3 and ga["what"] == f"holds {ga['count']} gold answers as literals"
    answers = {normal(q.answer) for q in table}
    assert set(ga["examples"]) <= answers, (ga["examples"], sorted(answers)[:5])
    line = _line_at(screened, rec.commit, M.PREDICT, ga["line"])
    assert ga["snippet"] == _clip(line) and line.startswith(("    '", '    "'))  # a row of the table
    assert _hits(rec, "question_text") and not _hits(rec, "evidence_ids")
    _lesson_names(rec, ga)
    assert M.PREDICT in screened.prompts[3]  # told in the next step's prompt


def test_the_runs_best_is_the_legitimate_change(screened: Run) -> None:
    base, legit, ev, ans, forb = screened.records
    assert [r.decision for r in screened.records] == ["baseline", "proceed", "rejected", "rejected", "rejected"]
    assert forb.failure["cls"] == "forbidden_edit"  # the run's end, at the proposal cap
    st = screened.state
    assert st.status == "finished" and st.stop_reason == "proposal cap reached (4 proposals, 1 evaluated)"
    saved = json.loads((screened.run_dir / "state.json").read_text())
    assert saved["best_commit"] == legit.commit and saved["best_value"] == pytest.approx(legit.objective_value)
    assert git(screened.repo, "rev-parse", "refs/autoresearch/leak-screened/best") == legit.commit
    assert saved["evaluated"] == 1
    # what `memsys run` prints at the end names the legitimate change's value and commit
    console = Console(record=True, width=400)
    print_summary(console, screened.loop)
    printed = console.export_text()
    assert f"best {legit.objective_value:.4f} (start {base.objective_value:.4f}) at commit {legit.commit[:10]}" in printed


def test_confirmation_verdict_is_written_and_printed(screened: Run) -> None:
    saved = json.loads((screened.run_dir / "state.json").read_text())
    conf = saved["confirmation"]
    assert conf["split"] == "test" and conf["sample"] == SAMPLE and conf["objective"] == "context_recall"
    assert conf["runs"]["best"]["commit"] == screened.records[1].commit
    assert conf["runs"]["baseline"]["n_questions"] == conf["runs"]["best"]["n_questions"] == 12
    assert conf["test_paired"]["n"] == 12
    verdict = conf["verdict"]
    assert verdict == confirmation_verdict(conf, min_kept=0.5)
    # IMPROVE's gain (BM25 beside a weak dense list, 4x the candidates) holds on held-out conversations
    test_gain = conf["test"]["best"] - conf["test"]["baseline"]
    assert conf["test_paired"]["ci_low"] > 0 and test_gain > 0.5 * (conf["dev"]["best"] - conf["dev"]["baseline"])
    assert verdict["status"] == "confirmed" and verdict["confirmed"] is True
    assert verdict["line"].startswith(f"CONFIRMED on test: {test_gain:+.4f} [")
    console = Console(record=True, width=400)
    print_verdict(console, screened.state.confirmation)
    assert console.export_text().strip() == verdict["line"]
    summary = Console(record=True, width=400)
    print_summary(summary, screened.loop)
    assert f"; {verdict['line']}" in summary.export_text()


# --------------------------------------------------------------------------------------------- shown-only run
def test_shown_only_memoriser_is_not_taken(shown_only: Run) -> None:
    run, handler = shown_only, shown_only.handler
    assert handler.unexpected == [] and len(handler.shown) == 1
    shown_text = handler.shown[0]
    by_text = {M.key(q.question): q for q in M.dev_questions(SAMPLE)}
    shown_ids = sorted(by_text[M.key(t)].id for t in shown_text)
    assert len(shown_ids) == 6
    # the evidence it hard-coded is what the prompt showed, which is the gold evidence
    for text, ids in shown_text.items():
        assert tuple(ids) == by_text[M.key(text)].evidence
    base, rec = run.records
    assert rec.shown_questions == shown_ids
    assert rec.leakage == {} and "leakage_s" in rec.durations  # the screen is off: asked, nothing recorded
    # it gained on the shown questions only ...
    after = per_question("context_recall", read_rows(run.run_dir / rec.eval_dir))
    before = per_question("context_recall", read_rows(run.run_dir / base.eval_dir))
    assert sorted(after) == sorted(before) and len(after) == 12
    gained = sorted(q for q in after if after[q] > before[q])
    assert gained == shown_ids and all(after[q] == 1.0 for q in gained)
    assert all(after[q] == before[q] for q in after if q not in shown_ids)
    # ... which on the whole sample is a supported gain: without the never-shown check it would proceed
    assert rec.delta > 0 and rec.delta_rel >= 0.005 and rec.test["p_better"] < 0.05
    assert rec.test["n"] == 12 and rec.test["p_better"] == pytest.approx(1 / 64)
    ns = rec.never_shown
    assert ns["supported"] is False and ns["shown"] == 6 and ns["n"] == 6 and ns["mean_delta"] == 0.0
    assert rec.decision == "not_taken" and "not taken: the gain is not supported on the 6 questions" in rec.notes
    assert "(gained only where the researcher had seen the gold: +0.0000 on the 6 never-shown questions)" in rec.lesson
    # the best did not move
    st = run.state
    assert st.best_commit == base.commit and st.best_value == base.objective_value
    assert git(run.repo, "rev-parse", "refs/autoresearch/leak-shown/best") == base.commit
    saved = json.loads((run.run_dir / "state.json").read_text())
    assert saved["best_commit"] == base.commit and saved["evaluated"] == 1


# --------------------------------------------------------------------------------------------- the verdict, unit
def _record(dev: tuple[float, float], test: tuple[float, float] | None, ci: tuple[float, float] | None,
            same: bool = False) -> dict[str, Any]:
    runs = {"baseline": {"ok": True}, "best": {"ok": True}}
    if same:
        runs["best"] = {"ok": True, "same_as": "baseline"}
    return {"split": "test", "sample": "tiny", "objective": "context_recall",
            "dev": {"baseline": dev[0], "best": dev[1]},
            "test": {"baseline": test[0] if test else None, "best": test[1] if test else None},
            "runs": runs, "test_paired": {} if ci is None else {"n": 12, "mean_delta": 0.0, "ci_low": ci[0], "ci_high": ci[1]}}


@pytest.mark.parametrize("name, record, status, confirmed, line", [
    ("supported, keeps 75%", _record((0.2, 0.4), (0.3, 0.45), (0.05, 0.25)), "confirmed", True,
     "CONFIRMED on test: +0.1500 [+0.0500, +0.2500], 75% of the dev gain"),
    ("supported, keeps exactly 50%", _record((0.25, 0.75), (0.25, 0.5), (0.02, 0.4)), "confirmed", True,
     "CONFIRMED on test: +0.2500 [+0.0200, +0.4000], 50% of the dev gain"),
    ("CI includes 0", _record((0.2, 0.4), (0.3, 0.45), (-0.02, 0.3)), "not_confirmed", False,
     "NOT CONFIRMED on test: the test gain +0.1500 is not supported (paired CI [-0.0200, +0.3000] includes 0)"),
    ("CI touches 0", _record((0.2, 0.4), (0.3, 0.45), (0.0, 0.3)), "not_confirmed", False,
     "NOT CONFIRMED on test: the test gain +0.1500 is not supported (paired CI [+0.0000, +0.3000] includes 0)"),
    ("keeps 25%", _record((0.2, 0.4), (0.3, 0.35), (0.01, 0.09)), "not_confirmed", False,
     "NOT CONFIRMED on test: the test gain +0.0500 keeps 25% of the dev gain +0.2000 (< 50%)"),
    ("test fell", _record((0.2, 0.4), (0.3, 0.25), (-0.1, -0.01)), "not_confirmed", False,
     "NOT CONFIRMED on test: the test gain -0.0500 is not supported (paired CI [-0.1000, -0.0100] includes 0)"),
    ("best is the baseline", _record((0.2, 0.2), (0.3, 0.3), None, same=True), "no_gain", None,
     "no gain to confirm: the best commit is the baseline (dev and test unchanged)"),
    ("no paired comparison", _record((0.2, 0.4), None, None), "unknown", False,
     "NOT CONFIRMED on test: the held-out evaluation did not give a paired comparison"),
])
def test_confirmation_verdict(name: str, record: dict[str, Any], status: str, confirmed: bool | None, line: str) -> None:
    v = confirmation_verdict(record, min_kept=0.5)
    assert (v["status"], v["confirmed"], v["line"]) == (status, confirmed, line), name
    if status in ("confirmed", "not_confirmed") and record["test"]["best"] > record["test"]["baseline"]:
        dev_gain = record["dev"]["best"] - record["dev"]["baseline"]
        assert v["kept"] == pytest.approx((record["test"]["best"] - record["test"]["baseline"]) / dev_gain)
    # what `memsys run` prints last, and what it prints for a saved record without a verdict (older runs)
    for rec in (record | {"verdict": v}, record):
        console = Console(record=True, width=400)
        print_verdict(console, rec)
        assert console.export_text() == line + "\n"


def test_print_verdict_prints_nothing_without_a_confirmation() -> None:
    for conf in (None, {}, {"split": "test"}):
        console = Console(record=True, width=400)
        print_verdict(console, conf)
        assert console.export_text() == ""


def test_a_stricter_share_turns_the_same_record_into_not_confirmed() -> None:
    record = _record((0.2, 0.4), (0.3, 0.45), (0.05, 0.25))  # keeps 75%
    assert confirmation_verdict(record, min_kept=0.8)["status"] == "not_confirmed"
    assert confirmation_verdict(record, min_kept=0.75)["status"] == "confirmed"


# --------------------------------------------------------------------------------------------- every question shown
def test_a_run_can_show_every_question_of_its_sample(shown_all: Run) -> None:
    """The premise of the next test: the diagnosis showed all 12 questions, and hard-coding them is a perfect
    score on dev that no other question supports."""
    base, rec = shown_all.records
    assert shown_all.handler.unexpected == []
    assert rec.shown_questions == sorted(q.id for q in M.dev_questions(SAMPLE))
    assert base.objective_value == 0.0 and rec.objective_value == 1.0
    assert rec.never_shown["supported"] is False and rec.never_shown["n"] == 0
    assert rec.check == {}  # refused before the disjoint slice is evaluated (a memoriser's 0 there would "hold")


def test_a_memoriser_shown_every_question_is_not_accepted(shown_all: Run) -> None:
    base, rec = shown_all.records
    assert rec.decision == "not_taken", rec.notes
    assert "no never-shown question is left" in rec.notes
    assert shown_all.state.best_commit == base.commit
