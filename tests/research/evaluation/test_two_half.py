"""Both halves of an evaluation in one process (memsys.predict answers, benchmarks scores):
real stores, real FAISS/BM25, the OpenAI test server as reader. The sandboxed path and
the attacks on it are in test_two_half_eval_sandbox.py and test_attacks.py."""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import replace

import pytest

from benchmarks.config import PROMPT_RESERVE_TOKENS, baseline_budget, load_eval_setup
from benchmarks.datasets import load_benchmark
from benchmarks.runner import PREDICTIONS, RunFolderError
from harness.errors import ConfigError, LLMAuthError, LLMServerError
from harness.views import ANSWERS_FILE
from memsys.llm.client import LLMClient
from research.evaluation.fixed import run_in_process
from tests.support.openai_server import OpenAITestServer, Reply

BASE = ["benchmark=locomo", "split=dev", "sample=tiny", "memory=naive", "mlflow=false", "workers=2"]


def setup_for(*extra: str):
    return load_eval_setup([*BASE, *extra])


def run_eval(setup, llm=None, progress=False):
    return run_in_process(setup, BASE, llm=llm)


@contextmanager
def reader(server: OpenAITestServer, setup):
    cfg = replace(setup.llm, backend="openai", base_url=server.base_url, cache=False, max_retries=0, timeout_s=10)
    with LLMClient(cfg) as client:
        yield client


def test_retrieval_only_run_writes_the_run_folder(locomo_path):
    res = run_eval(setup_for("reader=none", "run_id=t-none"), progress=False)
    rows = [json.loads(l) for l in (res.run_dir / PREDICTIONS).read_text().splitlines()]
    assert res.n_questions == len(rows) == 12 and res.n_errors == 0
    assert len({r["question_id"] for r in rows}) == 12
    assert res.objective == "context_recall" and 0.0 <= res.objective_value <= 1.0
    m = json.loads((res.run_dir / "metrics.json").read_text())
    assert m["n"] == 12 and "recall_at_5" in m and "context_tokens" in m
    assert all(r["retrieved_ids"] and r["context_tokens"] > 0 for r in rows)
    meta = json.loads((res.run_dir / "run.json").read_text())
    assert meta["format_version"] == 1 and meta["split"] == "dev" and meta["sample"] == "tiny"
    assert "R@10" in res.table and "overall" in res.table


