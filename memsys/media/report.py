"""What happened to each media item (:class:`MediaItemReport`) and to a call or batch (:class:`MediaReport`).

Every public ingest function takes the memory first and an optional ``report``
(:class:`MediaReport`). A bad item (corrupt image, zero-length audio, unsupported
codec, over the size cap, sample rate below the minimum) raises a one-line
:class:`MediaInputError` when no report is given; with a report the error is
recorded for that item and the function returns ``None`` / ``[]`` so a batch
carries on. Missing dependencies and store failures always raise: they would
fail every following item too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from memsys.records import IngestDecision


@dataclass
class MediaItemReport:
    """What happened to one input item (a file or bytes)."""

    item: str
    modality: str
    decision: IngestDecision | None = None  # item-level verdict; None when it failed
    mau_ids: list[str] = field(default_factory=list)
    error: str | None = None  # one line
    notes: list[str] = field(default_factory=list)  # resampling, captioner failures...
    parts: list[dict[str, Any]] = field(default_factory=list)  # per segment / scene decisions
    stats: dict[str, float] = field(default_factory=dict)
    bytes_in: int = 0
    bytes_stored: int = 0  # bytes newly written to the cold tier for this item

    def line(self) -> str:
        if self.error:
            return f"ERROR {self.modality}: {self.error}"  # errors name their item
        d = self.decision
        verdict = f"{d.verdict} ({d.reason})" if d and d.reason else (d.verdict if d else "?")
        note = f" [{'; '.join(self.notes)}]" if self.notes else ""
        return f"{'kept' if self.mau_ids else 'dropped'} {self.modality} {self.item}: {verdict}, {len(self.mau_ids)} MAU(s){note}"


@dataclass
class MediaReport:
    items: list[MediaItemReport] = field(default_factory=list)

    @property
    def errors(self) -> list[MediaItemReport]:
        return [i for i in self.items if i.error]

    @property
    def mau_ids(self) -> list[str]:
        return [m for i in self.items for m in i.mau_ids]

    def count(self, modality: str | None = None) -> dict[str, int]:
        items = [i for i in self.items if modality is None or i.modality == modality]
        return {
            "items": len(items),
            "kept": sum(bool(i.mau_ids) for i in items),
            "dropped": sum(not i.mau_ids and not i.error for i in items),
            "errors": sum(bool(i.error) for i in items),
            "maus": sum(len(i.mau_ids) for i in items),
        }

    def lines(self) -> list[str]:
        return [i.line() for i in self.items]

    def to_dict(self) -> dict[str, Any]:
        return {"counts": self.count(), "items": [asdict(i) for i in self.items]}


def item_label(source: Any) -> str:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return f"<{len(source)} bytes>"
    return str(source)


def finish_item(report: "MediaReport | None", item: MediaItemReport, exc: Exception | None = None) -> None:
    if exc is not None:
        if report is None:
            raise exc
        item.error = str(exc)
    if report is not None:
        report.items.append(item)
