"""Replay of recorded trajectories (research/replay.py), end to end.

A small run is recorded on a throwaway git repo with the real loop (git worktrees, the process
sandbox running ``benchmarks.cli eval`` on the LoCoMo tiny sample, reader=none so every metric
is deterministic), the researcher's replies scripted through :class:`OpenAITestServer`. It is
then replayed from its base commit and every replayed number must equal the recorded one
exactly. A second, reader=llm run goes through the same scripted server with the LLM response
cache on, so its replay answers from the cache and matches too.

Recorded run (module fixture, 3 evaluations after the baseline; rejected and failed experiments do
not spend the budget, so the run ends at the proposal cap, research.loop.max_proposals_factor=1 x 6):

    exp-000 baseline  naive preset: dense_only, top_k 5
    exp-001 proceed   code edit (SEARCH/REPLACE in configs/memory/naive.yaml): set_union, top_k 10
    exp-002 proceed   config override: a far deeper hybrid list (top_k, dense_k, sparse_k 40)
    exp-003 iterate   config override: top_k 2, sparse_k 2 (a significant degradation)
    exp-004 rejected  a code edit without effect (a YAML comment): the effective config and code of exp-002,
                      already evaluated (identical_conditions, never evaluated again)
    exp-005 failed    the researcher's reply is not JSON (nothing to re-apply)
    exp-006 rejected  an edit of the scorer (outside the mutable surface)
"""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
from pathlib import Path
from typing import Any, Iterator

import pytest
from PIL import Image

from research.errors import RunStateError
from research.journal.trajectory import ExperimentRecord, read_trajectory
from research.loop.research_loop import ResearchLoop
from research.loop.state import LoopState
from research.replay import replay_run
from research.report.build import write_report
from research.workspace.repo import make_scratch_repo
from tests.support.loop import FORBIDDEN, git, scripted_opener, scripted_setup
from tests.support.openai_server import OpenAITestServer, Reply
from tests.support.report_page import Page

#: one worker runs the whole module: its recorded runs (a module fixture) are built once, not once per worker
pytestmark = pytest.mark.xdist_group("replay")

MAIN = Path(__file__).resolve().parents[2]
PRESET = "configs/memory/naive.yaml"
SCHEMA = json.loads((MAIN / "research" / "journal" / "trajectory.schema.json").read_text(encoding="utf-8"))
#: metrics that measure time or money, not the memory system: a replay cannot reproduce them
#: (cost_usd: a reply served from the LLM cache is not billed)
VOLATILE = {"wall_s", "seconds_per_question", "cost_usd", "reader_billed_tokens", "reader_cache_hits"}

CODE_EDIT = {
    "hypothesis": "hybrid candidates (dense then BM25) and a deeper list raise recall",
    "discovery_type": "architectural_change",
    "expected_effect": "recall@10 up",
    "config_overrides": [],
    "edits": [{"path": PRESET,
               "search": "  top_k: 5\n  dense_k: 5\n  sparse_k: 5\n  merge: dense_only\n",
               "replace": "  top_k: 10\n  dense_k: 5\n  sparse_k: 5\n  merge: set_union\n"}],
}
# significant on the tiny sample's 12 questions: it adds the evidence of 5 questions and loses none
IMPROVE = {
    "hypothesis": "a far deeper hybrid list reaches the evidence the first ten candidates miss",
    "discovery_type": "hyperparameter_tuning",
    "expected_effect": "context recall up",
    "config_overrides": ["retrieval.top_k=40", "retrieval.dense_k=40", "retrieval.sparse_k=40"],
    "edits": [],
}
DEGRADE = {
    "hypothesis": "fewer candidates give a more precise context",
    "discovery_type": "hyperparameter_tuning",
    "expected_effect": "precision up",
    "config_overrides": ["retrieval.top_k=2", "retrieval.sparse_k=2"],
    "edits": [],
}
NO_EFFECT = {
    "hypothesis": "document the preset",
    "discovery_type": "bug_fix",
    "expected_effect": "none",
    "config_overrides": [],
    "edits": [{"path": PRESET, "search": "name: naive\n", "replace": "name: naive  # where the research starts\n"}],
}
RECORDED_DECISIONS = ["baseline", "proceed", "proceed", "iterate", "rejected", "failed", "rejected"]
EVALUATED = ("exp-000", "exp-001", "exp-002", "exp-003")


