"""The judge's stress test: wrong answers built from the gold in code, and how often the judge accepts them.

Why: a public audit of LoCoMo's usual lenient judge found it accepted vague-but-topical wrong answers
62.81% of the time and specific-but-wrong ones 10.61%. A J figure is only as good as its judge, so next
to J we report how far *our* judge can be fooled, on answers we know are wrong:

- **vague-but-topical**: the gold's date becomes a season or a two-month range, its number "a few" /
  "several", its named thing the kind of thing it is ("a book", "a place", "a person they know");
- **specific-but-wrong**: the date shifted by days / months / years, the number changed (+1, +2 or
  doubled), the name swapped for another name seen in the same conversation.

Everything here is pure and seeded: the same questions, names, seed and size give the same items, with
no LLM involved. Each built answer is checked wrong by the official F1 (below 1 and not equal to the
gold after the benchmark's normalisation) and dropped otherwise. Questions where no rule applies are
skipped, and counted.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Callable, Mapping, Sequence

from benchmarks.datasets.schema import CATEGORY_NAMES, Conversation, Question, iter_turns
from benchmarks.judge.config import JudgeConfig
from benchmarks.judge.protocol import JudgeItem
from benchmarks.metrics.locomo import ADVERSARIAL, normalize_locomo, score_locomo_answer
from benchmarks.metrics.memgallery import memgallery_f1, normalize_memgallery
from benchmarks.splits import stratified_sample

DEFAULTS = JudgeConfig()
KINDS = ("vague", "specific")
KIND_NAMES = {"vague": "vague-but-topical wrong answers", "specific": "specific-but-wrong answers"}


@dataclass(frozen=True)
class StressRules:
    """The construction's knobs, in one place (the defaults are what every reported figure used)."""

    day_shift: tuple[int, int] = (3, 9)  # a date with a day moves this many days, either way
    month_shift: tuple[int, int] = (1, 3)  # a month-and-year date moves this many months
    year_shift: tuple[int, int] = (1, 3)  # a year alone moves this many years
    number_steps: tuple[str, ...] = ("+1", "+2", "x2")
    vague_numbers: tuple[str, ...] = ("a few", "several")
    min_name_count: int = 2  # a capitalised word counts as a name once the conversation uses it this often
    names_share: float = 0.5  # an answer at least this share capitalised words is replaced whole by its kind
    arithmetic_year: int = 2023  # the year used to shift a day-and-month date written without one
    decade: int = 10
    exclude_categories: tuple[str, ...] = (ADVERSARIAL,)  # LoCoMo category 5 is never judged


RULES = StressRules()


@dataclass(frozen=True)
class StressItem:
    """One known-wrong answer to one question."""

    qid: str
    kind: str  # "vague" | "specific"
    question: str
    gold: str
    wrong_answer: str
    category: str
    rule: str = ""  # "date" | "number" | "name": which part of the gold was changed

    @property
    def item_id(self) -> str:
        return f"{self.qid}#{self.kind}"


@dataclass(frozen=True)
class StressPlan:
    """The items, and what the construction could not use (so a small n is explained)."""

    items: tuple[StressItem, ...]
    pool: int  # questions considered (judged categories, non-empty gold)
    skipped: Mapping[str, int] = field(default_factory=dict)  # per kind: questions where no rule applies
    dropped: Mapping[str, int] = field(default_factory=dict)  # per kind: built answers that F1 says are not wrong


@dataclass(frozen=True)
class StressJudgement:
    """A stress item and the judge's mean verdict on it over its runs."""

    item: StressItem
    score: float


@dataclass(frozen=True)
class Rate:
    """k of n accepted, with a Wilson confidence interval."""

    k: int
    n: int
    rate: float
    ci_low: float
    ci_high: float


# --- finding dates, numbers and names in a gold answer -----------------------------------------------
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
_MONTH_RE = "|".join([*_MONTHS, *(m[:3] for m in _MONTHS if m != "May")])
_SEASONS = ("winter", "winter", "spring", "spring", "spring", "summer", "summer", "summer", "autumn", "autumn",
            "autumn", "winter")
