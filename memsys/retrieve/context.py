"""The context handed to a reader: which MAUs, at which pyramid level, and why."""

from __future__ import annotations

from dataclasses import dataclass, field

from memsys.records import MAU, Modality
from memsys.retrieve.facts import render_facts
from memsys.temporal import format_date


@dataclass
class MediaPart:
    """Raw media loaded at pyramid level 3 for a vision/audio-capable reader."""

    modality: Modality
    pointer: str
    path: str
    mime: str
    tokens: int


@dataclass
class ContextItem:
    mau: MAU
    rank: int  # position in the merged candidate list (0 = best)
    similarity: float  # dense cosine with the query, for every candidate
    sources: set[str]  # dense / sparse / graph
    level: int  # 1 summary, 2 full text, 3 raw content
    reason: str  # why this level was reached (or not)
    text: str  # what the reader sees for this item
    tokens: int
    fused_score: float = 0.0
    media: list[MediaPart] = field(default_factory=list)

    def header(self, include_metadata: bool = True) -> str:
        return item_header(self.mau, include_metadata)


def item_header(mau: MAU, include_metadata: bool = True) -> str:
    """What a rendered memory line carries besides its text: date, time and speaker."""
    if not include_metadata:
        return ""
    parts = []
    if mau.timestamp:
        parts.append(f"[{format_date(mau.timestamp)} {mau.timestamp:%H:%M}]")
    if mau.speaker:
        parts.append(f"{mau.speaker}:")
    return " ".join(parts)


def item_suffix(mau: MAU, include_metadata: bool = True) -> str:
    """Resolved relative times, appended to the line (e.g. "(yesterday = 7 May 2023)")."""
    if include_metadata and mau.details.get("resolved_times"):
        return " (" + "; ".join(mau.details["resolved_times"]) + ")"
    return ""


def render_line(n: int, mau: MAU, text: str, include_metadata: bool = True) -> str:
    return f"{n}. {item_header(mau, include_metadata)} {text}{item_suffix(mau, include_metadata)}".replace("  ", " ").strip()


@dataclass
class Context:
    query: str
    items: list[ContextItem]
    budget_tokens: int
    dropped: list[tuple[str, str]] = field(default_factory=list)  # (mau id, reason)
    graph_facts: list[str] = field(default_factory=list)
    graph_tokens: int = 0
    abstain_reason: str | None = None  # set when retrieval decided memory does not hold the answer
    # set when retrieval doubts it but leaves the decision to the reader's confidence
    # (answer.abstain=and_confidence): the context is kept
    doubt: str | None = None
    # the store's speakers, for checks made after the reply (answer.abstain_attribution): a context built
    # by hand, or from a store without speakers, leaves it empty and those checks do not act
    speakers: frozenset[str] = frozenset()

    @property
    def total_tokens(self) -> int:
        return sum(i.tokens for i in self.items) + self.graph_tokens

    @property
    def mau_ids(self) -> list[str]:
        return [i.mau.id for i in self.items]

    @property
    def source_ids(self) -> list[str]:
        """Ids in the source data (LoCoMo dia_id...), in context order, for evidence metrics."""
        out: list[str] = []
        for i in self.items:
            for sid in i.mau.details.get("source_ids", [i.mau.source_id]):
                if sid and sid not in out:
                    out.append(sid)
        return out

    def render(self, include_metadata: bool = True, include_graph: bool = True, group_by_session: bool = False,
               facts_style: str = "lines") -> str:
        """Plain-text memories, best first (or by session, see :func:`session_blocks`), then graph facts
        (one per line, or grouped by subject: memsys.retrieve.facts)."""
        if group_by_session:
            lines = session_blocks(self.items, include_metadata)
        else:
            lines = [render_line(n, item.mau, item.text, include_metadata) for n, item in enumerate(self.items, start=1)]
        if include_graph and self.graph_facts:
            lines.append("")
            lines.extend(render_facts(self.graph_facts, facts_style))
        return "\n".join(lines)


def session_blocks(items: list[ContextItem], include_metadata: bool = True) -> list[str]:
    """Memories grouped by session, sessions oldest first, each under its absolute date, turns in the order
    they were said; each line keeps its relevance number. Why: a small reader answers "when" questions from
    the date above the turn, and reads a session's turns as the exchange they were."""
    sessions: dict[str, list[tuple[int, ContextItem]]] = {}
    for n, item in enumerate(items, start=1):
        sessions.setdefault(item.mau.session_id or "", []).append((n, item))

    def when(group: list[tuple[int, ContextItem]]) -> tuple:
        stamps = [i.mau.timestamp for _, i in group if i.mau.timestamp]
        return (0, min(stamps)) if stamps else (1, group[0][0])

    lines: list[str] = []
    for sid, group in sorted(sessions.items(), key=lambda kv: when(kv[1])):
        stamps = [i.mau.timestamp for _, i in group if i.mau.timestamp]
        date = f" on {format_date(min(stamps))}" if stamps and include_metadata else ""
        lines.append(f"Session {sid}{date}:" if sid else f"Other memories{date}:")
        for n, item in sorted(group, key=lambda g: (g[1].mau.timestamp is None, g[1].mau.timestamp, g[0])):
            m = item.mau
            head = ""
            if include_metadata:
                head = " ".join(p for p in ((f"[{m.timestamp:%H:%M}]" if m.timestamp else ""),
                                            (f"{m.speaker}:" if m.speaker else "")) if p)
            lines.append(f"{n}. {head} {item.text}{item_suffix(m, include_metadata)}".replace("  ", " ").strip())
    return lines
