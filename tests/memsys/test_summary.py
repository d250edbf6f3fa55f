"""Level-1 summaries (memsys.retrieve.summary) and the pyramid's summary_mode, on LoCoMo turns.

Token counts are the real cl100k counter; the texts are LoCoMo conv-30 turns.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from benchmarks.datasets.locomo import load_locomo
from benchmarks.datasets.schema import iter_turns
from harness.errors import ConfigError
from harness.tokens import count_tokens
from memsys.config import AnswerConfig, PyramidConfig
from memsys.records import MAU
from memsys.retrieve.pyramid import RankedCandidate, build_pyramid
from memsys.retrieve.summary import (
    cut_to_tokens,
    extractive_summary,
    query_term_weights,
    split_sentences,
)

# conv-30 D1:... style turns, verbatim from LoCoMo (Gina and Jon)
STORE_TURN = ("Hey Jon! Great hearing from you again. How have you been? BTW, I found a cool new fashion piece "
              "for my store. Can't wait to share with my customers.")
DANCE_TURN = ("Hey Gina! Congrats on the new fashion piece! Looks like your store is growing. Remenber the festival "
              "I told you about? Had that performance and it was awesome - so many people there complementing my "
              "dance moves.")


@pytest.fixture(scope="module")
def conv30(locomo_path) -> tuple[list[str], list[str]]:
    conv = load_locomo(locomo_path).conversation("conv-30")
    return [t.text for t in iter_turns(conv)], [q.question for q in conv.questions]


def test_sentences_split_at_end_marks_and_before_an_attached_image():
    assert split_sentences("Hey Jon! How are you? Fine.  Great") == ["Hey Jon!", "How are you?", "Fine.", "Great"]
    assert split_sentences("Look at this [shared an image: a red dress]") == ["Look at this", "[shared an image: a red dress]"]
    assert split_sentences("a 2.5 mile run, at 7.30 am") == ["a 2.5 mile run, at 7.30 am"]  # no space after the dot


def test_weights_are_higher_for_terms_rare_among_the_candidates():
    texts = ["I love my store.", "My store is busy.", "The store got featured by fashion editors."]
    w = query_term_weights("When did Gina's store get featured by fashion editors?", texts)
    assert w["editors"] > w["store"] > 0 and w["editors"] == w["featured"] == w["fashion"]
    assert "when" not in w and "did" not in w  # stopwords carry nothing
    assert query_term_weights("what is it?", texts) == {}


def test_speaker_names_are_not_query_terms():
    w = query_term_weights("What did Gina find for her store?", [STORE_TURN, DANCE_TURN])
    assert extractive_summary(DANCE_TURN, w, 64, count_tokens).startswith("Hey Gina!")
    w = query_term_weights("What did Gina find for her store?", [STORE_TURN, DANCE_TURN], ignore={"Gina", "Jon"})
    assert set(w) == {"find", "store"}


def test_the_summary_keeps_the_sentence_with_the_querys_rare_terms():
    w = query_term_weights("What did Gina find for her store?", [STORE_TURN, DANCE_TURN], ignore={"Gina", "Jon"})
    assert extractive_summary(STORE_TURN, w, 64, count_tokens) == (
        "BTW, I found a cool new fashion piece for my store. Can't wait to share with my customers. ...")
    # the dance turn never says "find": it keeps its sentence naming the store, and the one after
    assert extractive_summary(DANCE_TURN, w, 64, count_tokens) == (
        "Looks like your store is growing. Remenber the festival I told you about? ...")
    # a tight cap keeps the sentence with the rarer term ("fashion" is in one sentence, "store" in three)
    pool = [STORE_TURN, DANCE_TURN, "My store is busy. I love my store."]
    w = query_term_weights("Which fashion piece is in Gina's store?", pool, ignore={"Gina", "Jon"})
    assert w["fashion"] > w["store"]
    assert extractive_summary(DANCE_TURN, w, 12, count_tokens) == "Congrats on the new fashion piece! ..."
    w = query_term_weights("Who complimented Jon's dance moves at the festival?", [STORE_TURN, DANCE_TURN],
                           ignore={"Gina", "Jon"})
    summary = extractive_summary(DANCE_TURN, w, 64, count_tokens)
    assert summary == ("Remenber the festival I told you about? Had that performance and it was awesome - so many "
                       "people there complementing my dance moves. ...")  # two sentences, in their order


def test_a_text_sharing_no_word_with_the_query_keeps_its_first_two_sentences():
    w = query_term_weights("What pets does Jon have?", [STORE_TURN])
    assert extractive_summary(STORE_TURN, w, 64, count_tokens) == "Hey Jon! Great hearing from you again. ..."
    assert extractive_summary(STORE_TURN, {}, 64, count_tokens) == "Hey Jon! Great hearing from you again. ..."


def test_a_single_short_sentence_equals_the_cut_and_a_long_one_is_cut_the_same_way():
    w = query_term_weights("What did Gina find?", [STORE_TURN])
    for text in ("BTW, I found a cool new fashion piece for my store.", "ok", ""):
        assert extractive_summary(text, w, 64, count_tokens) == cut_to_tokens(text, 64, count_tokens) == text
    long = " ".join(["I found a cool new fashion piece for my store and"] * 12) + " more."
    assert extractive_summary(long, w, 16, count_tokens) == cut_to_tokens(long, 16, count_tokens) != long


@pytest.mark.parametrize("cap", [16, 24, 64])
def test_every_summary_respects_the_token_cap_and_keeps_sentences_in_order(conv30, cap):
    turns, questions = conv30
    rng = random.Random(cap)
    for q in rng.sample(questions, 20):
        pool = rng.sample(turns, 40)
        w = query_term_weights(q, pool)
        for text in pool:
            summary = extractive_summary(text, w, cap, count_tokens)
            assert count_tokens(summary) <= cap, (q, text, summary)
            positions = [text.find(s) for s in split_sentences(summary.removesuffix(" ..."))]  # a cut one: its prefix
            assert -1 not in positions and positions == sorted(positions), (text, summary)


def test_summaries_are_deterministic_and_do_not_depend_on_candidate_order(conv30):
    turns, questions = conv30
    pool = turns[:60]
    q = questions[17]
    w = query_term_weights(q, pool)
    assert w == query_term_weights(q, list(reversed(pool)))
    first = [extractive_summary(t, w, 32, count_tokens) for t in pool]
    assert first == [extractive_summary(t, dict(w), 32, count_tokens) for t in pool]
    assert any(s != t for s, t in zip(first, pool))  # it does summarize


# ------------------------------------------------------------------ through the pyramid
def cands(texts: list[str], sims: list[float], speakers: tuple[str, ...] = ("Gina", "Jon")) -> list[RankedCandidate]:
    return [RankedCandidate(MAU(id=f"m{i}", summary=t, speaker=speakers[i % len(speakers)]), s, {"dense"})
            for i, (t, s) in enumerate(zip(texts, sims))]


def pyramid(mode: str, sims: list[float], **kw):
    cfg = PyramidConfig(summary_mode=mode, **kw)
    return build_pyramid("What did Gina find for her store?", cands([STORE_TURN, DANCE_TURN], sims), cfg,
                         AnswerConfig(), count_tokens, lambda m: None)


def test_level_1_shows_the_extractive_summary_and_level_2_still_the_full_text():
    ext = pyramid("extractive", [0.3, 0.5])
    low, high = ext.items
    assert (low.level, low.text) == (1, "BTW, I found a cool new fashion piece for my store. Can't wait to share "
                                        "with my customers. ...")
    assert (high.level, high.text) == (2, DANCE_TURN) and "full text" in high.reason
    cut = pyramid("cut", [0.3, 0.5])
    assert [i.text for i in cut.items] == [STORE_TURN, DANCE_TURN]  # both fit 64 tokens: the cut shows them whole
    assert ext.total_tokens < cut.total_tokens
    assert pyramid("extractive", [0.3, 0.5], enabled=False).items[1].text == (
        "Looks like your store is growing. Remenber the festival I told you about? ...")


def test_an_unknown_summary_mode_fails_loudly():
    with pytest.raises(ConfigError, match="summary_mode"):
        pyramid("abstractive", [0.3, 0.5])


def test_the_extractive_pyramid_stays_within_the_budget(conv30):
    turns, questions = conv30
    rng = random.Random(3)
    pool = cands(rng.sample(turns, 40), [rng.random() for _ in range(40)])
    for budget in (200, 700, 3000):
        cfg = replace(PyramidConfig(budget_tokens=budget), summary_mode="extractive")
        ctx = build_pyramid(questions[5], pool, cfg, AnswerConfig(), count_tokens, lambda m: None)
        assert count_tokens(ctx.render()) <= budget and ctx.total_tokens <= budget