# --------------------------------------------------------------------------- helpers
opener_for = scripted_opener


def evals_of(run_dir: Path, experiment_id: str) -> list[Path]:
    """Evaluation folders of one experiment (``evals/<exp-id><tag>-<key>``)."""
    return sorted((run_dir / "evals").glob(f"{experiment_id}-*"))


def by_id(records: list[ExperimentRecord]) -> dict[str, ExperimentRecord]:
    return {r.experiment_id: r for r in records}


def stable(metrics: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metrics.items() if k not in VOLATILE}


def check_schema(line: dict[str, Any]) -> None:
    """The parts of research/journal/trajectory.schema.json a record can violate (no jsonschema dependency)."""
    kinds = {"string": str, "integer": int, "number": (int, float), "object": dict, "array": list,
             "boolean": bool, "null": type(None)}
    missing = [k for k in SCHEMA["required"] if k not in line]
    assert not missing, f"record lacks {missing}"
    for key, rule in SCHEMA["properties"].items():
        if key not in line:
            continue
        v = line[key]
        if "const" in rule:
            assert v == rule["const"], key
        if "enum" in rule:
            assert v in rule["enum"], f"{key}={v!r}"
        if "type" in rule:
            types = rule["type"] if isinstance(rule["type"], list) else [rule["type"]]
            ok = any(isinstance(v, kinds[t]) and not (t in ("integer", "number") and isinstance(v, bool))
                     for t in types)
            assert ok, f"{key}={v!r} is not {types}"


def trajectory_lines(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "trajectory.jsonl").read_text(encoding="utf-8").splitlines()]


def replay_json(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "replay.json").read_text(encoding="utf-8"))


def tree(repo: Path, commit: str) -> str:
    return git(repo, "rev-parse", f"{commit}^{{tree}}")


def assert_clean(repo: Path, run_dir: Path, head: str) -> None:
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "rev-parse", "HEAD") == head
    wt = run_dir / "worktrees"
    assert not wt.exists() or not any(wt.iterdir())
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's sources in a fresh git repo (one per module: several runs share it)."""
    return make_scratch_repo(tmp_path_factory.mktemp("replay") / "repo")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    d = tmp_path_factory.mktemp("replay-runs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MEMSYS_RUNS_DIR", str(d))  # the cache stays the session's (stores built once)
        yield d


@pytest.fixture(scope="module")
def recorded(repo: Path, runs: Path) -> dict[str, Any]:
    """The recorded run 'rec' (see the module docstring)."""
    with OpenAITestServer() as server:
        server.handler = lambda body: Reply.ok("UNSCRIPTED")  # an unscripted request fails loudly
        server.enqueue(Reply.of_json(CODE_EDIT), Reply.of_json(IMPROVE), Reply.of_json(DEGRADE),
                       Reply.of_json(NO_EFFECT), Reply.ok("raise top_k, I think. {not json"),
                       Reply.ok("{again not json"), Reply.of_json(FORBIDDEN))  # the slip, then its resample
        head = git(repo, "rev-parse", "HEAD")
        st = ResearchLoop(scripted_setup(repo, 6, "research.loop.max_proposals_factor=1"), "rec",
                          llm_opener=opener_for(server)).run()
        assert server.pending == 0
    records, warnings = read_trajectory(runs / "rec", strict=True)
    assert warnings == [] and st.stop_reason == "proposal cap reached (6 proposals, 3 evaluated)"
    assert [r.decision for r in records] == RECORDED_DECISIONS, [(r.experiment_id, r.decision, r.objective_value, r.failure) for r in records]
    return {"run_id": "rec", "dir": runs / "rec", "records": records, "head": head, "state": st}