_YEAR = r"(?:19\d{2}|20[0-3]\d)"  # not "Cyberpunk 2077"
_DATE_PATTERNS = (
    ("dmy", re.compile(rf"\b(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\s+(?P<m>{_MONTH_RE})\b\.?(?:,?\s+(?P<y>{_YEAR})\b)?")),
    ("mdy", re.compile(rf"\b(?P<m>{_MONTH_RE})\.?\s+(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(?P<y>{_YEAR})\b)?")),
    ("my", re.compile(rf"\b(?P<m>{_MONTH_RE})\b\.?,?\s+(?P<y>{_YEAR})\b")),
    ("y", re.compile(rf"\b(?P<y>{_YEAR})\b")),
)
_NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                 "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty")
# digits, or a number word from "two" ("one" is as often a pronoun: "the one with the red hat")
_NUMBER = re.compile(r"(?<![\w.:])(\d+)(?![\w:]|\.\d)|\b(" + "|".join(_NUMBER_WORDS[2:]) + r")\b", re.IGNORECASE)
_WORD = r"[A-Z][a-z]+(?:['’-][A-Za-z]{2,})*"  # "O'Neil", "Jean-Luc"; "Calvin's" is "Calvin" + a possessive
_CAPITALISED = re.compile(rf"\b{_WORD}\b")
_NAME_SPAN = re.compile(rf"\b{_WORD}(?:\s+{_WORD})*\b")
_MID_SENTENCE_NAME = re.compile(rf"(?<=[a-z,;] ){_WORD}\b")
_NOT_NAMES = frozenset({
    "I", "Yes", "No", "Not", "The", "A", "An", "And", "But", "Or", "Oh", "Hey", "Hi", "Ok", "Okay", "Thanks", "Mr",
    "Mrs", "Ms", "Dr", "It", "He", "She", "They", "We", "You", "His", "Her", "Their", "My", "Our", "Your", "This",
    "That", "Since", "In", "On", "At", "To", "For", "Of", "By", "With", "After", "Before", "Likely", "Maybe",
    *_MONTHS, "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday",
})
#: question words -> the kind of thing a name in the answer is. First match wins: the question word
#: ("who", "where") before the topic nouns, and games before pets ("what games do her dogs play").
_NAME_KINDS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("who", "whom"), "a person they know"),
    (("where",), "a place"),
    (("book", "books", "novel", "read", "reading", "author"), "a book"),
    (("movie", "movies", "film", "films", "show", "watch", "watched"), "a film"),
    (("song", "songs", "music", "band", "album", "singer", "sing", "artist"), "a piece of music"),
    (("game", "games", "play", "played"), "a game"),
    (("clothing", "clothes", "dress", "outfit", "wear", "wearing"), "a piece of clothing"),
    (("species", "breed", "bird", "birds", "flower", "flowers", "plant", "plants", "animal"), "a species"),
    (("pet", "pets", "dog", "dogs", "cat", "cats", "puppy"), "a pet"),
    (("city", "cities", "town", "country", "countries", "place", "landmark", "building", "move", "moved", "travel",
      "trip", "visit", "visited", "live", "lives", "from", "state", "states"), "a place"),
    (("company", "brand", "store", "shop", "team", "organization"), "an organisation"),
    (("friend", "friends", "family", "mother", "father", "sister", "brother", "kids", "children", "partner"),
     "a person they know"),
)
_GENERIC_KIND = "something they mentioned"
_POSSESSIVES = ("'s", "’s")


@dataclass(frozen=True)
class _Date:
    start: int
    end: int
    form: str  # dmy | mdy | my | y
    day: int | None
    month: int | None
    year: int | None


def find_date(text: str) -> _Date | None:
    """The first date in ``text`` (day-month-year forms before month-year before a year alone)."""
    for form, pattern in _DATE_PATTERNS:
        m = pattern.search(text)
        if m:
            groups = m.groupdict()
            month = _month_number(groups["m"]) if groups.get("m") else None
            day = int(groups["d"]) if groups.get("d") else None
            year = int(groups["y"]) if groups.get("y") else None
            if day is not None and not 1 <= day <= 31:
                continue
            return _Date(m.start(), m.end(), form, day, month, year)
    return None


def _month_number(name: str) -> int:
    return next(i for i, m in enumerate(_MONTHS, start=1) if m.startswith(name[:3]))


def _answer_capitals(q: Question) -> list[str]:
    """The answer's capitalised words that may be its specifics: not function words, not the question's own
    names (in "Leo chose the speaker because ..." the specific is not "Leo", whom the question named)."""
    asked = set(_CAPITALISED.findall(q.question))
    return [w for w in _CAPITALISED.findall(q.answer) if w not in _NOT_NAMES and w not in asked]


