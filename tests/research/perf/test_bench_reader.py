"""bench_reader's rows and pairing, on rows scored by the real scorers and aggregated by the real runner."""

from __future__ import annotations

import json

import pytest

from benchmarks.datasets.schema import Question
from benchmarks.runner import aggregate
from benchmarks.scoring import score_question
from research.perf.bench_reader import (
    Variant,
    compare,
    profile_of,
    render,
    render_sources,
    run_id_of,
    sources_of_difference,
    summarize,
)

MEMGALLERY = [
    Question("m:1", "m", "What colour is the cat?", "black", "VS", ("t1",)),
    Question("m:2", "m", "Where did Ann travel?", "Paris", "TR", ("t2",)),
    Question("m:3", "m", "What did Ann eat?", "pasta", "FR", ("t3",)),
]
LOCOMO = [
    Question("l:1", "l", "When did Mel run?", "7 May 2023", "2", ("D1:1",)),
    Question("l:2", "l", "What did Mel paint?", "a sunset", "4", ("D1:2",)),
    Question("l:3", "l", "What did Mel's brother paint?", "", "5", ("D1:3",), adversarial_answer="a lake"),
]


def rows_of(bench: str, questions: list[Question], predictions: list[str]) -> list[dict]:
    return [{"question_id": q.id, "category": q.category, "evidence": list(q.evidence),
             "retrieved_ids": list(q.evidence), "context_ids": list(q.evidence), "context_tokens": 100,
             "prediction": p, "scores": score_question(bench, p, q), "latency_s": 2.0, "prompt_tokens": 300}
            for q, p in zip(questions, predictions)]


def test_a_memgallery_row_reads_f1_and_em_and_pairs_them_against_the_reference():
    profile = profile_of("memgallery")
    rows = {"ref": rows_of("memgallery", MEMGALLERY, ["white", "London", "pasta"]),
            "cand": rows_of("memgallery", MEMGALLERY, ["black", "Paris", "pasta"])}
    summaries = {name: summarize(r, aggregate("memgallery", r, with_reader=True), profile) for name, r in rows.items()}
    assert summaries["ref"]["f1"] == 1 / 3 and summaries["cand"]["f1"] == 1.0
    assert summaries["cand"]["em"] == 1.0 and summaries["cand"]["per_category_f1"] == {"FR": 1.0, "TR": 1.0, "VS": 1.0}
    assert "f1_cat1_4" not in summaries["cand"]
    paired = compare(rows, "ref", profile)
    assert set(paired["cand"]) == {"f1", "em"} and paired["cand"]["f1"]["n"] == 3
    assert abs(paired["cand"]["f1"]["mean_delta"] - 2 / 3) < 1e-9
    table = render({"reference": "ref", "variants": summaries, "paired": paired}, profile)
    header, _, ref_line, cand_line = table.splitlines()
    assert "| f1 | em |" in header and "f1 vs ref" in header
    assert "| 0.333 |" in ref_line and "reference" in ref_line
    assert cand_line.startswith("| cand | 1.000 | 1.000 |") and "+0.667" in cand_line


def test_a_locomo_row_keeps_answerable_and_adversarial_apart():
    profile = profile_of("locomo")
    rows = {"ref": rows_of("locomo", LOCOMO, ["7 May 2023", "a dog", "a lake"]),
            "cand": rows_of("locomo", LOCOMO, ["7 May 2023", "a sunset", "Not mentioned in the conversation"])}
    summaries = {name: summarize(r, aggregate("locomo", r, with_reader=True), profile) for name, r in rows.items()}
    assert summaries["cand"]["f1_cat1_4"] == 1.0 and summaries["cand"]["f1_cat5"] == 1.0
    assert summaries["ref"]["f1_cat5"] == 0.0 and set(summaries["ref"]["per_category_f1"]) == {"2", "4", "5"}
    paired = compare(rows, "ref", profile)
    assert paired["cand"]["f1_cat1_4"]["n"] == 2 and paired["cand"]["all_honest"]["n"] == 3
    assert "f1_cat1_4 vs ref" in render({"reference": "ref", "variants": summaries, "paired": paired}, profile)


def test_the_difference_is_split_by_where_the_evidence_was_and_adds_up():
    ref = rows_of("memgallery", MEMGALLERY, ["white", "Paris", "pasta"])
    cand = rows_of("memgallery", MEMGALLERY, ["black", "London", "pasta"])
    ref[0]["context_ids"] = []  # the variant's retrieval found m:1's evidence, the reference's did not
    sources = sources_of_difference(cand, ref)
    assert sources["variant only"] == {"n": 1, "better": 1, "worse": 0, "sum_delta": 1.0}
    assert sources["in both"] == {"n": 2, "better": 0, "worse": 1, "sum_delta": -1.0}
    total = sum(g["sum_delta"] for g in sources.values())
    assert abs(total - 3 * compare({"ref": ref, "cand": cand}, "ref", profile_of("memgallery"))["cand"]["f1"]["mean_delta"]) < 1e-9
    assert "1 / 0 of 1, +1.00" in render_sources({"reference": "ref", "sources": {"cand": sources}})