@pytest.fixture(scope="module")
def replayed(recorded: dict[str, Any], runs: Path) -> Path:
    return replay_run("rec", new_run_id="rep")


# --------------------------------------------------------------------------- (a) exact replay
@pytest.mark.slow
def test_replay_reproduces_every_metric_and_decision(recorded: dict[str, Any], replayed: Path, repo: Path) -> None:
    orig = by_id(recorded["records"])
    assert replayed == recorded["dir"].parent / "rep"
    rj = replay_json(replayed)
    assert rj["original_run_id"] == "rec" and rj["only"] == "all" and rj["overrides"] == [] and rj["warnings"] == []
    assert rj["objective"] == "context_recall"
    assert rj["original_wall_s"] == pytest.approx(recorded["state"].elapsed_s)
    assert 0 < rj["wall_s"]
    steps = {s["experiment_id"]: s for s in rj["steps"]}
    assert list(steps) == [f"exp-{i:03d}" for i in range(7)]

    # every evaluated step: the same objective, the same metrics, the same decision
    records, warnings = read_trajectory(replayed, strict=True)
    rep = by_id(records)
    for exp in EVALUATED:
        s, o, r = steps[exp], orig[exp], rep[exp]
        assert s["status"] == "ok", s
        assert s["recorded"] == o.objective_value and s["replayed"] == o.objective_value, s
        assert s["delta"] == 0.0
        assert s["recorded_decision"] == s["replayed_decision"] == o.decision and s["holds"] is True
        assert r.objective_value == o.objective_value and r.decision == o.decision
        assert stable(r.metrics) == stable(o.metrics)  # exact: reader=none is deterministic
        assert set(r.metrics) == set(o.metrics)
        assert r.eval_run_id and r.eval_dir.startswith(f"evals/{exp}-") and (replayed / r.eval_dir / "result.json").is_file()
        # the same code: the replayed commit has the recorded commit's tree
        assert tree(repo, r.commit) == tree(repo, o.commit)
    # the values really moved: two proceeds, then a degradation
    v = [orig[e].objective_value for e in EVALUATED]
    assert v[0] < v[1] < v[2] and v[3] < v[2]
    assert orig["exp-003"].degraded and rep["exp-003"].degraded  # so exp-004 started from the best (exp-002) again
    # the YAML comment is exp-002's effective config and code: rejected again after apply, never evaluated
    s4 = steps["exp-004"]
    assert s4["status"].startswith("rejected: identical_conditions: repeats exp-002") and s4["holds"] is True
    assert s4["recorded"] is None and s4["replayed"] is None and s4["delta"] is None
    for run in (orig, rep):
        r = run["exp-004"]
        assert r.failure["stage"] == "apply" and r.effective_key == run["exp-002"].effective_key
        assert r.notes == f"known value {v[2]:.4f}" and "name: naive  # where the research starts" in r.diff
    assert evals_of(recorded["dir"], "exp-004") == [] and evals_of(replayed, "exp-004") == []
    assert rep["exp-001"].delta == pytest.approx(v[1] - v[0]) and rep["exp-003"].delta < 0
    assert "configs/memory/naive.yaml" in rep["exp-001"].diff and rep["exp-001"].diff_stats["files"] == 1

    # nothing to re-apply: skipped without an evaluation, counted as the failure it was
    s5 = steps["exp-005"]
    assert s5["status"].startswith("skipped: nothing to re-apply") and s5["replayed"] is None
    assert s5["holds"] is None and rep["exp-005"].decision == "failed" and rep["exp-005"].eval_run_id is None
    assert evals_of(replayed, "exp-005") == []
    # the forbidden edit is refused again, before any evaluation
    s6 = steps["exp-006"]
    assert s6["status"].startswith("rejected: ") and "outside the mutable surface" in s6["status"]
    assert s6["replayed_decision"] == "rejected" and s6["holds"] is True
    assert rep["exp-006"].failure["cls"] == "forbidden_edit" and evals_of(replayed, "exp-006") == []

    # the replay's journal: valid, in order, linked to its own run
    assert warnings == []
    lines = trajectory_lines(replayed)
    assert [d["experiment_id"] for d in lines] == list(steps)
    for d in lines:
        check_schema(d)
        assert d["run_id"] == "rep" and d["proposer"] == ("baseline" if d["index"] == 0 else "replay")
    assert [r.decision for r in records] == RECORDED_DECISIONS
    assert rep["exp-002"].parent_commit == rep["exp-001"].commit  # applied on the replayed best
    assert rep["exp-003"].parent_commit == rep["exp-002"].commit

    # state, refs, config and hygiene
    st = LoopState.load(replayed)
    assert st.status == "finished" and "replay of rec" in st.stop_reason and st.next_index == 7
    assert st.best_value == orig["exp-002"].objective_value and st.best_commit == rep["exp-002"].commit
    assert st.base_commit == recorded["state"].base_commit == recorded["head"]
    # failures counted as the loop counts them: (degraded exp-003 + rejected exp-004) and (failed exp-005 +
    # rejected exp-006) made a pivot each, in both runs
    rs = recorded["state"]
    assert rs.pivots == 2 and (rs.evaluated, rs.proposals) == (3, 6)
    assert (st.evaluated, st.proposals) == (rs.evaluated, rs.proposals)
    assert (st.pivots, st.consecutive_degradations, st.iterations_on_hypothesis) == (
        rs.pivots, rs.consecutive_degradations, rs.iterations_on_hypothesis)
    assert git(repo, "rev-parse", "refs/autoresearch/rep/best") == rep["exp-002"].commit
    cfg = json.loads((replayed / "config.json").read_text())
    assert cfg["replay_of"] == "rec" and cfg["config"]["research"]["proposer"] == "optuna"
    assert_clean(repo, replayed, recorded["head"])
    # the original run is untouched
    assert [r.to_json() for r in read_trajectory(recorded["dir"], strict=True)[0]] == [r.to_json() for r in recorded["records"]]