def _name_tokens(q: Question, names: frozenset[str]) -> list[re.Match[str]]:
    """Capitalised spans of the answer that hold a name: a word the conversation uses as a name, a capitalised
    word that does not open the answer (an answer's first word is capitalised anyway), or a run of
    capitalised words ("Little Women": a sentence capitalises only its first word). Words of the question
    are never the answer's specifics."""
    spans = []
    keep = set(_answer_capitals(q))
    for m in _NAME_SPAN.finditer(q.answer):
        words = [w for w in m.group(0).split() if w in keep]
        if any(w in names for w in words) or (words and m.start() > 0) or len(words) > 1:
            spans.append(m)
    return spans


def conversation_names(conversation: Conversation, rules: StressRules = RULES) -> tuple[str, ...]:
    """Capitalised words the conversation uses mid-sentence (so as names), at least ``min_name_count`` times,
    plus its speakers; sorted, so the swap candidates are the same every run."""
    counts: Counter[str] = Counter()
    for turn in iter_turns(conversation):
        for text in (turn.text, turn.response or ""):
            counts.update(w for w in _MID_SENTENCE_NAME.findall(text) if w not in _NOT_NAMES)
    frequent = {w for w, c in counts.items() if c >= rules.min_name_count}
    speakers = {s for s in conversation.speakers if s[:1].isupper()}
    return tuple(sorted(frequent | speakers))


def names_by_conversation(conversations: Sequence[Conversation], rules: StressRules = RULES) -> dict[str, tuple[str, ...]]:
    """``conversation_names`` of each conversation, by conversation id (the stress builder's input)."""
    return {c.id: conversation_names(c, rules) for c in conversations}


# --- the rules --------------------------------------------------------------------------------------
def _format_date(d: _Date, day: int | None, month: int | None, year: int | None) -> str:
    """A date written in the gold's own form."""
    month_name = _MONTHS[month - 1] if month else ""
    if d.form == "dmy":
        return f"{day} {month_name}" + (f" {year}" if d.year is not None else "")
    if d.form == "mdy":
        return f"{month_name} {day}" + (f", {year}" if d.year is not None else "")
    if d.form == "my":
        return f"{month_name} {year}"
    return str(year)


def _shift(rng: random.Random, bounds: tuple[int, int]) -> int:
    return rng.choice((-1, 1)) * rng.randint(*bounds)


