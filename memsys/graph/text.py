"""Chat text for the rule extractor: sentences, tokens with their spacing, written dates."""

from __future__ import annotations

import re
from dataclasses import dataclass

from memsys.graph.lexicon import ABBREVIATIONS

_TOKEN = re.compile(r"\w+(?:['\u2019-]\w+)*", re.UNICODE)
_SENTENCE_END = re.compile(r"[.!?\u2026]+[\"'\u201d\u2019)\]]*(?=\s|$)|\n+")
_MONTH_RE = (r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
             r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)")
_YEAR_RE = r"(?:19|20)\d{2}"
_DATE = re.compile(
    rf"\b(?:(?P<d1>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<m1>{_MONTH_RE})\b\.?(?:,?\s+(?P<y1>{_YEAR_RE}))?"
    rf"|(?P<m2>{_MONTH_RE})\.?\s+(?P<d2>\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(?P<y2>{_YEAR_RE}))?"
    rf"|(?P<m3>{_MONTH_RE})\.?,?\s+(?P<y3>{_YEAR_RE})"
    rf"|(?:in|since|by|until|of)\s+(?P<y4>{_YEAR_RE}))\b",
    re.IGNORECASE,
)
_MONTH_NAMES = ["january", "february", "march", "april", "may", "june", "july", "august",
                "september", "october", "november", "december"]


@dataclass(frozen=True, slots=True)
class Tok:
    text: str
    lower: str  # lowercase, ASCII apostrophe
    start: int
    end: int
    cap: bool  # starts with an uppercase letter
    gap: str  # text between the previous token of the sentence and this one

    @property
    def possessive(self) -> bool:
        return self.lower.endswith("'s")

    @property
    def stem(self) -> str:  # "Caroline's" -> "Caroline"
        return self.text[:-2] if self.possessive else self.text


def split_sentences(text: str) -> list[str]:
    """Sentences of a chat turn; a period after Dr/Mr/St... does not end one."""
    out, begin = [], 0
    for m in _SENTENCE_END.finditer(text):
        before = text[begin:m.start()].split()
        if m.group(0) == "." and before and before[-1].lower().strip("(") in ABBREVIATIONS:
            continue
        out.append(text[begin:m.end()])
        begin = m.end()
    if text[begin:].strip():
        out.append(text[begin:])
    return [s for s in (x.strip() for x in out) if s]


def tokenize(sentence: str) -> list[Tok]:
    toks, prev_end = [], 0
    for m in _TOKEN.finditer(sentence):
        text = m.group(0)
        toks.append(Tok(text, text.lower().replace("\u2019", "'"), m.start(), m.end(),
                        text[0].isupper(), sentence[prev_end:m.start()]))
        prev_end = m.end()
    return toks


def find_dates(sentence: str, toks: list[Tok], year: int | None) -> list[tuple[str, int, int]]:
    """Written dates as (name, first token, end token): "8 May 2023", "May 2023", "2022".

    A missing year is the MAU's ``year``; a lowercase "may" before a number is the verb.
    """
    out = []
    for m in _DATE.finditer(sentence):
        mon = m["m1"] or m["m2"] or m["m3"]
        day = m["d1"] or m["d2"]
        yr = m["y1"] or m["y2"] or m["y3"] or m["y4"]
        if mon and m.group(0)[:3] == "may":
            continue
        month = next((n.capitalize() for n in _MONTH_NAMES if mon and n.startswith(mon.lower()[:3])), None)
        if month and day and 1 <= int(day) <= 31:
            name = f"{int(day)} {month} {yr or year}" if (yr or year) else f"{int(day)} {month}"
        elif month and yr:
            name = f"{month} {yr}"
        elif yr:
            name = yr
        else:
            continue
        first = next((k for k, t in enumerate(toks) if t.end > m.start()), 0)
        last = next((k for k, t in enumerate(toks) if t.start >= m.end()), len(toks))
        out.append((name, first, last))
    return out