def test_replies_the_gateway_served_from_its_cache_cost_no_reader_seconds():
    rows = rows_of("locomo", LOCOMO, ["7 May 2023", "a sunset", "a lake"])
    for r, s in zip(rows, (0.02, 30.0, 50.0)):
        r["latency_s"] = s  # the first came from the gateway's cache: the row itself does not say so
    metrics = aggregate("locomo", rows, with_reader=True) | {"reader_cache_hits": 1, "reader_requests": 3}
    row = summarize(rows, metrics, profile_of("locomo"))
    assert row["cached_replies"] == 1 and row["seconds_per_q"] == 40.0
    metrics["reader_cache_hits"] = 3
    assert summarize(rows, metrics, profile_of("locomo"))["seconds_per_q"] is None


def test_the_ablation_group_takes_one_component_of_omni_at_a_time_and_every_override_composes():
    from memsys.config import load_memory_config, to_container
    from research.perf.bench_reader import parse_variants

    variants = parse_variants("naive_rag,ablation")
    assert [v.name for v in variants][:2] == ["naive_rag", "omni"] and len(variants) == 12
    omni = to_container(load_memory_config("omni"))
    for v in variants[2:]:
        assert v.preset == "omni" and v.overrides, v
        changed = to_container(load_memory_config("omni", v.overrides))  # a mistyped key fails here, not hours in
        assert changed != omni, f"{v.name} changes nothing"


def test_a_variant_is_read_back_only_from_the_code_that_answered_it():
    """A finished variant is read back by its run id; a changed memory system must get a new one."""
    v, common = Variant("omni@1000", "omni", ("memory.pyramid.budget_tokens=1000",)), ["benchmark=memgallery"]
    assert run_id_of(v, common, "a" * 32) == run_id_of(v, common, "a" * 32)
    assert run_id_of(v, common, "a" * 32) != run_id_of(v, common, "b" * 32)
    assert run_id_of(v, common, "a" * 32).startswith("bench-reader-omni-at-1000-")


def _finished_run(root, run_id: str, predictions: list[str], *, split: str = "dev", metrics: bool = True) -> None:
    """A run folder as ``memsys eval`` leaves it: scored rows, the runner's metrics, and run.json."""
    folder = root / run_id
    folder.mkdir(parents=True)
    rows = rows_of("locomo", LOCOMO, predictions)
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if metrics:
        (folder / "metrics.json").write_text(json.dumps(aggregate("locomo", rows, with_reader=True)))
    (folder / "run.json").write_text(json.dumps({"benchmark": "locomo", "split": split, "sample": "small",
                                                 "code": "c" * 32, "config": {"memory": {"name": "omni"}}}))


def test_finished_runs_are_read_back_into_one_paired_table_without_answering(tmp_path, monkeypatch):
    from research.perf.bench_reader import main

    monkeypatch.setenv("MEMSYS_RUNS_DIR", str(tmp_path))
    _finished_run(tmp_path, "run-ref", ["7 May 2023", "a dog", "a lake"])
    _finished_run(tmp_path, "run-cand", ["7 May 2023", "a sunset", "Not mentioned in the conversation"])
    out = tmp_path / "table.json"
    assert main(["--reference", "ref", "--runs", "ref=run-ref,cand=run-cand", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result["variants"]) == {"ref", "cand"} and result["variants"]["cand"]["read_back"] is True
    assert result["variants"]["cand"]["preset"] == "omni" and result["variants"]["cand"]["f1_cat1_4"] == 1.0
    assert result["paired"]["cand"]["f1_cat1_4"]["n"] == 2 and result["paired"]["cand"]["all_honest"]["n"] == 3
    assert list((tmp_path / "reader-logs").iterdir()) == []  # no variant was answered (each would leave its log)

    _finished_run(tmp_path, "run-unfinished", ["7 May 2023", "a dog", "a lake"], metrics=False)
    _finished_run(tmp_path, "run-test", ["7 May 2023", "a dog", "a lake"], split="test")
    _finished_run(tmp_path, "run-torn", ["7 May 2023", "a dog", "a lake"])
    (tmp_path / "run-torn" / "run.json").write_text('{"benchmark": "loc')
    for runs, message in (("ref=run-ref,x=run-unfinished", "not a finished evaluation"),
                          ("ref=run-ref,x=run-test", "scored locomo/test, not locomo/dev"),
                          ("ref=run-ref,x=run-torn", "run.json cannot be read"),
                          ("ref=run-ref,ref=run-cand", "names 'ref' twice"),
                          ("ref=run-ref,run-cand", "is not name=run-id")):
        with pytest.raises(SystemExit, match=message):
            main(["--reference", "ref", "--runs", runs, "--out", str(out)])