def shifted_date(d: _Date, rng: random.Random, rules: StressRules = RULES) -> str:
    """The same kind of date, moved by a few days (a dated day), months (month and year) or years."""
    if d.day is not None and d.month is not None:
        try:
            base = date(d.year or rules.arithmetic_year, d.month, d.day)
        except ValueError:
            base = date(d.year or rules.arithmetic_year, d.month, 1)
        moved = base + timedelta(days=_shift(rng, rules.day_shift))
        return _format_date(d, moved.day, moved.month, moved.year if d.year is not None else None)
    if d.month is not None and d.year is not None:
        months = len(_MONTHS)
        index = d.year * months + d.month - 1 + _shift(rng, rules.month_shift)
        return _format_date(d, None, index % months + 1, index // months)
    return _format_date(d, None, None, (d.year or rules.arithmetic_year) + _shift(rng, rules.year_shift))


def vague_date(d: _Date, rng: random.Random, rules: StressRules = RULES) -> str:
    """The date's season or a two-month range around it; a year alone becomes its decade."""
    year = f" {d.year}" if d.year is not None else ""
    if d.month is None:
        return f"sometime in the {(d.year or rules.arithmetic_year) // rules.decade * rules.decade}s"
    season = f"sometime in {_SEASONS[d.month - 1]}{year}"
    if d.day is None:
        return season
    first = d.month if d.month < len(_MONTHS) else d.month - 1
    pair = f"in {_MONTHS[first - 1]} or {_MONTHS[first]}{year}"
    return rng.choice((season, pair))


def _changed_number(token: str, rng: random.Random, rules: StressRules) -> str:
    """+1, +2 or doubled, written as the gold wrote it (digits, or a number word in the same case)."""
    value = int(token) if token.isdigit() else _NUMBER_WORDS.index(token.lower())
    step = rng.choice(rules.number_steps)  # "+N": add N; "xN": multiply by N (0 times N is 0: then add N)
    amount = int(step[1:])
    new = value * amount if step[0] == "x" and value > 0 else value + amount
    if token.isdigit() or new >= len(_NUMBER_WORDS):
        return str(new)
    word = _NUMBER_WORDS[new]
    return word.capitalize() if token[0].isupper() else word


def _name_kind(question: str) -> str:
    words = set(re.findall(r"[a-z]+", question.lower()))
    return next((kind for keys, kind in _NAME_KINDS if words & set(keys)), _GENERIC_KIND)


def _replace(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + new + text[end:]


def _vague_names(q: Question, spans: list[re.Match[str]], rules: StressRules) -> str:
    """Each named span becomes its kind; an answer that is mostly capitalised words ("Fetch and Frisbee",
    "Dungeons of the Dragon") becomes just the kind."""
    kind = _name_kind(q.question)
    if len(_answer_capitals(q)) >= rules.names_share * len(q.answer.split()):
        return kind
    out = q.answer
    for m in reversed(spans):
        possessive = next((p for p in _POSSESSIVES if out.startswith(p, m.end())), "")
        out = _replace(out, m.start(), m.end() + len(possessive), "someone's" if possessive else kind)
    return out


def build_vague(q: Question, names: frozenset[str], rng: random.Random, rules: StressRules = RULES) -> tuple[str, str] | None:
    """(rule, vague answer) for the first rule that applies to the gold: date, number, then name."""
    found = find_date(q.answer)
    if found is not None:
        return "date", vague_date(found, rng, rules)
    number = _NUMBER.search(q.answer)
    if number is not None:
        return "number", _replace(q.answer, number.start(), number.end(), rng.choice(rules.vague_numbers))
    spans = _name_tokens(q, names)
    if spans:
        return "name", _vague_names(q, spans, rules)
    return None


def build_specific(q: Question, names: frozenset[str], rng: random.Random, rules: StressRules = RULES) -> tuple[str, str] | None:
    """(rule, specific-but-wrong answer): the gold's date, number or name changed, the rest kept."""
    found = find_date(q.answer)
    if found is not None:
        return "date", _replace(q.answer, found.start, found.end, shifted_date(found, rng, rules))
    number = _NUMBER.search(q.answer)
    if number is not None:
        return "number", _replace(q.answer, number.start(), number.end(), _changed_number(number.group(0), rng, rules))
    spans = _name_tokens(q, names)
    if spans:
        taken = set(_CAPITALISED.findall(q.answer)) | set(_CAPITALISED.findall(q.question))
        others = sorted(n for n in names if n not in taken)
        if others:
            first = spans[0]
            return "name", _replace(q.answer, first.start(), first.end(), rng.choice(others))
    return None


_BUILDERS: Mapping[str, Callable[..., tuple[str, str] | None]] = {"vague": build_vague, "specific": build_specific}


# --- checking and sampling --------------------------------------------------------------------------
def is_wrong(answer: str, q: Question) -> bool:
    """True when the official F1 says ``answer`` is not the gold: F1 below 1 and a different normalised text."""
    if q.category in CATEGORY_NAMES["locomo"]:
        gold = q.answer.split(";")[0].strip() if q.category == "3" else q.answer
        return score_locomo_answer(answer, q.answer, q.category) < 1.0 and normalize_locomo(answer) != normalize_locomo(gold)
    return memgallery_f1(answer, q.answer) < 1.0 and normalize_memgallery(answer) != normalize_memgallery(q.answer)


def _question_rng(seed: int, qid: str, kind: str) -> random.Random:
    """One generator per (seed, question, kind): an item never depends on which other questions are in the pool."""
    return random.Random(f"{seed}:{qid}:{kind}")


def _candidates(pool: Sequence[Question], kind: str, names_by_conversation: Mapping[str, Sequence[str]],
                seed: int, rules: StressRules) -> tuple[list[tuple[Question, StressItem]], int, int]:
    """Every question of ``pool`` with its ``kind`` item, and the counts of skipped and dropped questions."""
    built, skipped, dropped = [], 0, 0
    for q in pool:
        names = frozenset(names_by_conversation.get(q.conversation_id, ()))
        made = _BUILDERS[kind](q, names, _question_rng(seed, q.id, kind), rules)
        if made is None:
            skipped += 1
        elif not is_wrong(made[1], q):
            dropped += 1
        else:
            built.append((q, StressItem(q.id, kind, q.question, q.answer, made[1], q.category, made[0])))
    return built, skipped, dropped


def stress_plan(questions: Sequence[Question], names_by_conversation: Mapping[str, Sequence[str]], seed: int,
                size: int, rules: StressRules = RULES) -> StressPlan:
    """Up to ``size`` items of each kind, a sample stratified by category (same seed, same sample) drawn
    from the questions where that kind's rule applies and its answer is checked wrong."""
    pool = [q for q in questions if q.category not in rules.exclude_categories and q.answer.strip()]
    items: list[StressItem] = []
    skipped: dict[str, int] = {}
    dropped: dict[str, int] = {}
    for kind in KINDS:
        built, skipped[kind], dropped[kind] = _candidates(pool, kind, names_by_conversation, seed, rules)
        by_id = {q.id: item for q, item in built}
        chosen = stratified_sample([q for q, _ in built], size, seed) if built else []
        items.extend(by_id[q.id] for q in chosen)
    return StressPlan(items=tuple(items), pool=len(pool), skipped=skipped, dropped=dropped)


def build_stress_items(questions: Sequence[Question], names_by_conversation: Mapping[str, Sequence[str]], seed: int,
                       size: int) -> list[StressItem]:
    """The stress items of :func:`stress_plan` (which also says how many questions were skipped)."""
    return list(stress_plan(questions, names_by_conversation, seed, size).items)


def stress_judge_items(items: Sequence[StressItem]) -> list[JudgeItem]:
    """The items as answers for the judge (id "<qid>#<kind>", the wrong answer as the answer to grade)."""
    return [JudgeItem(i.item_id, i.question, i.gold, i.wrong_answer, i.category) for i in items]


def gold_controls(items: Sequence[StressItem]) -> list[JudgeItem]:
    """The gold answer itself as the answer to grade, once per question of the stress sample (id "<qid>#gold").

    Why: a judge that says WRONG to everything has a false-accept rate of 0; its rate on the gold answers
    themselves tells that judge from a discerning one."""
    seen: dict[str, StressItem] = {}
    for i in items:
        seen.setdefault(i.qid, i)
    return [JudgeItem(f"{i.qid}#gold", i.question, i.gold, i.gold, i.category) for i in seen.values()]


def gold_accept_rate(controls: Sequence[JudgeItem], scores: Mapping[str, float], pass_score: float = DEFAULTS.pass_score,
                     ci_level: float = DEFAULTS.ci_level) -> Rate | None:
    """How many gold answers the judge accepted (None when none was judged)."""
    judged = [scores[c.id] for c in controls if c.id in scores]
    return wilson_rate(sum(s >= pass_score for s in judged), len(judged), ci_level) if judged else None


def stress_judgements(items: Sequence[StressItem], scores: Mapping[str, float]) -> list[StressJudgement]:
    """Each item with its mean verdict (``scores`` by item id, e.g. from ``score.mean_scores``); unjudged ones left out."""
    return [StressJudgement(i, scores[i.item_id]) for i in items if i.item_id in scores]


# --- what the judge did with them -------------------------------------------------------------------
def wilson_rate(k: int, n: int, ci_level: float = DEFAULTS.ci_level) -> Rate:
    """k/n with scipy's Wilson interval (well-behaved at k=0 or k=n, unlike the normal approximation)."""
    from scipy.stats import binomtest  # here: importing the judge's config (benchmarks.config) must stay light

    ci = binomtest(k, n).proportion_ci(confidence_level=ci_level, method="wilson")
    return Rate(k=k, n=n, rate=k / n, ci_low=float(ci.low), ci_high=float(ci.high))


def false_accept_rates(judged: Sequence[StressJudgement], pass_score: float = DEFAULTS.pass_score,
                       ci_level: float = DEFAULTS.ci_level) -> dict[str, Rate]:
    """Per kind, how many of its known-wrong answers the judge accepted (mean verdict >= ``pass_score``).

    A kind with no judged item is absent (no rate is ever NaN)."""
    out: dict[str, Rate] = {}
    for kind in KINDS:
        scores = [j.score for j in judged if j.item.kind == kind]
        if scores:
            out[kind] = wilson_rate(sum(s >= pass_score for s in scores), len(scores), ci_level)
    return out


_CONSEQUENCE = {"vague": "J from this judge is lenient", "specific": "J from this judge counts wrong facts as right"}


def _percent(x: float) -> str:
    return f"{100 * x:.0f}%"


def stress_warnings(rates: Mapping[str, Rate], max_false_accept: float = DEFAULTS.max_false_accept,
                    ci_level: float = DEFAULTS.ci_level) -> list[str]:
    """One WARNING line per kind whose false-accept rate is above ``max_false_accept`` (none: the judge passed)."""
    lines = []
    for kind in KINDS:
        r = rates.get(kind)
        if r is not None and r.rate > max_false_accept:
            lines.append(
                f"WARNING: judge accepted {_percent(r.rate)} (n={r.n}, {_percent(ci_level)} CI "
                f"{_percent(r.ci_low)}-{_percent(r.ci_high)}) of {KIND_NAMES[kind]}; {_CONSEQUENCE[kind]}"
            )
    return lines
