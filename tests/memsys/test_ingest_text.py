"""Text ingestion: the novelty gate, turn validation, MAU construction, and bad input via Memory.add."""

from __future__ import annotations

import json
import random
from collections import deque
from datetime import datetime

import pytest

from benchmarks.datasets.locomo import load_locomo
from harness.errors import DuplicateIdError, InputError, MemsysError
from memsys.config import IngestConfig, MemoryConfig, TextNoveltyConfig
from memsys.ingest.text import IngestReport, build_text_maus, turn_text, validate_turn
from memsys.ingest.text_gate import TextNoveltyGate, jaccard, word_set
from memsys.memory import Memory
from memsys.records import IngestDecision, Link, LinkKind, Turn
from memsys.store.cold import ColdStore

SESSION_1 = datetime(2023, 5, 8, 13, 56)  # a Monday


# ------------------------------------------------------------------ novelty gate
def test_word_sets_and_jaccard():
    assert word_set("Hello, hello WORLD!") == frozenset({"hello", "world"})
    assert jaccard(word_set("a b c d"), word_set("a b c e")) == pytest.approx(3 / 5)
    assert jaccard(frozenset(), frozenset()) == 1.0


def test_gate_thresholds_follow_the_released_code():
    gate = TextNoveltyGate(TextNoveltyConfig())  # reject > 0.8, uncertain > 0.5
    first = gate.check("Caroline went to the support group on Monday evening")
    assert first.accepted and first.verdict == "novel" and first.score == 0.0
    # 8 of 9 words shared: overlap 8/10 = 0.8 is not above 0.8 -> kept, uncertain
    near = gate.check("Caroline went to the support group on Monday night")
    assert near.accepted and near.verdict == "uncertain" and near.score == pytest.approx(0.8)
    same = gate.check("caroline went to the support group on monday evening!")
    assert not same.accepted and same.verdict == "redundant" and same.score == 1.0 and "> 0.8" in same.reason
    other = gate.check("Melanie painted a sunrise over the lake")
    assert other.accepted and other.verdict == "novel"
    empty = gate.check("!!! ...")
    assert not empty.accepted and empty.verdict == "empty"


def test_gate_window_disable_and_seed():
    gate = TextNoveltyGate(TextNoveltyConfig(window=2))
    for text in ["alpha beta gamma", "delta epsilon zeta", "eta theta iota"]:
        assert gate.check(text).accepted
    assert gate.check("alpha beta gamma").accepted  # fell out of the 2-text window
    assert not gate.check("eta theta iota").accepted

    off = TextNoveltyGate(TextNoveltyConfig(enabled=False))
    assert off.check("same").accepted and off.check("same").accepted

    seeded = TextNoveltyGate(TextNoveltyConfig())
    seeded.seed(["Caroline went to the support group"])
    assert not seeded.check("Caroline went to the support group").accepted


class PairwiseGate:
    """The rule as first written (before issue #16): one Jaccard per window entry, best of them."""

    def __init__(self, cfg: TextNoveltyConfig):
        self.cfg, self.recent = cfg, deque(maxlen=max(cfg.window, 1))

    def seed(self, texts):
        for t in texts[-self.cfg.window:]:
            self.recent.append(word_set(t))

    def check(self, text):
        words = word_set(text)
        if not self.cfg.enabled:
            return IngestDecision(True, "novel", 0.0, "gate disabled")
        if len(words) < self.cfg.min_words:
            return IngestDecision(False, "empty", 0.0, "no words")
        best = max((jaccard(words, r) for r in self.recent), default=0.0)
        if best > self.cfg.reject_above:
            return IngestDecision(False, "redundant", best, f"overlap {best:.2f} > {self.cfg.reject_above}")
        self.recent.append(words)
        if best > self.cfg.uncertain_above:
            return IngestDecision(True, "uncertain", best, f"overlap {best:.2f} > {self.cfg.uncertain_above}")
        return IngestDecision(True, "novel", best)