def test_killed_run_resumes_without_duplicates(locomo_path):
    full = run_eval(setup_for("reader=none", "run_id=t-full"), progress=False)
    part = run_eval(setup_for("reader=none", "run_id=t-resume"), progress=False)
    answers = part.run_dir / "untrusted" / "out" / ANSWERS_FILE
    lines = answers.read_text().splitlines()
    answers.write_text("\n".join(lines[:4]) + "\n" + lines[4][: len(lines[4]) // 2])  # killed mid-write
    again = run_eval(setup_for("reader=none", "run_id=t-resume"), progress=False)
    assert len(answers.read_text().splitlines()) == 12
    rows = [json.loads(l) for l in (part.run_dir / PREDICTIONS).read_text().splitlines()]
    assert len(rows) == 12 and len({r["question_id"] for r in rows}) == 12
    assert again.metrics["recall_at_10"] == pytest.approx(full.metrics["recall_at_10"])


def test_run_folder_from_another_version_is_refused(locomo_path, tmp_path):
    res = run_eval(setup_for("reader=none", "run_id=t-old"), progress=False)
    meta = json.loads((res.run_dir / "run.json").read_text())
    meta["format_version"] = 0
    (res.run_dir / "run.json").write_text(json.dumps(meta))
    with pytest.raises(RunFolderError, match="format 0"):
        run_eval(setup_for("reader=none", "run_id=t-old"), progress=False)


def test_a_run_resumes_across_placement_settings_but_not_across_what_it_answers(locomo_path):
    """Where and how fast a run goes (workers, sandbox, time limit, executor options, which a later
    version may add) never orphans its answers; a config that changes them is refused, naming the key."""
    first = run_eval(setup_for("reader=none", "run_id=t-place"), progress=False)
    meta_path = first.run_dir / "run.json"
    meta = json.loads(meta_path.read_text())
    meta["config"]["research"]["ray"].pop("node_llm")  # a run folder from before that option existed
    meta_path.write_text(json.dumps(meta))
    again = run_eval(setup_for("reader=none", "run_id=t-place", "workers=1", "sandbox_timeout_s=900"), progress=False)
    assert again.metrics["recall_at_10"] == pytest.approx(first.metrics["recall_at_10"])
    with pytest.raises(RunFolderError, match=r"different config \(memory\)"):
        run_eval(setup_for("reader=none", "run_id=t-place", "memory.retrieval.top_k=3"), progress=False)


def test_a_run_resumes_only_on_the_memsys_code_that_began_it(locomo_path, tmp_path):
    """Resuming keeps the answers already written: answers from a changed memory system (here one prompt
    line) must not be scored as one system's. The same code resumes; a folder without the record still does."""
    code = tmp_path / "tree"
    (code / "memsys").mkdir(parents=True)
    prompt = code / "memsys" / "constraints.txt"
    prompt.write_text("- Answer briefly.\n")
    first = run_in_process(setup_for("reader=none", "run_id=t-code"), BASE, code_root=code)
    made_by = json.loads((first.run_dir / "run.json").read_text())["code"]
    assert made_by and run_in_process(setup_for("reader=none", "run_id=t-code"), BASE, code_root=code).n_questions == 12
    prompt.write_text("- Answer briefly; say Not mentioned. when unsure.\n")
    with pytest.raises(RunFolderError, match=rf"other memsys code \({made_by[:12]}"):
        run_in_process(setup_for("reader=none", "run_id=t-code"), BASE, code_root=code)
    again = run_in_process(setup_for("reader=none", "run_id=t-code-new"), BASE, code_root=code)
    assert json.loads((again.run_dir / "run.json").read_text())["code"] != made_by
    meta_path = first.run_dir / "run.json"
    meta = json.loads(meta_path.read_text())
    meta.pop("code")  # written before the code was recorded
    meta_path.write_text(json.dumps(meta))
    assert run_in_process(setup_for("reader=none", "run_id=t-code"), BASE, code_root=code).n_questions == 12


def test_recent_window_baseline_respects_its_budget(locomo_path):
    res = run_eval(setup_for("reader=none", "system=recent_window", "full_context_budget=1500", "run_id=t-rw"),
                   progress=False)
    rows = [json.loads(l) for l in (res.run_dir / PREDICTIONS).read_text().splitlines()]
    assert all(0 < r["context_tokens"] <= 1500 for r in rows)
    assert res.metrics["system"] == "recent_window" and res.metrics["whole_conversations"] == "0/2"
    assert 0 < res.metrics["context_depth"] < 100 and "system=recent_window" in res.table


def test_full_context_gives_the_whole_conversation_when_the_window_allows(locomo_path):
    """A 64k-token reader window holds a LoCoMo conversation (~16-26k tokens): every turn, every question."""
    res = run_eval(setup_for("reader=none", "system=full_context", "llm.local.n_ctx=65536", "run_id=t-fc-whole"),
                   progress=False)
    bench = load_benchmark("locomo")
    turns = {c.id: {t.id for s in c.sessions for t in s.turns} for c in bench.conversations}
    answers = [json.loads(l) for l in (res.run_dir / "untrusted" / "out" / ANSWERS_FILE).read_text().splitlines()]
    assert len(answers) == 12
    for a in answers:
        assert set(a["context_ids"]) == turns[a["question_id"].rsplit(":", 1)[0]]
    assert res.metrics["context_depth"] == pytest.approx(sum(len(a["context_ids"]) for a in answers) / 12)
    assert res.metrics["system"] == "full_context" and res.metrics["whole_conversations"] == "2/2"


def test_full_context_that_does_not_fit_is_reported_as_recent_window(locomo_path):
    """The embedded reader's 8k window cannot hold a LoCoMo conversation: the run says recent_window."""
    res = run_eval(setup_for("reader=none", "system=full_context", "run_id=t-fc-window"), progress=False)
    answers = [json.loads(l) for l in (res.run_dir / "untrusted" / "out" / ANSWERS_FILE).read_text().splitlines()]
    budget = 8192 - 256 - PROMPT_RESERVE_TOKENS
    assert all(budget // 2 < a["context_tokens"] <= budget for a in answers)
    assert budget // 2 < res.metrics["context_tokens_given"] <= budget
    assert res.metrics["system"] == "recent_window" and res.metrics["whole_conversations"] == "0/2"
    assert "reported as recent_window" in " ".join(res.table.split())  # the table wraps at 80 columns


def test_full_context_needs_a_known_window():
    setup = setup_for("reader=none", "system=full_context", "llm=openai")
    with pytest.raises(ConfigError, match="llm.context_window"):
        baseline_budget(setup)
    assert baseline_budget(setup_for("system=full_context", "llm=openai", "llm.context_window=32000")) == 32000 - 256 - 512


def test_llm_reader_scores_answers_and_keeps_bad_replies_as_errors(locomo_path):
    calls = {"n": 0}

    def handler(req):
        calls["n"] += 1
        if calls["n"] == 3:
            return Reply.raw(b"not json at all")
        return Reply.of_json({"answer": "7 May 2023"})

    extra = ["reader=llm", "memory.answer.response_format=true", "run_id=t-llm", "workers=1"]
    setup = setup_for(*extra)
    with OpenAITestServer(handler) as srv, reader(srv, setup) as llm:
        res = run_in_process(setup, [*BASE, *extra], llm=llm)
    rows = [json.loads(l) for l in (res.run_dir / PREDICTIONS).read_text().splitlines()]
    assert len(rows) == 12 and res.n_errors == 1
    assert sum(r["prediction"] == "7 May 2023" for r in rows) == 11
    from benchmarks.metrics.locomo import score_locomo_answer

    for r in rows:  # every prediction is scored by the benchmark's own rule for its category
        assert r["scores"]["f1"] == score_locomo_answer(r["prediction"], r["gold"], r["category"])
    for key in ("f1_cat1_4", "all_honest", "all_paper_protocol", "seconds_per_question", "answer_words_mean"):
        assert key in res.metrics
    assert res.metrics["all_paper_protocol"] >= res.metrics["all_honest"]


def test_auth_error_stops_the_run_and_keeps_what_was_written(locomo_path):
    setup = setup_for("reader=llm", "run_id=t-auth", "workers=1")
    with OpenAITestServer(lambda req: Reply.error(403)) as srv, reader(srv, setup) as llm:
        with pytest.raises(LLMAuthError):
            run_eval(setup, llm=llm, progress=False)


def test_every_reader_call_failing_is_an_api_error(locomo_path):
    setup = setup_for("reader=llm", "run_id=t-500", "workers=2")
    with OpenAITestServer(lambda req: Reply.error(500)) as srv, reader(srv, setup) as llm:
        with pytest.raises(LLMServerError, match="reader calls failed"):
            run_eval(setup, llm=llm, progress=False)


def test_resume_asks_again_where_the_endpoint_failed_and_keeps_the_models_bad_replies(locomo_path):
    """A run whose reader endpoint went away mid-way wrote connection errors; resumed with the endpoint
    back, those questions are answered, while a malformed reply (the model's answer) is kept as it was."""
    extra = ["reader=llm", "memory.answer.response_format=true", "run_id=t-resume-llm", "workers=1"]
    setup = setup_for(*extra)
    calls = {"n": 0}

    def flaky(req):
        calls["n"] += 1
        if calls["n"] == 2:
            return Reply.raw(b"not json at all")
        return Reply.error(500) if calls["n"] > 6 else Reply.of_json({"answer": "7 May 2023"})

    with OpenAITestServer(flaky) as srv, reader(srv, setup) as llm:
        first = run_in_process(setup, [*BASE, *extra], llm=llm)
    assert first.n_errors == 7  # one malformed reply, six endpoint failures
    with OpenAITestServer(lambda req: Reply.of_json({"answer": "7 May 2023"})) as srv, reader(srv, setup) as llm:
        again = run_in_process(setup, [*BASE, *extra], llm=llm)
        assert len(srv.chat_requests) == 6  # only the endpoint failures were asked again
    rows = [json.loads(l) for l in (again.run_dir / PREDICTIONS).read_text().splitlines()]
    assert len(rows) == 12 and again.n_errors == 1
    assert [r["error"].split(":")[0] for r in rows if r["error"]] == ["format"]


def test_built_store_is_reused(locomo_path):
    from benchmarks.datasets import load_benchmark
    from benchmarks.splits import select
    from benchmarks.views import public_view
    from memsys.predict import build_or_open_store

    setup = setup_for("reader=none")
    view = public_view(select(load_benchmark("locomo"), "dev", "tiny", setup.benchmark))
    conv = view.conversations[0]
    mem1, _ = build_or_open_store(view, conv, setup.memory)
    mem2, built = build_or_open_store(view, conv, setup.memory)
    assert built is False and mem2.store.path == mem1.store.path and len(mem2) == len(mem1) > 0
    mem1.close()
    mem2.close()


def test_the_sandbox_limit_grows_with_the_questions_a_reader_answers():
    from research.evaluation.two_half import EVAL_TIMEOUT_BASE_S, EVAL_TIMEOUT_PER_QUESTION_S, eval_wall_timeout

    assert eval_wall_timeout(setup_for("reader=none").options, 304) == EVAL_TIMEOUT_BASE_S
    assert eval_wall_timeout(setup_for("reader=llm").options, 100) == EVAL_TIMEOUT_BASE_S + 100 * EVAL_TIMEOUT_PER_QUESTION_S
    assert eval_wall_timeout(setup_for("reader=llm", "sandbox_timeout_s=60").options, 100) == 60
