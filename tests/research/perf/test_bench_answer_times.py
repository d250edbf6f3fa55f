"""``answer.resolve_times`` and retrieval abstention composed onto a measured reader run: contexts from a
real store, answers scored by the real LoCoMo scorer."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest

from benchmarks.datasets.schema import Question
from benchmarks.scoring import score_question
from memsys.answer.generate import ABSTAIN_TEXT
from memsys.memory import Memory
from memsys.predict import reader_input_digest
from memsys.records import Turn
from research.perf.bench_answer_times import against, figures, rewrite

JULY_6 = datetime(2023, 7, 6, 20, 18)
TURNS = [
    Turn("D1:1", "Melanie", "Yesterday I took the kids to the museum, they loved the dinosaurs.", JULY_6, "S1"),
    Turn("D1:2", "Caroline", "I ran a charity race for mental health last Saturday.", JULY_6, "S1"),
    Turn("D1:3", "Melanie", "That's great! I love pottery, I made a bowl.", JULY_6, "S1"),
]
QUESTIONS = {
    "c:q1": Question("c:q1", "c", "When did Melanie go to the museum?", "5 July 2023", "2", ("D1:1",)),
    "c:q2": Question("c:q2", "c", "What does Melanie make?", "a bowl", "4", ("D1:3",)),
    "c:q3": Question("c:q3", "c", "What charity race did Melanie run for mental health?", "", "5", ("D1:2",),
                     adversarial_answer="mental health"),
}


def score(qid: str, text: str) -> dict:
    return score_question("locomo", text, QUESTIONS[qid])


@pytest.fixture
def contexts(tmp_path, embedder):
    def build(*overrides: str) -> dict:
        mem = Memory.create(tmp_path / f"s{len(overrides)}{hash(overrides) % 1000}", "omni",
                            overrides=["memory.graph.enabled=false", *overrides])
        mem.add(TURNS)
        try:
            return {qid: (q.question, mem.context(q.question), mem.cfg) for qid, q in QUESTIONS.items()}
        finally:
            mem.close()
    return build


def rows_of(ctxs: dict, answers: dict[str, str], resolved: bool = False) -> list[dict]:
    """Rows as a run records them (its reader-input digest included), made with the rewrite or without it."""
    rows = []
    for qid, a in answers.items():
        question, ctx, cfg = ctxs[qid]
        asked = reader_input_digest(question, ctx, replace(cfg, answer=replace(cfg.answer, resolve_times=resolved)))
        rows.append({"question_id": qid, "category": QUESTIONS[qid].category, "prediction": a, "input_sha256": asked,
                     "context_ids": list(ctx.source_ids), "scores": score(qid, a)})
    return rows


ANSWERS = {"c:q1": "Yesterday", "c:q2": "a bowl", "c:q3": "mental health"}
#: the runs composed onto: no abstention of either kind (``omni`` ships the attribution check on)
PLAIN = ("memory.answer.abstain=off", "memory.answer.abstain_attribution=false", "memory.answer.resolve_times=true")


def test_a_relative_answer_is_rewritten_from_the_context_and_rescored(contexts):
    plain = contexts(*PLAIN)
    rows = rows_of(plain, ANSWERS)
    new, changed, _ = rewrite(rows, plain, score)
    assert [c["question_id"] for c in changed] == ["c:q1"] and changed[0]["after"] == "5 July 2023"
    assert changed[0]["f1_before"] == 0.0 and changed[0]["f1_after"] == 1.0
    assert new[1] == rows[1] and rows[0]["prediction"] == "Yesterday"  # untouched rows kept; no change in place
    f = figures(new, rows)
    assert f["f1_cat1_4"] == pytest.approx(1.0) and f["f1_cat1_4_as_run"] == pytest.approx(0.5)
    assert f["f1_cat1_4_delta"]["n"] == 2 and f["f1_cat1_4_delta"]["delta"] == pytest.approx(0.5)
    other = [{**r, "scores": score(r["question_id"], "no idea")} for r in rows]  # another system's run
    vs = against(new, other)["f1_cat1_4"]
    assert vs["composed"] == pytest.approx(1.0) and vs["reference"] == 0.0 and vs["n"] == 2 and vs["delta"] == pytest.approx(1.0)


def test_retrieval_abstention_composes_and_a_different_context_stops_the_bench(contexts):
    plain = contexts(*PLAIN)
    shipped = contexts("memory.answer.abstain=retrieval", "memory.answer.abstain_attribution=false",
                       "memory.answer.resolve_times=true")
    assert shipped["c:q3"][1].abstain_reason and not shipped["c:q1"][1].abstain_reason
    new, _, _ = rewrite(rows_of(plain, ANSWERS), shipped, score)
    by_id = {r["question_id"]: r for r in new}
    assert by_id["c:q3"]["prediction"] == ABSTAIN_TEXT and by_id["c:q3"]["scores"]["f1"] == 1.0
    assert figures(new, rows_of(plain, ANSWERS))["abstained"] == {"cat5": 1, "cat1_4": 0}
    wrong = rows_of(plain, ANSWERS)
    wrong[1]["context_ids"] = ["D1:3"]  # not what this preset gives the reader
    with pytest.raises(SystemExit, match="c:q2: the rebuilt context differs"):
        rewrite(wrong, plain, score)
    hinted = contexts(*PLAIN[:2], "memory.answer.type_hints=true")  # same memories, other prompt
    with pytest.raises(SystemExit, match="c:q1: the rebuilt reader input differs"):
        rewrite(rows_of(plain, ANSWERS), hinted, score)


def test_a_run_made_with_the_rewrite_is_not_rewritten_twice(contexts):
    plain = contexts(*PLAIN)
    answers = {**ANSWERS, "c:q2": "a bowl yesterday (5 July 2023)"}  # as the run's own rewrite left it
    new, changed, _ = rewrite(rows_of(plain, answers, resolved=True), plain, score)
    assert changed == [] and new[1]["prediction"] == "a bowl yesterday (5 July 2023)"


def test_attribution_drops_the_answer_taken_from_another_speakers_statement(contexts):
    plain = contexts(*PLAIN)
    checked = contexts("memory.answer.abstain=off", "memory.answer.resolve_times=true")  # omni's check on
    rows = rows_of(plain, ANSWERS)
    new, changed, attributed = rewrite(rows, checked, score)
    # the trap's answer is in Caroline's race, the question names Melanie; "a bowl" is Melanie's own
    assert [a["question_id"] for a in attributed] == ["c:q3"] and "another speaker" in attributed[0]["reason"]
    by_id = {r["question_id"]: r for r in new}
    assert by_id["c:q3"]["prediction"] == ABSTAIN_TEXT and by_id["c:q3"]["scores"]["f1"] == 1.0
    assert by_id["c:q2"]["prediction"] == "a bowl" and by_id["c:q1"]["prediction"] == "5 July 2023"
    assert by_id["c:q3"]["context_ids"] == rows[2]["context_ids"]  # the reader was asked: its context stays
    assert figures(new, rows)["abstained"] == {"cat5": 1, "cat1_4": 0}
    # a run made with the check on already holds its decisions: nothing is dropped twice
    made = [{**r, "input_sha256": reader_input_digest(checked[r["question_id"]][0], checked[r["question_id"]][1],
                                                       replace(checked[r["question_id"]][2], answer=replace(
                                                           checked[r["question_id"]][2].answer, resolve_times=False)))}
            for r in rows]
    assert rewrite(made, checked, score)[2] == []