def _same_decisions(texts, cfg, seed=()):
    fast, ref = TextNoveltyGate(cfg), PairwiseGate(cfg)
    fast.seed(list(seed))
    ref.seed(list(seed))
    got, want = [fast.check(t) for t in texts], [ref.check(t) for t in texts]
    assert got == want  # verdict, score (to the last bit) and reason of every item
    return want


def test_word_set_lowers_like_the_rule_on_non_ascii_text():
    # lowering "İ" makes two characters, one of them not a word character: words are found first
    assert word_set("İstanbul ÉCOLE straße") == frozenset({"i̇stanbul", "école", "straße"})
    assert word_set("Snake_case 42 x") == frozenset({"snake_case", "42", "x"})


def test_fast_gate_decides_as_the_pairwise_rule_on_locomo_turns():
    turns = [turn_text(t) for c in load_locomo().conversations for s in c.sessions for t in s.turns]
    assert len(turns) > 5000
    for cfg in (TextNoveltyConfig(), TextNoveltyConfig(reject_above=0.3, uncertain_above=0.2),
                TextNoveltyConfig(window=100, reject_above=0.45, uncertain_above=0.3)):
        decisions = _same_decisions(turns, cfg)
        assert any(not d.accepted for d in decisions) and any(d.verdict == "uncertain" for d in decisions)


@pytest.mark.parametrize("window, min_words", [(1, 1), (3, 1), (50, 1), (64, 1), (65, 0), (130, 0)])
def test_fast_gate_decides_as_the_pairwise_rule_on_a_repetitive_stream(window, min_words):
    rng = random.Random(window)
    vocab = [f"w{i}" for i in range(40)]
    pool = [" ".join(rng.choices(vocab, k=rng.randint(1, 12))) for _ in range(60)]
    texts = []
    for _ in range(3000):  # repeats, near-repeats, word-free texts and new texts
        r = rng.random()
        base = rng.choice(pool)
        if r < 0.3:
            texts.append(base)
        elif r < 0.6:
            words = base.split()
            words[rng.randrange(len(words))] = rng.choice(vocab)
            texts.append(" ".join(words).upper() if r < 0.45 else " ".join(words))
        elif r < 0.65:
            texts.append("?! ...")
        else:
            texts.append(" ".join(rng.choices(vocab, k=rng.randint(1, 12))))
    cfg = TextNoveltyConfig(window=window, min_words=min_words)
    decisions = _same_decisions(texts, cfg, seed=["w1 w2", "", "w3"])
    assert {d.verdict for d in decisions} >= {"novel", "uncertain", "redundant"}


# ------------------------------------------------------------------ turn validation
@pytest.mark.parametrize(
    "turn, fragment",
    [
        (Turn("t1", "A", ""), "empty text"),
        (Turn("t1", "A", "   \n\t"), "empty text"),
        (Turn("t1", "A", None), "text is NoneType, expected str"),  # type: ignore[arg-type]
        (Turn("t1", "A", b"bytes"), "text is bytes, expected str"),  # type: ignore[arg-type]
        (Turn("t1", "A", 42), "text is int"),  # type: ignore[arg-type]
        (Turn("t1", "A", "lone surrogate \ud800 here"), "text is not valid UTF-8"),
        (Turn("t1", "A\udcff", "fine text"), "speaker is not valid UTF-8"),
        (Turn("t1", 7, "fine text"), "speaker is int"),  # type: ignore[arg-type]
        (Turn("t1", "A", "fine", session_id="s\ud800"), "session_id is not valid UTF-8"),
        (Turn("t1", "A", "fine", image_caption="a \udc80 cat"), "image_caption is not valid UTF-8"),
        (Turn("t1", "A", "fine", session_id=3), "session_id is int"),  # type: ignore[arg-type]
        (Turn("t1", "A", "fine", timestamp="2023-05-08"), "timestamp must be a datetime"),  # type: ignore[arg-type]
        (Turn("", "A", "fine"), "empty id"),
        (Turn(None, "A", "fine"), "empty id"),  # type: ignore[arg-type]
    ],
)
def test_validate_turn_rejects_bad_turns_with_one_line_input_errors(turn, fragment):
    with pytest.raises(InputError) as info:
        validate_turn(turn, where="input #0: ")
    message = str(info.value)
    assert fragment in message and "\n" not in message and message.startswith("input #0: ")


