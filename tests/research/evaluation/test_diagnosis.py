"""Semantic diagnosis: retrieval vs reader misses of one evaluation; deltas and flips between two."""

from research.evaluation.diagnosis import diagnose, diagnose_misses, miss_kind, questions_counted


def row(qid, cat, f1, retrieved, evidence=("D1:1",), pred="x"):
    return {"question_id": qid, "category": cat, "question": f"q {qid}", "gold": "g", "prediction": pred,
            "evidence": list(evidence), "retrieved_ids": list(retrieved), "scores": {"f1": f1}}


def test_flips_and_category_deltas():
    best = [row("a", "1", 1.0, ["D1:1"]), row("b", "1", 0.0, []), row("c", "2", 0.6, ["D1:1"])]
    new = [row("a", "1", 0.0, []), row("b", "1", 1.0, ["D1:1"]), row("c", "2", 0.4, ["D1:1"])]
    d = diagnose(best, new)
    assert [r["question_id"] for r in d.broke] == ["a", "c"]
    assert [r["question_id"] for r in d.fixed] == ["b"]
    assert d.category_deltas == {"1": 0.0, "2": -0.19999999999999996}
    assert d.broke[0]["hit_before"] is True and d.broke[0]["hit_now"] is False
    text = d.render()
    assert "Broke (was right, now wrong): 2" in text and "Fixed (was wrong, now right): 1" in text


def test_retrieval_only_runs_compare_evidence_hits():
    best = [{**row("a", "4", 0, ["D1:1"]), "scores": None}]
    new = [{**row("a", "4", 0, ["D9:9"]), "scores": None}]
    d = diagnose(best, new)
    assert d.category_deltas == {"4": -1.0} and len(d.broke) == 1


def test_nothing_to_compare():
    assert diagnose([], []).render() == "(no comparison available yet)"


# --- retrieval vs reader misses of one evaluation ---------------------------------------------
TEXTS = {("conv-1", "D1:1"): "Ann: I adopted a cat named Tom.", ("conv-1", "D1:2"): "Bob: Nice!",
         ("conv-1", "D2:1"): "Ann: We moved to Oslo in May.", ("conv-1", "D2:2"): "Bob: How is it?"}


def scored(qid, cat, f1, context, evidence=("D1:1",), pred="wrong"):
    """A row as benchmarks.scoring.score_row writes it (scores only when a reader ran)."""
    r = {"question_id": f"conv-1:q{qid}", "conversation_id": "conv-1", "category": cat, "question": f"question {qid}",
         "gold": f"gold {qid}", "prediction": pred, "evidence": list(evidence), "retrieved_ids": list(context),
         "context_ids": list(context)}
    if f1 is not None:
        r["scores"] = {"f1": f1}
    return r


def test_reader_rows_split_retrieval_from_reader_misses_per_category():
    rows = [scored(0, "1", 0.0, ["D1:2"]),  # evidence missing, wrong: retrieval miss
            scored(1, "1", 0.0, ["D2:1", "D1:1"]),  # evidence there, wrong: reader miss
            scored(2, "2", 0.2, ["D1:1"], evidence=("D1:1", "D2:1")),  # part of the evidence missing
            scored(3, "2", 1.0, []),  # right without the evidence: not a miss
            scored(4, "2", 0.6, ["D1:1"])]  # right
    assert [miss_kind(r) for r in rows] == ["retrieval", "reader", "retrieval", None, None]
    d = diagnose_misses(rows, TEXTS, category_names={"1": "multi-hop"})
    assert (d.retrieval, d.reader, d.dominant_kind) == (2, 1, "retrieval")
    assert d.per_category == {"1": {"n": 2, "retrieval": 1, "reader": 1}, "2": {"n": 3, "retrieval": 1, "reader": 0}}
    assert {e.kind for e in d.examples} == {"retrieval"} and len(d.examples) == 2
    partial = next(e for e in d.examples if e.question == "question 2")
    assert partial.evidence == [("D1:1", TEXTS[("conv-1", "D1:1")]), ("D2:1", TEXTS[("conv-1", "D2:1")])]
    assert partial.missing == ["D2:1"] and partial.context == [("D1:1", TEXTS[("conv-1", "D1:1")])]
    text = d.render()
    assert "5 questions, 2 retrieval misses" in text and "1 reader misses" in text
    assert "1 multi-hop: 2/1/1" in text and "Dominant: retrieval misses" in text
    assert "evidence D2:1 (NOT in context): Ann: We moved to Oslo in May." in text
    assert "context began: D1:1 Ann: I adopted a cat named Tom." in text


def test_reader_misses_dominate_when_the_evidence_was_there():
    rows = [scored(i, "4", 0.0, ["D1:1", "D1:2"]) for i in range(3)] + [scored(9, "4", 0.0, ["D1:2"])]
    d = diagnose_misses(rows, TEXTS, examples=2)
    assert d.dominant_kind == "reader" and len(d.examples) == 2
    assert all(not e.missing for e in d.examples)
    assert "(NOT in context)" not in d.render()


def test_reader_free_rows_every_missing_evidence_is_a_retrieval_miss():
    rows = [scored(0, "1", None, ["D1:2"]), scored(1, "1", None, ["D1:1"]),
            scored(2, "5", None, [], evidence=())]  # no evidence: nothing to miss
    d = diagnose_misses(rows, TEXTS)
    assert (d.retrieval, d.reader, d.dominant_kind, d.with_reader) == (1, 0, "retrieval", False)
    assert "no reader: only retrieval is scored" in d.render()


def test_examples_are_a_seeded_sample_and_texts_may_be_missing():
    rows = [scored(i, "1", 0.0, ["D2:2"]) for i in range(20)]
    a, b = diagnose_misses(rows, {}, examples=3, seed=1), diagnose_misses(rows, {}, examples=3, seed=2)
    assert [e.question for e in a.examples] == [e.question for e in diagnose_misses(rows, {}, examples=3, seed=1).examples]
    assert [e.question for e in a.examples] != [e.question for e in b.examples]
    assert "(text not available)" in a.render()
    assert a.render(examples=0).count("\n- [") == 0


def test_ties_go_to_retrieval_and_no_misses_dominate_nothing():
    assert diagnose_misses([scored(0, "1", 0.0, []), scored(1, "1", 0.0, ["D1:1"])]).dominant_kind == "retrieval"
    assert diagnose_misses([scored(0, "1", 1.0, ["D1:1"])]).dominant_kind == ""
    assert diagnose_misses([]).render() == "(no evaluation of the best system yet)"


def test_questions_counted_by_each_objective():
    rows = [scored(0, "1", 0.0, []), scored(1, "2", 0.0, []), scored(2, "5", 0.0, [], evidence=()),
            scored(3, "2", 0.0, [])]
    assert len(questions_counted("all_honest", rows)) == 4
    assert len(questions_counted("context_recall", rows)) == 3  # the question without evidence does not count
    assert len(questions_counted("recall_at_10", rows)) == 3
    assert len(questions_counted("recall_at_10/2", rows)) == 2
    assert len(questions_counted("f1_cat1_4", rows)) == 3
    assert len(questions_counted("f1_cat5", rows)) == 1
    assert len(questions_counted("f1_VS", [{**rows[0], "category": "VS"}, rows[1]])) == 1