# --------------------------------------------------------------------------- (c) accepted steps only
@pytest.mark.slow
def test_replay_only_accepted_is_the_cumulative_path(recorded: dict[str, Any], repo: Path) -> None:
    orig = by_id(recorded["records"])
    out = replay_run("rec", only="accepted", new_run_id="rep-accepted")
    rj = replay_json(out)
    assert rj["only"] == "accepted" and rj["original_run_id"] == "rec"
    steps = rj["steps"]
    assert [s["experiment_id"] for s in steps] == ["exp-000", "exp-001", "exp-002"]
    assert [s["index"] for s in steps] == [0, 1, 2]
    for s in steps:
        assert s["status"] == "ok" and s["holds"] is True
        assert s["replayed"] == s["recorded"] == orig[s["experiment_id"]].objective_value
    vals = [s["replayed"] for s in steps]
    assert vals[0] < vals[1] < vals[2]  # each accepted step adds its gain on top of the last
    records, _ = read_trajectory(out, strict=True)
    assert [r.decision for r in records] == ["baseline", "proceed", "proceed"]
    gains = [r.delta for r in records[1:]]
    assert gains == [pytest.approx(vals[1] - vals[0]), pytest.approx(vals[2] - vals[1])] and all(g > 0 for g in gains)
    assert sum(gains) == pytest.approx(vals[2] - vals[0])
    assert records[2].parent_commit == records[1].commit
    assert tree(repo, records[2].commit) == tree(repo, orig["exp-002"].commit)
    assert LoopState.load(out).best_value == orig["exp-002"].objective_value
    assert_clean(repo, out, recorded["head"])


# --------------------------------------------------------------------------- (d) bad input
def test_replay_unknown_run_is_one_line_naming_known_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = tmp_path / "runs"
    for name in ("alpha", "beta"):
        (runs / name).mkdir(parents=True)
        (runs / name / "trajectory.jsonl").write_text("", encoding="utf-8")
    (runs / "cache").mkdir()  # not a run
    monkeypatch.setenv("MEMSYS_RUNS_DIR", str(runs))
    with pytest.raises(RunStateError) as ei:
        replay_run("nope")
    msg = str(ei.value)
    assert "\n" not in msg
    assert "no run 'nope'" in msg and "known: alpha, beta" in msg and "cache" not in msg.split("known:")[1]
    with pytest.raises(RunStateError, match="must be one of all, accepted"):
        replay_run("alpha", only="accept")


