"""Answer-type hints: one prompt line telling a small reader what form its answer takes.

Why: a 1.5B reader given "When did Caroline go to the support group?" often answers with the
event instead of the date, or a sentence instead of a count; token F1 then scores it near 0
even when the memory it needed was in the context. The form follows from the question's words
alone (no LLM), so it is a pure function checked against LoCoMo questions
(tests/memsys/test_answer_hints.py).

Rules, first match wins:
- image: it asks "which image" (or picture, photo): the answer is an image id ("D4:IMG_001"), and a small
  reader given memory lines "D4:IMG_001 <caption>" copies the caption too (Mem-Gallery's VS questions; F1
  then falls from 1.0 to under 0.2). This one line is on by default (``answer.image_ids``), the rest only
  with ``answer.type_hints``;
- date: the question starts with "when" (not a clause: "When Dave was a child, what did ..."), or
  asks which/what year, month, week, day or date ("In which month's game ...", "What year did ...");
- count: "how many", "how much", "how long" (a duration: "4 years", "10 years ago") and
  "how often" (a frequency: "twice a week"), "how old";
- yes_no: it starts with an auxiliary verb ("Did", "Is", "Would", ...) and offers no choice
  ("... a national park or a theme park?" is a span);
- span: anything else ("what", "who", "where", "why", ...), answered in a few words.

A "when" inside the question ("What did John say when ...") is a conjunction, not a date question.

A reply that only restates its hint line ("a short phrase of a few words (or a short list), not a ...")
is no answer: :func:`restates_hint` tells the reader's caller to abstain instead.
"""

from __future__ import annotations

import re

ANSWER_TYPES = ("image", "date", "count", "yes_no", "span")

_IMAGE = re.compile(r"\bwhich (image|picture|photo|photograph)s?\b", re.IGNORECASE)
_DATE = re.compile(r"^\s*(when\b|(in |on |during |for )?(what|which) (year|month|week|day|date)s?\b)", re.IGNORECASE)
_WHEN_CLAUSE = re.compile(r"^\s*when\b[^?]*,\s*(what|who|whom|where|which|why|how)\b", re.IGNORECASE)
_COUNT = re.compile(r"\bhow (many|much|long|often|old)\b", re.IGNORECASE)
_AUXILIARY = re.compile(r"^\s*(is|are|was|were|am|do|does|did|has|have|had|can|could|will|would|should|shall|may|"
                        r"might|must)\b", re.IGNORECASE)
_CHOICE = re.compile(r"(?<!/)\bor\b", re.IGNORECASE)  # "and/or" offers no choice

#: the prompt line for each answer type
TYPE_HINTS = {
    "image": "Expected answer: the image's id alone, as the memory lines write it (e.g. D4:IMG_001), without its "
             "caption.",
    "date": "Expected answer: a date or period, written absolutely as in the memory lines (e.g. 7 May 2023, "
            "June 2023, 2022).",
    "count": "Expected answer: a number or amount with its unit (e.g. 3, 4 years, twice a week).",
    "yes_no": "Expected answer: yes or no.",
    "span": "Expected answer: a short phrase of a few words (or a short list), not a sentence.",
}


def answer_type(question: str) -> str:
    """The answer form a question asks for: one of ``ANSWER_TYPES`` (rules in the module docstring)."""
    if _IMAGE.search(question):
        return "image"
    if _DATE.search(question) and not _WHEN_CLAUSE.search(question):
        return "date"
    if _COUNT.search(question):
        return "count"
    if _AUXILIARY.search(question) and not _CHOICE.search(question):
        return "yes_no"
    return "span"


def type_hint(question: str) -> str:
    return TYPE_HINTS[answer_type(question)]


_EXAMPLES = re.compile(r"\(e\.g\.[^)]*\)")
_WORD = re.compile(r"[a-z0-9]+")
#: a restatement is this many words or more: shorter runs ("a date", "yes") are real answers
RESTATED_MIN_WORDS = 3


def restates_hint(reply: str, hint: str) -> bool:
    """Whether ``reply`` is a run of ``hint``'s own words rather than an answer.

    Why: with nothing in its memories that answers, the 1.5B reader fills the JSON answer with the
    hint it was given (LoCoMo dev, session 32: 2 of 50 replies with ``type_hints`` on, both on
    questions whose honest answer is the abstention). The hint's examples ("e.g. 3, 4 years, twice a
    week") are left out of the comparison: a reply that matches one is an answer of that form."""
    words = _WORD.findall(reply.lower())
    if words[:2] == ["expected", "answer"]:
        words = words[2:]
    hint_words = _WORD.findall(_EXAMPLES.sub(" ", hint.lower()))
    if len(words) < RESTATED_MIN_WORDS:
        return False
    return any(hint_words[i:i + len(words)] == words for i in range(len(hint_words) - len(words) + 1))
