"""The dynamic screen's comparison: what each objective can see, per question."""

from __future__ import annotations

from research.loop.outcomes import Screen, compare_inputs, effective_key, screen_field


def row(qid: str, ctx: list[str], *, digest: str = "d", ranked: list[str] | None = None) -> dict:
    return {"question_id": qid, "context_ids": ctx, "retrieved_ids": ranked or ctx, "input_sha256": digest}


def test_screen_field_follows_reader_and_objective() -> None:
    assert screen_field("llm", "all_honest") == "input_sha256"
    assert screen_field("none", "context_recall") == "context_set"
    assert screen_field("none", "recall_at_10") == "context_ids"


def test_reader_input_digests_decide_for_reader_runs() -> None:
    parent = [row("q1", ["a"], digest="x"), row("q2", ["b"], digest="y")]
    same = compare_inputs(parent, [row("q1", ["z"], digest="x"), row("q2", ["b"], digest="y")])
    assert same.no_effect and same.changed == 0 and same.questions == 2
    moved = compare_inputs(parent, [row("q1", ["a"], digest="x"), row("q2", ["b"], digest="CHANGED")])
    assert not moved.no_effect and moved.changed == 1


def test_context_recall_ignores_order_but_not_membership() -> None:
    parent = [row("q1", ["a", "b"]), row("q2", ["c"])]
    reordered = compare_inputs(parent, [row("q1", ["b", "a"]), row("q2", ["c"])], "context_set")
    assert reordered.no_effect
    grown = compare_inputs(parent, [row("q1", ["a", "b", "d"]), row("q2", ["c"])], "context_set")
    assert grown.changed == 1 and not grown.no_effect
    # a ranking objective sees the order
    assert compare_inputs(parent, [row("q1", ["b", "a"]), row("q2", ["c"])], "context_ids").changed == 1


def test_missing_digests_or_questions_are_not_comparable() -> None:
    parent = [row("q1", ["a"], digest="")]  # an evaluation made before digests existed
    s = compare_inputs(parent, [row("q1", ["a"], digest="x")])
    assert not s.comparable and not s.no_effect
    s = compare_inputs([row("q1", ["a"])], [row("q1", ["a"]), row("q9", ["a"])])  # other questions
    assert not s.comparable
    assert not Screen(0, 0, True).no_effect  # nothing screened is not "no effect"
    assert Screen(3, 0, True).to_dict()["verdict"] == "no effect"


def test_effective_key_separates_code_and_config() -> None:
    assert effective_key("tree1", "cfg") == effective_key("tree1", "cfg")
    assert effective_key("tree1", "cfg") != effective_key("tree2", "cfg") != effective_key("tree1", "cfg2")