@pytest.mark.slow
def test_replay_of_a_damaged_trajectory_warns_and_continues(recorded: dict[str, Any], runs: Path, repo: Path) -> None:
    """A record cut off mid-line is skipped with a warning; an edit that no longer applies fails its
    step only, and the replay goes on with the next one."""
    src = runs / "rec-damaged"
    shutil.copytree(recorded["dir"], src, ignore=shutil.ignore_patterns("evals", "worktrees", "report*"))
    lines = trajectory_lines(src)
    assert lines[1]["experiment_id"] == "exp-001" and lines[1]["edits"][0]["path"] == PRESET
    lines[1]["edits"][0]["search"] = "  merge: this_text_is_not_in_the_preset\n"
    text = "".join(json.dumps(d, sort_keys=True) + "\n" for d in lines)
    text += '{"run_id": "rec", "index": 7, "experiment_id": "exp-007", "deci'  # killed mid-write
    (src / "trajectory.jsonl").write_text(text, encoding="utf-8")

    out = replay_run("rec-damaged", only="accepted", new_run_id="rep-damaged")
    rj = replay_json(out)
    assert len(rj["warnings"]) == 1 and "incomplete record" in rj["warnings"][0] and ":8:" in rj["warnings"][0]
    steps = {s["experiment_id"]: s for s in rj["steps"]}
    assert list(steps) == ["exp-000", "exp-001", "exp-002"]
    assert steps["exp-000"]["status"] == "ok"
    assert steps["exp-000"]["replayed"] == recorded["records"][0].objective_value
    bad = steps["exp-001"]
    assert bad["status"].startswith("failed: format_mismatch: ") and "SEARCH text not found" in bad["status"]
    assert bad["replayed"] is None and bad["replayed_decision"] == "failed" and bad["holds"] is False
    assert "this_text_is_not_in_the_preset" in bad["status"]
    nxt = steps["exp-002"]  # continued: the next accepted step, applied on the baseline now
    assert nxt["status"] == "ok" and isinstance(nxt["replayed"], float)
    records, warnings = read_trajectory(out, strict=True)
    assert warnings == []
    rep = by_id(records)
    assert rep["exp-001"].decision == "failed" and rep["exp-001"].failure["cls"] == "format_mismatch"
    assert rep["exp-001"].failure["stage"] == "apply" and rep["exp-001"].eval_run_id is None
    assert rep["exp-002"].parent_commit == rep["exp-000"].commit  # the failed step never became the best
    assert git(repo, "show", f"{rep['exp-001'].commit}:{PRESET}") == git(repo, "show", f"{recorded['head']}:{PRESET}")
    assert_clean(repo, out, recorded["head"])
    # the report lists the replay's warning
    page = (write_report(out)).read_text(encoding="utf-8")
    assert "replay: " in page and "incomplete record" in page


