"""A report page as the report tests read it: images, tables by class, <pre> texts, headings, <dl> metadata."""

from __future__ import annotations

import base64
from html.parser import HTMLParser


def _flat(buf: list[str]) -> str:
    return " ".join("".join(buf).split())


class Page(HTMLParser):
    def __init__(self, text: str):
        super().__init__()
        self.imgs: list[dict[str, str]] = []
        self.tables: list[tuple[str, list[list[str]]]] = []  # (class, rows of cell texts)
        self.pres: list[str] = []
        self.headings: list[str] = []
        self.meta: dict[str, str] = {}  # <dt> text -> <dd> text
        self._cell: list[str] | None = None
        self._pre: list[str] | None = None
        self._heading: list[str] | None = None
        self._dt: list[str] | None = None
        self._dd: list[str] | None = None
        self._last_dt = ""
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a)
        elif tag == "table":
            self.tables.append((a.get("class") or "", []))
        elif tag == "tr" and self.tables:
            self.tables[-1][1].append([])
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "pre":
            self._pre = []
        elif tag in ("h1", "h2", "h3"):
            self._heading = []
        elif tag == "dt":
            self._dt = []
        elif tag == "dd":
            self._dd = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][1][-1].append(_flat(self._cell))
            self._cell = None
        elif tag == "pre" and self._pre is not None:
            self.pres.append("".join(self._pre))  # verbatim: diffs keep their layout
            self._pre = None
        elif tag in ("h1", "h2", "h3") and self._heading is not None:
            self.headings.append(_flat(self._heading))
            self._heading = None
        elif tag == "dt" and self._dt is not None:
            self._last_dt, self._dt = _flat(self._dt), None
        elif tag == "dd" and self._dd is not None:
            self.meta[self._last_dt], self._dd = _flat(self._dd), None

    def handle_data(self, data):
        for buf in (self._cell, self._pre, self._heading, self._dt, self._dd):
            if buf is not None:
                buf.append(data)

    def table(self, cls: str) -> list[list[str]]:
        found = [rows for c, rows in self.tables if cls in c.split()]
        assert found, f"no table {cls!r}; tables: {[c for c, _ in self.tables]}"
        return found[0]

    def png_images(self) -> list[bytes]:
        out = []
        for im in self.imgs:
            src = im.get("src", "")
            assert src.startswith("data:image/png;base64,"), src[:60]
            out.append(base64.b64decode(src.split(",", 1)[1]))
        return out
