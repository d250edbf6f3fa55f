"""bench_reader_speed's variants, bound, ratio and table, without a model (rows scored by the real scorer)."""

from __future__ import annotations

import threading

import pytest

from benchmarks.datasets.schema import Question
from benchmarks.runner import aggregate
from benchmarks.scoring import score_question
from research.perf.bench_reader_speed import (
    Calibration,
    TimedReader,
    Variant,
    compare,
    parse_variants,
    render,
    shared_prefix,
    summarize,
)

LOCOMO = [
    Question("l:1", "l", "When did Mel run?", "7 May 2023", "2", ("D1:1",)),
    Question("l:2", "l", "What did Mel paint?", "a sunset", "4", ("D1:2",)),
    Question("l:3", "l", "What did Mel's brother paint?", "", "5", ("D1:3",), adversarial_answer="a lake"),
]


def rows_of(predictions: list[str]) -> list[dict]:
    return [{"question_id": q.id, "category": q.category, "evidence": list(q.evidence),
             "retrieved_ids": list(q.evidence), "context_ids": list(q.evidence), "context_tokens": 100,
             "prediction": p, "scores": score_question("locomo", p, q), "latency_s": 2.0, "prompt_tokens": 300}
            for q, p in zip(LOCOMO, predictions)]


def test_overrides_go_to_workers_the_reader_the_server_or_the_memory():
    [plain, v] = parse_variants("omni, fast=omni:workers=2;llm.local.n_threads=1;server.logits_all=false;"
                                "memory.answer.response_format=false")
    assert plain == Variant("omni", "omni")
    assert v.workers == 2 and v.llm == ("llm.local.n_threads=1",)
    assert v.server == ("--logits_all", "false") and v.memory == ("memory.answer.response_format=false",)
    assert v.server_key != plain.server_key
    with pytest.raises(SystemExit, match="none of"):
        parse_variants("x=omni:answer.abstain=off")  # a memory override says memory.
    with pytest.raises(SystemExit, match="repeat"):
        parse_variants("omni,omni")


def test_measured_is_the_answering_wall_over_n_and_the_ratio_divides_it_by_the_mean_bound():
    cal = Calibration(prompt=[{"tokens_per_s": 100.0}, {"tokens_per_s": 80.0}],
                      generation=[{"tokens_per_s": 20.0}, {"tokens_per_s": 20.0}])
    assert cal.prompt_rate == 90.0 and cal.generation_rate == 20.0
    # a variant's rates are the calibrations before and after it, merged (the host may drift between variants)
    before, after = (Calibration(prompt=[{"tokens_per_s": r}], generation=[{"tokens_per_s": 10.0}]) for r in (28.0, 38.0))
    assert before.merged(after).prompt_rate == 33.0 and before.merged(after).generation_rate == 10.0
    assert before.prompt_rate == 28.0  # merging leaves both as they were
    records = [{"question_id": f"q{i}", "latency_s": 40.0, "reader_s": 39.0, "reader_calls": 1,
                "prompt_tokens": 1800, "completion_tokens": 20, "retrieval_ms": 50.0,
                "bound_s": 1800 / 90 + 20 / 20} for i in range(4)]
    s = summarize(records, wall_s=4 * 21.0 * 2, cal=cal, metrics={"f1_cat1_4": 0.5}, benchmark="locomo")
    assert s["bound_s_per_q"] == pytest.approx(21.0)
    assert s["measured_s_per_q"] == pytest.approx(42.0) and s["ratio"] == pytest.approx(2.0)
    assert s["latency_ratio"] == pytest.approx(40.0 / 21.0)
    assert s["reader_calls_per_q"] == 1 and s["f1_cat1_4"] == 0.5 and s["n_errors"] == 0


def test_pairs_f1_against_the_reference_and_counts_identical_answers():
    rows = {"ref": rows_of(["7 May 2023", "a lake", "a lake"]), "fast": rows_of(["7 May 2023", "a sunset", "a lake"])}
    answers = {name: {r["question_id"]: r["prediction"] for r in rs} for name, rs in rows.items()}
    paired = compare(rows, answers, "ref", "locomo")
    assert paired["fast"]["identical_answers"] == 2 and paired["fast"]["n"] == 3
    assert paired["fast"]["f1_cat1_4"]["n"] == 2 and paired["fast"]["f1_cat1_4"]["mean_delta"] > 0
    cal = Calibration(prompt=[{"tokens_per_s": 90.0}], generation=[{"tokens_per_s": 20.0}])
    variants = {}
    for name, workers in (("ref", 2), ("fast", 1)):
        records = [{"question_id": r["question_id"], "latency_s": 10.0, "bound_s": 5.0} for r in rows[name]]
        variants[name] = {"workers": workers, "summary": summarize(records, 3 * 6.0, cal,
                                                                    aggregate("locomo", rows[name], True), "locomo")}
    table = render({"reference": "ref", "benchmark": "locomo", "variants": variants, "paired": paired})
    header, _, ref_line, fast_line = table.splitlines()
    assert "measured s/q" in header and "bound s/q" in header and "f1_cat1_4 vs ref" in header
    assert "| ref | 2 | 3 | 6.0 | 10.0 | 5.0 | 1.20 |" in ref_line and "reference" in ref_line
    assert fast_line.startswith("| fast | 1 |") and "| 2/3 |" in fast_line


def test_the_timed_reader_books_each_call_to_the_question_its_thread_asks_for():
    class Client:
        cfg = object()

        def chat(self, messages, **kw):
            return messages[0]

    reader = TimedReader(Client())

    def ask(qid: str, n: int) -> None:
        reader.ask_for(qid)
        for _ in range(n):
            reader.chat([qid])

    threads = [threading.Thread(target=ask, args=(q, n)) for q, n in (("a", 1), ("b", 2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {q: len(c) for q, c in reader.calls.items()} == {"a": 1, "b": 2}
    assert reader.cfg is Client.cfg


def test_each_call_counts_the_tokens_it_shares_at_its_start_with_the_call_before():
    """The server reuses the KV cache of a request's start that equals the previous request's: with the rules
    first, a second question shares the whole system message; the bound without that prefix is smaller."""
    from memsys.tokens import count_tokens

    class Client:
        cfg = object()

        def chat(self, messages, **kw):
            return None

    rules = {"role": "system", "content": "You answer questions. Rules: - be short. - write dates as 8 May 2023."}
    reader = TimedReader(Client())
    for qid, question in (("a", "Memories: ...\nQuestion: When?"), ("b", "Memories: ,,,\nQuestion: Who?")):
        reader.ask_for(qid)
        reader.chat([rules, {"role": "user", "content": question}])
    assert reader.shared_tokens["a"] == 0  # nothing came before it
    assert reader.shared_tokens["b"] >= count_tokens(rules["content"]) > 0
    assert shared_prefix("abcd", "abxy") == "ab" and shared_prefix("", "abc") == ""
    cal = Calibration(prompt=[{"tokens_per_s": 100.0}], generation=[{"tokens_per_s": 20.0}])
    records = [{"question_id": "b", "prompt_tokens": 1000, "completion_tokens": 20, "shared_prefix_tokens": 200,
                "bound_s": 1000 / 100 + 20 / 20}]
    s = summarize(records, wall_s=9.0, cal=cal, metrics={}, benchmark="locomo")
    assert s["bound_s_per_q"] == pytest.approx(11.0) and s["bound_unshared_s_per_q"] == pytest.approx(9.0)
    assert s["ratio_unshared"] == pytest.approx(1.0) and s["shared_prefix_tokens_per_q"] == 200