# --------------------------------------------------------------------------- (e) the report of a replay
@pytest.mark.slow
def test_report_of_a_replay_has_its_figure_and_table(recorded: dict[str, Any], replayed: Path) -> None:
    out = write_report(replayed)
    assert out == replayed / "report" / "report.html"
    text = out.read_text(encoding="utf-8")
    page = Page(text)
    assert "Replay of rec" in page.headings
    assert page.meta["replay of"] == "rec" and page.meta["status"] == "finished"
    assert page.meta["benchmark / split"] == "locomo / dev"  # from the replay's config.json
    assert "6 of 6 decisions still hold" in text
    dur = r"(?:\d+h \d\dm|\d+m \d\ds|\d+s)"  # report.fmt_duration, whichever side of a minute each lands
    assert re.search(rf"replay took {dur}(?: \(original run {dur}\))?", text)

    rows = page.table("replay")
    assert rows[0] == ["step", "experiment", "recorded", "replayed", "Δ", "decision", "replayed decision",
                       "still holds", "status"]
    body = {r[1]: r for r in rows[1:]}
    assert list(body) == [f"exp-{i:03d}" for i in range(7)]
    orig = by_id(recorded["records"])
    for exp in EVALUATED:
        row = body[exp]
        assert row[2] == row[3] == f"{orig[exp].objective_value:.4f}"
        assert row[4] == "+0.0000" and row[5] == row[6] == orig[exp].decision and row[7] == "yes" and row[8] == "ok"
    assert body["exp-005"][3] == "—" and body["exp-005"][7] == "—" and body["exp-005"][8].startswith("skipped")
    assert body["exp-006"][6] == "rejected" and body["exp-006"][7] == "yes"

    # the figure: a real PNG, on disk and inlined in the page
    png = replayed / "report" / "replay.png"
    with Image.open(png) as im:
        assert im.format == "PNG" and im.size[0] > 300 and im.size[1] > 150
    inlined = [base64.b64decode(i["src"].split(",", 1)[1]) for i in page.imgs if i.get("alt") == "original vs replay"]
    assert inlined == [png.read_bytes()]
    with Image.open(io.BytesIO(inlined[0])) as im:
        assert im.format == "PNG"
    # the trajectory of the replay itself is drawn and tabled as a run
    exp_rows = page.table("experiments")
    assert [r[1] for r in exp_rows[1:]] == [f"exp-{i:03d}" for i in range(7)]
    # a proposal rejected before evaluation is named by why (research.journal.taxonomy.REJECTION_LABELS)
    assert [r[2] for r in exp_rows[1:]] == [*RECORDED_DECISIONS[:4], "rejected repeat", *RECORDED_DECISIONS[5:]]


# --------------------------------------------------------------------------- (b) reader=llm, cache on
def _reader_reply(body: dict[str, Any]) -> str:
    """A deterministic 'reader': the first words of the first memory in the prompt."""
    user = next((m["content"] for m in body.get("messages", []) if m.get("role") == "user"), "")
    after = user.split("Memories (most relevant first):", 1)[-1].strip().splitlines()
    first = next((line for line in after if line.strip()), "")
    words = re.sub(r"\[[^\]]*\]", " ", re.sub(r"^\s*\d+\.", "", first)).split()
    return " ".join(words[:6]) or "unknown"


@pytest.mark.slow
def test_replay_with_llm_reader_hits_the_cache(repo: Path, runs: Path) -> None:
    proposals = [CODE_EDIT]
    reader_calls: list[str] = []

    def handler(body: dict[str, Any]) -> Reply:
        if body.get("response_format"):  # the researcher (structured output)
            return Reply.of_json(proposals.pop(0)) if proposals else Reply.ok("UNSCRIPTED")
        reply = _reader_reply(body)
        reader_calls.append(reply)
        return Reply.ok(reply)

    head = git(repo, "rev-parse", "HEAD")
    with OpenAITestServer(handler) as server:
        setup = scripted_setup(repo, 1, "reader=llm", "++llm.cache=true")
        st = ResearchLoop(setup, "rec-llm", llm_opener=opener_for(server)).run()
        assert st.stop_reason == "experiment budget spent (1/1 evaluated)" and proposals == []
        orig, _ = read_trajectory(runs / "rec-llm", strict=True)
        assert [r.decision for r in orig][0] == "baseline" and orig[1].decision in ("proceed", "iterate", "pivot")
        assert all(r.objective == "all_honest" and r.objective_value is not None for r in orig)
        # tiny: 12 questions per evaluation with the reader (baseline, exp-001, and for a proceed the check
        # slice of the candidate and of the best); the reader-free screen asks nothing
        assert reader_calls and len(reader_calls) <= 12 * (2 + (2 if orig[1].check.get("eval_dir") else 0))
        assert any(r.metrics["all_honest"] > 0 for r in orig)  # the scripted reader scores something
        calls_before = len(server.chat_requests)

        # the replay: every reader request is in the cache; a miss would be answered differently
        server.handler = lambda body: Reply.ok("CACHE MISS: a different answer")
        out = replay_run("rec-llm", new_run_id="rep-llm", llm_opener=opener_for(server))
        assert len(server.chat_requests) == calls_before, "the replay asked the server instead of the cache"

    rj = replay_json(out)
    assert rj["original_run_id"] == "rec-llm" and [s["status"] for s in rj["steps"]] == ["ok", "ok"]
    rep, _ = read_trajectory(out, strict=True)
    for o, r, s in zip(orig, rep, rj["steps"]):
        assert s["replayed"] == s["recorded"] == o.objective_value and s["holds"] is True
        assert r.decision == o.decision
        assert stable(r.metrics) == stable(o.metrics)
        assert r.metrics["prompt_tokens"] > 0 and r.metrics["n_errors"] == 0
        preds = [json.loads(x)["prediction"] for x in
                 (out / r.eval_dir / "predictions.jsonl").read_text().splitlines()]
        assert preds and not any("CACHE MISS" in p for p in preds)
    assert git(repo, "rev-parse", "HEAD") == head and git(repo, "status", "--porcelain") == ""


