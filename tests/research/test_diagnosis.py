"""Semantic diagnosis: per-category deltas and flipped questions between two evaluations."""

from research.diagnosis import diagnose


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
