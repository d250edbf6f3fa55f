"""The trusted half: the public view hides gold, answers are validated, claims are recomputed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from benchmarks.datasets import load_benchmark
from benchmarks.scoring import TurnCosts, score_answers, within_budget
from benchmarks.splits import select
from benchmarks.views import write_public_view
from harness.views import Answer, AnswerLimits, PredictionFormatError, PublicView, read_answers


@pytest.fixture(scope="module")
def tiny(locomo_path):
    return select(load_benchmark("locomo"), "dev", "tiny")


def _write(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_public_view_has_no_gold(tiny, tmp_path):
    view = write_public_view(tiny, tmp_path)
    text = (tmp_path / "view.json").read_text()
    data = json.loads(text)
    assert PublicView.from_json(data).question_ids == [q.id for q in tiny.questions]
    q_fields = {k for c in data["conversations"] for q in c["questions"] for k in q}
    assert q_fields == {"id", "question", "question_image_path", "question_image_caption"}
    for q in tiny.questions:  # no gold answer, adversarial answer or category travels
        if q.category == "5" and q.adversarial_answer:
            assert json.dumps(q.adversarial_answer) not in text
    assert "evidence" not in text and "category" not in text
    assert view.benchmark == "locomo" and view.split == "dev"


def test_only_the_selected_conversations_are_in_the_view(tiny, tmp_path, locomo_path):
    view = write_public_view(tiny, tmp_path)
    full = load_benchmark("locomo")
    assert {c.id for c in view.conversations} == {c.id for c in tiny.conversations}
    assert len(view.conversations) < len(full.conversations)


def test_answers_must_match_the_questions_exactly(tmp_path):
    ids = ["c:q0", "c:q1"]
    ok = _write(tmp_path / "a.jsonl", [{"question_id": "c:q1", "answer": "x"}, {"question_id": "c:q0"}])
    assert list(read_answers(ok, ids)) == ids  # expected order, whatever the file's order
    cases = {
        "missing": [{"question_id": "c:q0"}],
        "extra": [{"question_id": "c:q0"}, {"question_id": "c:q1"}, {"question_id": "c:q9"}],
        "twice": [{"question_id": "c:q0"}, {"question_id": "c:q0"}, {"question_id": "c:q1"}],
        "type": [{"question_id": "c:q0", "answer": 3}, {"question_id": "c:q1"}],
        "field": [{"question_id": "c:q0", "objective_value": 1.0}, {"question_id": "c:q1"}],
        "ids": [{"question_id": "c:q0", "retrieved_ids": "D1:1"}, {"question_id": "c:q1"}],
        "nan": [{"question_id": "c:q0", "latency_s": float("nan")}, {"question_id": "c:q1"}],
        "negative": [{"question_id": "c:q0", "context_tokens": -5}, {"question_id": "c:q1"}],
        "garbage": ["{not json", {"question_id": "c:q1"}],
        "logprob": [{"question_id": "c:q0", "answer_logprobs": [-0.5, 0.3]}, {"question_id": "c:q1"}],
        "logprobs": [{"question_id": "c:q0", "answer_logprobs": "-0.5"}, {"question_id": "c:q1"}],
    }
    for name, rows in cases.items():
        with pytest.raises(PredictionFormatError):
            read_answers(_write(tmp_path / f"{name}.jsonl", rows), ids)


def test_oversized_answers_are_refused_before_reading(tmp_path):
    lim = AnswerLimits(max_file_bytes=1000, max_answer_chars=50, max_ids=3)
    big = _write(tmp_path / "big.jsonl", [{"question_id": "q", "answer": "x" * 2000}])
    with pytest.raises(PredictionFormatError, match="bytes"):
        read_answers(big, ["q"], lim)
    long = _write(tmp_path / "long.jsonl", [{"question_id": "q", "answer": "x" * 60}])
    with pytest.raises(PredictionFormatError, match="at most 50"):
        read_answers(long, ["q"], lim)
    many = _write(tmp_path / "many.jsonl", [{"question_id": "q", "retrieved_ids": ["a", "b", "c", "d"]}])
    with pytest.raises(PredictionFormatError, match="at most 3"):
        read_answers(many, ["q"], lim)


def test_a_symlinked_or_special_answers_file_is_refused(tmp_path):
    target = _write(tmp_path / "real.jsonl", [{"question_id": "q"}])
    link = tmp_path / "answers.jsonl"
    link.symlink_to(target)
    with pytest.raises(PredictionFormatError, match="plain file"):
        read_answers(link, ["q"])
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(PredictionFormatError, match="regular"):
        read_answers(fifo, ["q"])


def test_claimed_context_is_recounted_and_cut_at_the_budget(tiny):
    conv = tiny.conversations[0]
    q = conv.questions[0]
    everything = tuple(t.id for s in conv.sessions for t in s.turns)
    honest = Answer(q.id, retrieved_ids=tuple(q.evidence), context_ids=tuple(q.evidence), context_tokens=50)
    greedy = Answer(q.id, retrieved_ids=everything, context_ids=everything, context_tokens=10)
    budget = 300
    rows = {}
    for name, a in (("honest", honest), ("greedy", greedy)):
        sel = type(tiny)(**{**{f: getattr(tiny, f) for f in tiny.__dataclass_fields__},
                            "conversations": (type(conv)(conv.id, conv.speakers, conv.sessions, (q,)),)})
        rows[name] = score_answers(sel, {q.id: a}, with_reader=False, context_budget_tokens=budget)[0]
    g = rows["greedy"]
    assert g["context_tokens"] <= budget and len(g["context_ids"]) < len(everything)
    assert g["context_tokens_claimed"] == 10  # the claim is kept for the record, never used
    costs = TurnCosts(conv)
    assert rows["honest"]["context_tokens"] == sum(costs.cost(i) for i in dict.fromkeys(q.evidence))


def test_unknown_and_repeated_ids_do_not_count(tiny):
    conv = tiny.conversations[0]
    costs = TurnCosts(conv)
    first = conv.sessions[0].turns[0].id
    kept, total = within_budget([first], costs, None)
    assert kept == [first] and total == costs.cost(first)
    q = conv.questions[0]
    sel = type(tiny)(**{**{f: getattr(tiny, f) for f in tiny.__dataclass_fields__},
                        "conversations": (type(conv)(conv.id, conv.speakers, conv.sessions, (q,)),)})
    a = Answer(q.id, retrieved_ids=("D999:1", first, first, "../../etc/passwd"))
    row = score_answers(sel, {q.id: a}, with_reader=False, context_budget_tokens=None)[0]
    assert row["retrieved_ids"] == [first] and row["unknown_ids"] == 2


def test_reported_answer_logprobs_reach_the_scored_row_and_never_the_score(tiny, tmp_path):
    """Calibration data for answer.abstain=confidence: kept beside the row, the F1 is the answer's alone."""
    conv = tiny.conversations[0]
    q = conv.questions[0]
    path = _write(tmp_path / "a.jsonl", [{"question_id": q.id, "answer": q.answer, "answer_logprobs": [-0.25, -1]}])
    a = read_answers(path, [q.id])[q.id]
    assert a.answer_logprobs == (-0.25, -1.0)
    sel = type(tiny)(**{**{f: getattr(tiny, f) for f in tiny.__dataclass_fields__},
                        "conversations": (type(conv)(conv.id, conv.speakers, conv.sessions, (q,)),)})
    row = score_answers(sel, {q.id: a}, with_reader=True, context_budget_tokens=None)[0]
    plain = score_answers(sel, {q.id: Answer(q.id, answer=q.answer)}, with_reader=True, context_budget_tokens=None)[0]
    assert row["answer_logprobs"] == [-0.25, -1.0] and "answer_logprobs" not in plain
    assert row["scores"] == plain["scores"]
