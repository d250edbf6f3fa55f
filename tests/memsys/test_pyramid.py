"""Pyramid retrieval under a token budget (memsys.retrieve.pyramid): gates, budget, reasons.

Hand-computed cases count tokens as words (``count_tokens`` is a parameter of the pure
function), so every number can be checked by eye; the property loop uses the real
cl100k counter.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from harness.tokens import count_tokens
from memsys.config import AnswerConfig, PyramidConfig
from memsys.records import MAU, Modality
from memsys.retrieve.context import MediaPart, render_line
from memsys.retrieve.pyramid import RankedCandidate, RawContent, build_pyramid, cut_to_tokens


def words(text: str) -> int:
    return len(text.split())


def cand(i: int, sim: float, summary: str = "two words", full: str | None = None) -> RankedCandidate:
    details = {"text": full} if full is not None else {}
    return RankedCandidate(MAU(id=f"m{i}", summary=summary, details=details), sim, {"dense"}, sim)


def w(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def no_raw(_: MAU) -> None:
    return None


def pyramid(cands, budget=6000, theta=0.4, load_raw=no_raw, count=words, answer=None, framing=lambda m: 0, **kw):
    """Hand-computed cases leave the line framing out (framing=0) so every number is a word count."""
    cfg = PyramidConfig(budget_tokens=budget, theta=theta, **kw)
    return build_pyramid("q", cands, cfg, answer or AnswerConfig(), count, load_raw, framing_tokens=framing)


def test_the_rendered_prompt_stays_within_the_budget_with_real_framing():
    from datetime import datetime

    rng = random.Random(7)
    cands = [RankedCandidate(MAU(id=f"m{i}", summary=w(rng.randint(3, 40)), speaker="Caroline",
                                 timestamp=datetime(2023, 5, 8, 13, 56),
                                 details={"text": w(rng.randint(3, 80), "x"), "resolved_times": ["yesterday = 7 May 2023"]}),
                             rng.random(), {"dense"}) for i in range(30)]
    for budget in (50, 200, 700, 3000):
        ctx = build_pyramid("q", cands, PyramidConfig(budget_tokens=budget), AnswerConfig(), count_tokens, no_raw)
        assert count_tokens(ctx.render()) <= budget, budget
        assert ctx.total_tokens <= budget


# ------------------------------------------------------------------ level 1
def test_level_1_for_every_candidate_within_budget_in_rank_order():
    ctx = pyramid([cand(i, s) for i, s in enumerate([0.3, 0.35, 0.1])], budget=100)
    assert [(i.mau.id, i.level, i.tokens, i.rank) for i in ctx.items] == [("m0", 1, 2, 0), ("m1", 1, 2, 1), ("m2", 1, 2, 2)]
    assert all(i.reason.startswith("top-k summary") and "<= theta 0.4" in i.reason for i in ctx.items)
    assert ctx.total_tokens == 6 and ctx.dropped == [] and ctx.budget_tokens == 100


def test_level_1_drops_what_does_not_fit_and_keeps_going():
    cands = [cand(0, 0.1, w(5)), cand(1, 0.1, w(5)), cand(2, 0.1, w(2)), cand(3, 0.1, w(1))]
    ctx = pyramid(cands, budget=8)
    assert ctx.mau_ids == ["m0", "m2", "m3"]
    assert ctx.dropped == [("m1", "level 1 summary (5 tok) over remaining budget 3")]
    assert ctx.total_tokens == 8


def test_level_1_summaries_are_cut_to_summary_max_tokens():
    ctx = pyramid([cand(0, 0.1, w(100))], summary_max_tokens=10)
    (item,) = ctx.items
    assert item.text == w(9) + " ..." and item.tokens == 10
    assert cut_to_tokens("short text", 10, words) == "short text"


# ------------------------------------------------------------------ level 2
def test_level_2_only_strictly_above_theta():
    cands = [cand(i, s, full=w(10, "f")) for i, s in enumerate([0.9, 0.41, 0.4, 0.1])]
    ctx = pyramid(cands, budget=1000, theta=0.4)
    assert [i.level for i in ctx.items] == [2, 2, 1, 1]
    assert [i.tokens for i in ctx.items] == [10, 10, 2, 2]
    assert ctx.items[0].text == w(10, "f")
    assert "sim 0.90 > theta 0.4: full text" in ctx.items[0].reason
    assert "sim 0.40 <= theta 0.4" in ctx.items[2].reason


def test_level_2_goes_to_the_most_similar_first_when_budget_is_short():
    cands = [cand(0, 0.5, full=w(10, "f")), cand(1, 0.9, full=w(10, "g"))]  # rank 0 is less similar
    ctx = pyramid(cands, budget=12)  # 4 for summaries, 8 left: one upgrade
    assert [i.level for i in ctx.items] == [1, 2]
    assert "level 2 needs 8 tok, 0 left" in ctx.items[0].reason
    assert ctx.total_tokens == 12


def test_level_2_when_the_summary_is_already_the_full_text():
    ctx = pyramid([cand(0, 0.8, "the whole turn text")])
    (item,) = ctx.items
    assert item.level == 2 and item.tokens == 4 and "summary is the full text" in item.reason


@pytest.mark.parametrize("mode, level, text", [("summary", 1, "two words"), ("both", 2, "two words | original: " + w(3, "f"))])
def test_answer_context_text_modes(mode, level, text):
    ctx = pyramid([cand(0, 0.9, full=w(3, "f"))], answer=AnswerConfig(context_text=mode))
    assert ctx.items[0].level == level and ctx.items[0].text == text


# ------------------------------------------------------------------ level 3
def media_loader(costs: dict[str, int], calls: list[str] | None = None):
    def load(m: MAU) -> RawContent | None:
        if calls is not None:
            calls.append(m.id)
        if m.id not in costs:
            return None
        return RawContent(media=MediaPart(Modality.IMAGE, f"cold:{m.id}.jpg", f"/x/{m.id}.jpg", "image/jpeg", costs[m.id]))
    return load


def test_level_3_greedy_by_similarity_per_token_under_the_budget():
    # sim/cost: m0 .9/900 = .001, m1 .5/100 = .005, m2 .45/50 = .009 -> m2, m1, then m0 if it fits
    cands = [cand(0, 0.9), cand(1, 0.5), cand(2, 0.45)]
    ctx = pyramid(cands, budget=6 + 160, load_raw=media_loader({"m0": 900, "m1": 100, "m2": 50}))
    levels = {i.mau.id: i.level for i in ctx.items}
    assert levels == {"m0": 2, "m1": 3, "m2": 3}  # m0: above theta, its summary is its full text
    m0 = ctx.items[0]
    assert "level 3 needs 900 tok, 10 left" in m0.reason and m0.media == []
    assert [p.tokens for p in ctx.items[2].media] == [50] and "level 3: raw image (50 tok)" in ctx.items[2].reason
    assert ctx.total_tokens == 6 + 150


def test_level_3_raw_text_is_charged_with_its_framing():
    raw_text = "Caroline: I went to a LGBTQ support group yesterday and it was so powerful."

    def load(m: MAU) -> RawContent:
        return RawContent(text=raw_text)

    ctx = pyramid([cand(0, 0.9, "Caroline attended a support group on 7 May 2023.")], count=count_tokens, load_raw=load)
    (item,) = ctx.items
    assert item.level == 3 and item.text.endswith("raw: " + raw_text)
    assert item.tokens == count_tokens(item.text) == ctx.total_tokens
    # a budget one token short of the framed text keeps the item at level 2
    tight = pyramid([cand(0, 0.9, "Caroline attended a support group on 7 May 2023.")], count=count_tokens,
                    load_raw=load, budget=item.tokens - 1)
    assert tight.items[0].level == 2 and tight.total_tokens <= item.tokens - 1


def test_level_3_off_and_pyramid_off():
    costs = {"m0": 10, "m1": 10}
    cands = [cand(0, 0.9, full=w(10, "f")), cand(1, 0.8)]
    no_l3 = pyramid(cands, load_raw=media_loader(costs), level3=False)
    assert [i.level for i in no_l3.items] == [2, 2]

    calls: list[str] = []
    off = pyramid([cand(0, 0.9, full=w(10, "f")), cand(1, 0.8)], load_raw=media_loader(costs, calls), enabled=False)
    assert [i.level for i in off.items] == [1, 1]
    assert all(i.reason == "top-k summary; pyramid off" for i in off.items)
    assert calls == []  # cold storage is never touched
    assert off.items[0].text == "two words"


def test_reserved_tokens_come_out_of_the_budget():
    ctx = build_pyramid("q", [cand(0, 0.1), cand(1, 0.1), cand(2, 0.1)], PyramidConfig(budget_tokens=10),
                        AnswerConfig(), words, no_raw, reserved_tokens=6, framing_tokens=lambda m: 0)
    assert ctx.mau_ids == ["m0", "m1"] and ctx.total_tokens == 4


# ------------------------------------------------------------------ property: never over budget
VOCAB = ("caroline melanie support group painting sunrise lake adoption agency camping beach meteor "
         "pottery class violin concert park yesterday friday 2023 kids transgender talk school charity").split()


def random_text(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(VOCAB) for _ in range(n))


def test_total_tokens_never_exceed_the_budget_over_random_budgets():
    rng = random.Random(2604)
    for trial in range(250):
        n = rng.randrange(0, 25)
        cands, raw = [], {}
        for i in range(n):
            full = random_text(rng, rng.randrange(1, 150)) if rng.random() < 0.7 else None
            cands.append(cand(i, rng.uniform(-0.2, 1.0), random_text(rng, rng.randrange(1, 90)), full))
            kind = rng.random()
            if kind < 0.3:
                raw[f"m{i}"] = RawContent(text=random_text(rng, rng.randrange(1, 200)))
            elif kind < 0.5:
                raw[f"m{i}"] = RawContent(media=MediaPart(Modality.AUDIO, "cold:x", "/x", "audio/wav", rng.randrange(20, 2000)))
        cfg = PyramidConfig(budget_tokens=rng.randrange(0, 4000), theta=rng.uniform(0.0, 0.8),
                            summary_max_tokens=rng.randrange(4, 64), enabled=rng.random() < 0.85)
        answer = AnswerConfig(context_text=rng.choice(["full_text", "full_text", "both", "summary"]))
        reserved = min(cfg.budget_tokens, rng.choice([0, 0, rng.randrange(0, 300)]))  # graph facts, <= B
        ctx = build_pyramid("q", cands, cfg, answer, count_tokens, lambda m: raw.get(m.id), reserved_tokens=reserved)

        where = f"trial {trial}: B={cfg.budget_tokens} reserved={reserved}"
        assert ctx.total_tokens + reserved <= cfg.budget_tokens, where
        for item in ctx.items:
            framing = count_tokens(render_line(99, item.mau, "", answer.include_metadata))
            assert item.tokens == count_tokens(item.text) + framing + sum(p.tokens for p in item.media), where
            assert item.reason.startswith("top-k summary"), where
            if item.level == 2:
                assert item.similarity > cfg.theta, where
            if item.level == 3:
                assert item.mau.id in raw, where
            if not cfg.enabled or answer.context_text == "summary":
                assert item.level == 1, where
        ranks = [i.rank for i in ctx.items]
        assert ranks == sorted(ranks), where
        kept, dropped = set(ctx.mau_ids), {mid for mid, _ in ctx.dropped}
        assert kept | dropped == {c.mau.id for c in cands} and not kept & dropped, where
        assert all(reason for _, reason in ctx.dropped), where


def test_budget_is_respected_for_every_budget_on_one_candidate_set():
    rng = random.Random(5)
    cands = [cand(i, rng.uniform(0, 1), random_text(rng, 20), random_text(rng, 120)) for i in range(20)]
    cfg = PyramidConfig()
    for budget in range(0, 3000, 37):
        ctx = build_pyramid("q", cands, replace(cfg, budget_tokens=budget), AnswerConfig(), count_tokens, no_raw)
        assert ctx.total_tokens <= budget
        assert len(ctx.items) + len(ctx.dropped) == 20
    full = build_pyramid("q", cands, cfg, AnswerConfig(), count_tokens, no_raw)
    assert len(full.items) == 20 and not full.dropped  # B = 6000 holds all 20 at their full level
    assert {i.level for i in full.items if i.similarity > cfg.theta} == {2}
