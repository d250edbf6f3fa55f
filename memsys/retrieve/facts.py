"""Knowledge-graph fact lines as the reader sees them, one per line or grouped by subject.

The graph (memsys.graph.kg) writes each fact as ``Fact.line()``: "Caroline --occurs_at--> LGBTQ
support group (7 May 2023)". The arrows and a subject repeated on every line cost a small reader
tokens that carry nothing, so ``compact`` writes the same facts grouped under their subject:
"Caroline: occurs at LGBTQ support group (7 May 2023); likes painting". The format lives here,
beside its parser, so the two cannot drift apart; a line that is not a fact (another augmenter's)
is shown as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from memsys.errors import ConfigError

FACT_STYLES = ("lines", "compact")
FACTS_HEADER = "Related facts from the knowledge graph:"
_FACT_RE = re.compile(r"^(?P<src>.+?) --(?P<rel>\S+)--> (?P<dst>.+?)(?: \((?P<dates>[^()]*)\))?$")


@dataclass(frozen=True)
class Fact:
    subject: str
    relation: str
    object: str
    dates: str = ""  # "7 May 2023; 8 May 2023; +2 more", as the graph wrote them

    def line(self) -> str:
        return f"{self.subject} --{self.relation}--> {self.object}" + (f" ({self.dates})" if self.dates else "")

    def predicate(self) -> str:
        """The fact without its subject, in words: "occurs at LGBTQ support group (7 May 2023, 8 May 2023)"
        (dates joined by commas: a semicolon separates the facts of a compact line)."""
        dates = self.dates.replace("; ", ", ")
        return f"{self.relation.replace('_', ' ')} {self.object}" + (f" ({dates})" if dates else "")


def parse_fact(line: str) -> Fact | None:
    m = _FACT_RE.match(line.strip())
    return Fact(m["src"], m["rel"], m["dst"], m["dates"] or "") if m else None


def compact_facts(lines: list[str]) -> list[str]:
    """One line per subject, subjects in the order of their best fact, each subject's facts in their
    own order; lines that are not facts keep their place."""
    groups: dict[str, list[str]] = {}
    order: list[tuple[str, str]] = []  # ("subject", name) or ("line", text)
    for text in lines:
        fact = parse_fact(text)
        if fact is None:
            order.append(("line", text))
            continue
        if fact.subject not in groups:
            groups[fact.subject] = []
            order.append(("subject", fact.subject))
        groups[fact.subject].append(fact.predicate())
    return [f"{value}: {'; '.join(groups[value])}" if kind == "subject" else value for kind, value in order]


def render_facts(lines: list[str], style: str = "lines") -> list[str]:
    """The facts block of a rendered context (header, then one "- " line per fact or subject)."""
    if style not in FACT_STYLES:
        raise ConfigError(f"answer.graph_facts_style must be one of {FACT_STYLES}, got {style!r}")
    if not lines:
        return []
    shown = compact_facts(lines) if style == "compact" else lines
    return [FACTS_HEADER, *(f"- {f}" for f in shown)]