def test_validate_turn_accepts_missing_timestamp_and_caption_only_turns():
    assert validate_turn(Turn("t1", "A", "hi", timestamp=None)).timestamp is None
    assert validate_turn(Turn("t2", "A", "", image_caption="a photo of a dog"))
    assert turn_text(Turn("t2", "A", "", image_caption=" a photo of a dog ")) == "[shared an image: a photo of a dog]"
    assert turn_text(Turn("t3", "A", " Look! ", image_caption="a dog")) == "Look! [shared an image: a dog]"


# ------------------------------------------------------------------ MAU construction
def build(turns, cfg=None, gate=None, tmp_path=None, last=None, stored_next=None):
    cfg = cfg or IngestConfig()
    report = IngestReport()
    maus = build_text_maus(turns, cfg, gate or TextNoveltyGate(cfg.text), ColdStore(tmp_path / "cold"), report,
                           last if last is not None else {}, stored_next)
    return maus, report


def test_maus_keep_text_time_pointer_and_resolved_times(tmp_path):
    turn = Turn("D1:3", "Caroline", "I went to a LGBTQ support group yesterday.", SESSION_1, "session_1",
                image_caption="a rainbow flag", image_path="/img/x.jpg")
    (m,), report = build([turn], tmp_path=tmp_path)
    assert report.accepted == 1 and report.decisions["D1:3"].verdict == "novel"
    assert m.id == m.source_id == "D1:3" and m.speaker == "Caroline" and m.session_id == "session_1"
    assert m.summary == m.full_text == "I went to a LGBTQ support group yesterday. [shared an image: a rainbow flag]"
    assert m.timestamp == SESSION_1 and m.persons == ["Caroline"]
    assert [(t.text, t.start) for t in m.time_mentions] == [("yesterday", datetime(2023, 5, 7))]
    assert m.details["resolved_times"] == ["yesterday = 7 May 2023"]
    assert m.details["image_path"] == "/img/x.jpg" and m.details["novelty"] == "novel"
    raw = json.loads(ColdStore(tmp_path / "cold").get_text(m.pointer))
    assert raw == {"id": "D1:3", "speaker": "Caroline", "text": "I went to a LGBTQ support group yesterday.",
                   "timestamp": "2023-05-08T13:56:00", "image_caption": "a rainbow flag", "image_path": "/img/x.jpg"}


def test_no_timestamp_means_no_resolved_times(tmp_path):
    (m,), _ = build([Turn("t1", "A", "I saw her yesterday.")], tmp_path=tmp_path)
    assert m.timestamp is None and m.time_mentions == [] and "resolved_times" not in m.details
    cfg = IngestConfig(resolve_relative_time=False)
    (m2,), _ = build([Turn("t2", "A", "I saw her yesterday.", SESSION_1)], cfg=cfg, tmp_path=tmp_path)
    assert m2.time_mentions == []


def test_prev_next_links_within_a_batch_across_batches_and_per_session(tmp_path):
    cfg = IngestConfig()
    gate = TextNoveltyGate(cfg.text)
    last: dict[str, str] = {}
    turns = [Turn("a1", "A", "first turn of session a", session_id="a"),
             Turn("b1", "B", "first turn of session b", session_id="b"),
             Turn("a2", "A", "second turn of session a", session_id="a")]
    maus, _ = build(turns, cfg, gate, tmp_path, last)
    by_id = {m.id: m for m in maus}
    assert by_id["a1"].links == [Link(LinkKind.NEXT, "a2")]
    assert by_id["a2"].links == [Link(LinkKind.PREV, "a1")]
    assert by_id["b1"].links == []
    assert last == {"a": "a2", "b": "b1"}
    # the next batch links back to the stored a2 and reports the NEXT link a2 now owes
    stored_next: dict[str, str] = {}
    (a3,), _ = build([Turn("a3", "A", "third turn of session a", session_id="a")], cfg, gate, tmp_path, last, stored_next)
    assert a3.links == [Link(LinkKind.PREV, "a2")] and stored_next == {"a2": "a3"}

    unlinked, _ = build(turns, IngestConfig(link_sessions=False), TextNoveltyGate(cfg.text), tmp_path, {})
    assert all(m.links == [] for m in unlinked)


