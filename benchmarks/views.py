"""The public view of a benchmark selection: what the evaluated code may see.

Made on the trusted side for each evaluation: the selection's conversations (turns,
dates, captions) and, per question, its id and text. Gold answers, evidence ids,
categories and adversarial answers stay here. Image files the selection refers to are
linked into the view's folder, so the sandbox never needs the data directory.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from benchmarks.datasets.schema import Benchmark, Conversation, DatasetTurn
from harness.views import VIEW_FILE, PublicConversation, PublicQuestion, PublicSession, PublicTurn, PublicView


def _link_image(src: str | None, folder: Path | None, name: str) -> str | None:
    """The image's path inside the view folder (hard link, else copy), or None without a file."""
    if not src or folder is None or not Path(src).is_file():
        return None
    rel = Path("images") / name
    dst = folder / rel
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.exists():
        try:
            os.link(src, dst)
        except OSError:
            shutil.copyfile(src, dst)
    return str(rel)


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def public_turn(conv: Conversation, t: DatasetTurn, folder: Path | None = None) -> PublicTurn:
    image = _link_image(t.image_path, folder, f"{_safe(conv.id)}/{_safe(t.id)}{Path(t.image_path or '').suffix}")
    return PublicTurn(id=t.id, session_id=t.session_id, speaker=t.speaker, text=t.text,
                      timestamp=t.timestamp.isoformat() if t.timestamp else None, image_caption=t.image_caption,
                      image_id=t.image_id, image_path=image, response=t.response, response_speaker=t.response_speaker)


def public_view(bench: Benchmark, folder: Path | None = None) -> PublicView:
    """The view of ``bench`` (already restricted to a split/sample); images linked under ``folder``."""
    convs = []
    for c in bench.conversations:
        sessions = tuple(PublicSession(id=s.id, index=s.index, date=s.date.isoformat() if s.date else None,
                                       date_text=s.date_text, turns=tuple(public_turn(c, t, folder) for t in s.turns))
                         for s in c.sessions)
        questions = tuple(PublicQuestion(
            id=q.id, question=q.question,
            question_image_path=_link_image(q.question_image_path, folder,
                                            f"{_safe(c.id)}/{_safe(q.id)}{Path(q.question_image_path or '').suffix}"),
            question_image_caption=q.question_image_caption) for q in c.questions)
        convs.append(PublicConversation(c.id, tuple(c.speakers), sessions, questions))
    return PublicView(bench.name, bench.split, bench.sample, tuple(convs))


def write_public_view(bench: Benchmark, folder: Path) -> PublicView:
    """Write ``folder/view.json`` (and the linked images); returns the view."""
    folder.mkdir(parents=True, exist_ok=True)
    view = public_view(bench, folder)
    view.write(folder / VIEW_FILE)
    return view