# --------------------------------------------------------------------------- (f) a run of research.parallel=2
@pytest.mark.slow
def test_replay_of_a_parallel_run_reproduces_its_rounds(repo: Path, runs: Path) -> None:
    """Two rounds of two candidates (each round one batched researcher request): a code edit taken beside
    a degradation, then a deeper list taken beside the same degradation on the new best. The replay
    regroups the rounds and decides them by the round's rule: the same rows, not_taken included."""
    head = git(repo, "rev-parse", "HEAD")
    with OpenAITestServer() as server:
        server.handler = lambda body: Reply.ok("UNSCRIPTED")
        server.enqueue(Reply.of_json({"proposals": [CODE_EDIT, DEGRADE]}), Reply.of_json({"proposals": [IMPROVE, DEGRADE]}))
        setup = scripted_setup(repo, 4, "research.parallel=2", "research.loop.check=false")
        ResearchLoop(setup, "rec-k2", llm_opener=opener_for(server)).run()
        assert len(server.chat_requests) == 2 and server.pending == 0
    orig, _ = read_trajectory(runs / "rec-k2", strict=True)
    assert [r.decision for r in orig] == ["baseline", "proceed", "not_taken", "proceed", "not_taken"]
    assert [r.round_of for r in orig] == [None, 1, 1, 3, 3]

    out = replay_run("rec-k2", new_run_id="rep-k2")
    rep, warnings = read_trajectory(out, strict=True)
    assert warnings == [] and [r.experiment_id for r in rep] == [r.experiment_id for r in orig]
    for o, r in zip(orig, rep):
        assert (r.decision, r.objective_value, r.round_of) == (o.decision, o.objective_value, o.round_of)
        assert stable(r.metrics) == stable(o.metrics) and r.diff == o.diff
        assert tree(repo, r.commit) == tree(repo, o.commit)
    # both candidates of a round start from the same best; the second round from the first's taken one
    assert rep[1].parent_commit == rep[2].parent_commit == rep[0].commit
    assert rep[3].parent_commit == rep[4].parent_commit == rep[1].commit
    assert all("not taken: exp-00" in r.notes for r in rep if r.decision == "not_taken")
    steps = replay_json(out)["steps"]
    assert [s["holds"] for s in steps] == [True] * 5 and all(s["status"] == "ok" for s in steps)
    for line in trajectory_lines(out):
        check_schema(line)
    st, rs = LoopState.load(out), LoopState.load(runs / "rec-k2")
    assert (st.best_value, st.evaluated, st.proposals) == (rs.best_value, rs.evaluated, rs.proposals)
    assert tree(repo, st.best_commit) == tree(repo, rs.best_commit)
    assert_clean(repo, out, head)