def test_rejected_turns_are_counted_and_not_built(tmp_path):
    turns = [Turn("t1", "A", "we should go hiking this weekend"),
             Turn("t2", "B", "We should go hiking this weekend!"),  # redundant
             Turn("t3", "A", "bye")]
    maus, report = build(turns, tmp_path=tmp_path)
    assert [m.id for m in maus] == ["t1", "t3"]
    assert (report.accepted, report.rejected, report.uncertain) == (2, 1, 0)
    assert report.decisions["t2"].verdict == "redundant"


# ------------------------------------------------------------------ bad input through Memory.add
@pytest.fixture
def memory(tmp_path, embedder):
    mem = Memory.create(tmp_path / "store", MemoryConfig(), embedder=embedder)
    mem.add([Turn("D1:1", "Caroline", "Hey Mel! Good to see you!", SESSION_1, "session_1"),
             Turn("D1:2", "Melanie", "Hey Caroline! I've been swamped with the kids.", SESSION_1, "session_1")])
    yield mem
    mem.close()


GOOD = Turn("D1:9", "Caroline", "A perfectly fine new turn about painting.", SESSION_1, "session_1")


@pytest.mark.parametrize(
    "batch, error, fragment",
    [
        ([GOOD, Turn("D1:10", "A", "")], InputError, "input #1: turn 'D1:10': empty text"),
        ([GOOD, Turn("D1:10", "A", 3.5)], InputError, "text is float"),  # type: ignore[arg-type]
        ([GOOD, Turn("D1:10", "A", "bad \ud800 text")], InputError, "not valid UTF-8"),
        ([GOOD, Turn("D1:10", "A\ud800", "ok")], InputError, "speaker is not valid UTF-8"),
        ([GOOD, Turn("D1:10", "A", "x", session_id="\ud800")], InputError, "session_id is not valid UTF-8"),
        ([GOOD, Turn("D1:9", "A", "a different text")], DuplicateIdError, "duplicate turn id 'D1:9' (input #1)"),
        ([GOOD, Turn("D1:1", "A", "a different text")], DuplicateIdError, "duplicate turn id 'D1:1'"),
    ],
    ids=["empty", "non-string", "lone-surrogate", "speaker-surrogate", "session-surrogate", "dup-in-batch", "dup-in-store"],
)
def test_bad_batches_fail_whole_with_typed_one_line_errors(memory, batch, error, fragment):
    with pytest.raises(error) as info:
        memory.add(batch)
    message = str(info.value)
    assert fragment in message and "\n" not in message
    assert isinstance(info.value, MemsysError) and info.value.kind in ("input", "duplicate_id")
    assert len(memory) == 2 and "D1:9" not in memory.store.positions  # the good turn was not half-added
    # the store is intact and still writable
    memory.add([GOOD])
    assert len(memory) == 3


def test_missing_timestamps_are_allowed(memory):
    report = memory.add([Turn("x1", "Caroline", "I adopted a puppy yesterday.", None, "session_9")])
    assert report.accepted == 1
    m = memory.store.get("x1")
    assert m.timestamp is None and m.time_mentions == []
    assert memory.retrieve("puppy adoption").items[0].mau.id == "x1"


def test_failed_add_loses_nothing_after_reopen(memory):
    with pytest.raises(DuplicateIdError):
        memory.add([Turn("D1:2", "A", "again")])
    memory.save()
    path = memory.store.path
    memory.close()
    reopened = Memory.open(path, read_only=True, embedder=memory.embedder)
    assert [m.id for m in reopened.store.maus] == ["D1:1", "D1:2"]
    assert reopened.store.get("D1:1").links == [Link(LinkKind.NEXT, "D1:2")]
    reopened.close()
