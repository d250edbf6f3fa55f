"""The refusal bench's arithmetic (benchmarks/perf/bench_refusal.py); its stores are test_perf_stores'."""

from __future__ import annotations

import pytest

from benchmarks.metrics.memgallery import memgallery_f1
from benchmarks.perf.bench_refusal import Signals, auc, conversation_vocabulary, coverage, report, separation


def test_coverage_counts_content_words_after_stemming_and_ignores_stop_words():
    vocab = conversation_vocabulary(["Julian talked about robots cleaning floors"])
    assert coverage("Did Julian mention the robot?", vocab) == pytest.approx(2 / 3)  # julian, robot; not mention
    assert coverage("Did the robots clean?", vocab) == 1.0
    assert coverage("the a of", vocab) == 1.0  # nothing to miss


def test_auc_is_one_half_without_separation_and_one_with_perfect_separation():
    assert auc([0.6, 0.7], [0.1, 0.2]) == 1.0
    assert auc([0.1, 0.2], [0.6, 0.7]) == 0.0
    assert auc([0.5, 0.5], [0.5, 0.5]) == 0.5
    with pytest.raises(ValueError):
        auc([], [0.1])


def _rows(ar: list[float], other: list[float]) -> list[Signals]:
    return ([Signals(f"a{i}", "AR", v, v, v) for i, v in enumerate(ar)]
            + [Signals(f"o{i}", "VS", v, v, v) for i, v in enumerate(other)])


def test_separation_counts_who_abstains_below_each_threshold_and_prices_it():
    rows = _rows([0.1, 0.2, 0.3, 0.4], [0.15, 0.5, 0.6, 0.7, 0.8, 0.9])
    s = separation(rows, "top1", reader_f1=0.5, abstain_f1=1.0)
    half = next(t for t in s["thresholds"] if t["threshold"] == 0.25)  # AR's median
    assert half["ar_abstain"] == 0.5 and half["other_abstain"] == pytest.approx(1 / 6)
    assert half["f1_change"] == pytest.approx((2 * 1.0 - 1 * 0.5) / 10)
    assert s["auc"] == pytest.approx(21 / 24)  # the other at 0.15 is above one AR question of four


def test_the_report_prices_an_abstention_with_mem_gallerys_own_f1():
    out = report(_rows([0.1, 0.2], [0.8, 0.9]), reader_f1=0.4)
    assert out["ar"] == 2 and out["questions"] == 4
    assert out["abstain_f1"] == memgallery_f1("Not mentioned in the conversation", "Not mentioned.") > 0.5
    assert [s["signal"] for s in out["signals"]] == ["top1", "top5", "coverage"]
