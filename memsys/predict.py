"""The untrusted half of an evaluation: build memory from a public view and answer it.

Runs inside the sandbox as ``python -m memsys.predict REQUEST.json`` with the
evaluated tree first on the import path. It sees only the public view (conversations,
question ids and texts), composes its memory config from its own ``configs/memory``,
and writes one JSON line per question to ``<out_dir>/answers.jsonl``, appended and
flushed as answers arrive, so a killed evaluation resumes from what is there. It never
scores: the trusted side validates the answers and scores them against gold.

Built stores are cached by content hash under ``cache_dir()/stores``. Stores built by
earlier evaluations of byte-identical code are offered read-only in
``$MEMSYS_STORES_READONLY`` (the trusted side decides what goes there; embeddings likewise,
see ``memsys.embed``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Sequence

from harness.views import (
    ANSWERS_FILE,
    STORES_READONLY_ENV,
    PredictRequest,
    PublicConversation,
    PublicTurn,
    PublicView,
)
from memsys.config import LLMConfig, MemoryConfig, compose, to_container, validate
from memsys.errors import (
    BudgetExceededError,
    LLMAuthError,
    LLMError,
    LLMRateLimitError,
    LLMServerError,
    LLMTimeoutError,
    MemsysError,
)
from memsys.paths import cache_dir

log = logging.getLogger(__name__)

#: reader errors that say the endpoint failed, not what the system answered: a resumed evaluation asks
#: again (a reply the model got wrong, "format", is the system's answer and stays)
TRANSIENT_ERROR_KINDS = tuple(e.kind for e in (LLMServerError, LLMRateLimitError, LLMTimeoutError))

# memsys modules whose code decides what a built store contains
_INGEST_CODE = ("ingest", "store", "embed.py", "records.py", "temporal.py", "graph", "media", "index")


def readonly_stores_dir() -> Path | None:
    value = os.environ.get(STORES_READONLY_ENV)
    return Path(value) if value else None


def ingestion_code_hash() -> str:
    root = Path(__file__).parent
    h = hashlib.sha256()
    for name in _INGEST_CODE:
        p = root / name
        files = sorted(p.rglob("*")) if p.is_dir() else [p]
        for f in files:
            if f.is_file() and f.suffix in (".py", ".txt", ".json"):
                h.update(str(f.relative_to(root)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()


def store_key(view: PublicView, conv: PublicConversation, cfg: MemoryConfig, llm_model: str | None) -> str:
    """A store is reused when the conversation, the ingestion config and the ingestion code are unchanged."""
    ingest_cfg = {
        "embedder": to_container(cfg.embedder),
        "ingest": to_container(cfg.ingest),
        "sparse_fields": cfg.retrieval.sparse_fields,
        "graph": to_container(cfg.graph) if cfg.graph.enabled else None,
        "llm": llm_model if (cfg.ingest.compression.enabled or (cfg.graph.enabled and cfg.graph.extractor == "llm")) else None,
    }
    payload = json.dumps({"conversation": view.conversation_digest(conv), "cfg": ingest_cfg,
                          "code": ingestion_code_hash()}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:24]


def to_turn(t: PublicTurn, view_dir: Path | None = None) -> Any:
    from memsys.records import Turn

    text = t.text if t.response is None else f"{t.text}\n{t.response_speaker or 'assistant'}: {t.response}"
    caption = t.image_caption
    if caption and t.image_id:  # text systems get the image id with its caption (Mem-Gallery VS answers are ids)
        caption = f"{t.image_id} {caption}"
    return Turn(id=t.id, speaker=t.speaker, text=text,
                timestamp=datetime.fromisoformat(t.timestamp) if t.timestamp else None,
                session_id=t.session_id, image_caption=caption, image_path=_image(t.image_path, view_dir))


def _image(path: str | None, view_dir: Path | None) -> str | None:
    if not path:
        return None
    p = Path(path)
    return str(p if p.is_absolute() or view_dir is None else view_dir / p)


def conversation_turns(conv: PublicConversation, view_dir: Path | None = None) -> list[Any]:
    return [to_turn(t, view_dir) for t in conv.turns()]


def build_or_open_store(view: PublicView, conv: PublicConversation, cfg: MemoryConfig, *, llm: Any = None,
                        root: Path | None = None, view_dir: Path | None = None) -> tuple[Any, bool]:
    """A read-only Memory over the conversation's store; builds it once (atomically).

    Returns (memory, built_now). A store offered read-only by the trusted side is used as is.
    """
    from memsys.memory import Memory

    key = store_key(view, conv, cfg, getattr(getattr(llm, "cfg", None), "model", None))
    name = f"{view.benchmark}-{conv.id}-{key}"
    ro = readonly_stores_dir()
    if root is None and ro is not None and (ro / name / "manifest.json").exists():
        return Memory.open(ro / name, cfg, read_only=True), False
    root = root or cache_dir() / "stores"
    final = root / name
    built = False
    if not (final / "manifest.json").exists():
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=root))
        try:
            mem = Memory.create(tmp / "store", cfg)
            mem.add(conversation_turns(conv, view_dir), llm=llm)
            _ingest_images(mem, conv, view_dir)
            if cfg.graph.enabled:
                from memsys.graph.build import build_graph

                build_graph(mem, extractor=cfg.graph.extractor, llm=llm)
            mem.save()
            mem.close()
            try:
                os.replace(tmp / "store", final)  # atomic publish; a concurrent builder may win
                built = True
            except OSError:
                if not (final / "manifest.json").exists():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return Memory.open(final, cfg, read_only=True), built  # loads the saved graph when enabled


def _ingest_images(mem: Any, conv: PublicConversation, view_dir: Path | None) -> None:
    """Image rounds whose file exists become image MAUs (raw image in the cold tier); the
    caption stays on the text turn either way, so caption mode loses nothing."""
    rounds = [t for t in conv.turns() if t.image_path]
    if not rounds:
        return
    from memsys.media import MediaReport, ingest_image

    report = MediaReport()
    for t in rounds:
        ingest_image(mem, _image(t.image_path, view_dir), t.image_caption,
                     timestamp=datetime.fromisoformat(t.timestamp) if t.timestamp else None,
                     session_id=t.session_id, id=f"{t.id}#image", image_id=t.image_id, speaker=t.speaker,
                     source_id=t.id, report=report)
    for line in report.lines():
        if "error" in line.lower():
            log.warning("%s: %s", conv.id, line)


class FullContext:
    """Baseline systems: the latest turns of the conversation that fit the token budget (all of them
    when the budget is the reader's window and the conversation fits: full_context)."""

    def __init__(self, conv: PublicConversation, budget: int):
        from memsys.temporal import format_date
        from memsys.tokens import count_tokens

        lines, ids, total = [], [], 0
        for t in reversed(list(conv.turns())):
            when = f"[{format_date(datetime.fromisoformat(t.timestamp))}] " if t.timestamp else ""
            text = t.text if t.response is None else f"{t.text}\n{t.response_speaker or 'assistant'}: {t.response}"
            line = f"{when}{t.speaker}: {text}"
            n = count_tokens(line)
            if total + n > budget:
                break
            lines.append(line)
            ids.append(t.id)
            total += n
        self.text = "\n".join(reversed(lines))
        self.ids = list(reversed(ids))
        self.tokens = total


def _text_context(question: str, text: str) -> Any:
    """Wrap raw text (full-context baseline) as a Context the answer prompt can render."""
    from memsys.retrieve.context import Context

    class _Raw(Context):
        def render(self, include_metadata: bool = True, include_graph: bool = True, **_: bool) -> str:
            return text

    return _Raw(query=question, items=[], budget_tokens=0)


def answer_one(req: PredictRequest, memory_cfg: MemoryConfig, question: Any, mem: Any, baseline: FullContext | None,
               llm: Any, view_dir: Path | None) -> dict[str, Any]:
    """One question: retrieve, then (with a reader) answer. A bad reply is a wrong answer, not a failed run."""
    from memsys.answer.generate import answer_question

    t0 = time.perf_counter()
    rec: dict[str, Any] = {"question_id": question.id, "answer": "", "error": None}
    context = None
    if baseline is not None:
        rec.update(retrieved_ids=baseline.ids, context_ids=baseline.ids, context_tokens=baseline.tokens)
    else:
        r = mem.retrieve(question.question)
        context = r.context
        ranked: list[str] = []
        for c in r.candidates:
            for sid in c.mau.details.get("source_ids", [c.mau.source_id]):
                if sid and sid not in ranked:
                    ranked.append(sid)
        rec.update(retrieved_ids=ranked, context_ids=list(context.source_ids),
                   context_tokens=int(context.total_tokens), levels=[int(i.level) for i in context.items],
                   retrieval_ms=float(sum(r.timings_ms.values())))
    if context is None:
        context = _text_context(question.question, baseline.text)
    rec["input_sha256"] = reader_input_digest(question.question, context, memory_cfg)
    if req.reader == "llm":
        try:
            ans = answer_question(llm, question.question, context, memory_cfg.answer,
                                  question_image=_image(question.question_image_path, view_dir))
            rec.update(answer=ans.text, prompt_tokens=int(ans.prompt_tokens),
                       completion_tokens=int(ans.completion_tokens), cost_usd=float(ans.cost_usd),
                       cached=bool(ans.cached))
            if ans.answer_logprobs is not None:
                rec["answer_logprobs"] = [round(lp, 4) for lp in ans.answer_logprobs]
        except (LLMAuthError, BudgetExceededError):  # fatal for the whole evaluation
            raise
        except LLMError as exc:
            rec["error"] = f"{exc.kind}: {exc}"[:1000]
    rec["latency_s"] = time.perf_counter() - t0
    return rec


def reader_input_digest(question: str, context: Any, memory_cfg: MemoryConfig) -> str:
    """What the reader would be sent for this question, hashed (text messages, output format, token
    cap). A change whose digests all equal its parent's cannot change a reader's answers."""
    from memsys.answer.generate import reader_request

    payload = reader_request(question, context, memory_cfg.answer)
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def load_memory_config(req: PredictRequest) -> MemoryConfig:
    """The memory config as this tree defines it (preset + overrides, this tree's schema)."""
    cfg = compose("memsys", [f"memory={req.memory_preset}", *req.memory_overrides])
    return validate(MemoryConfig, cfg.memory, where=f"memory preset '{req.memory_preset}'")


def read_done(path: Path) -> dict[str, dict[str, Any]]:
    """Answers already written; a line cut off by a kill is dropped (and answered again)."""
    done: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return done
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            done[rec["question_id"]] = rec
        except (json.JSONDecodeError, KeyError, TypeError):
            log.warning("%s:%d is incomplete (killed run?); that question is answered again", path, n)
    return done


def is_transient_error(error: Any) -> bool:
    """An answer's error string ("<kind>: message") names an endpoint failure."""
    return isinstance(error, str) and error.split(":", 1)[0] in TRANSIENT_ERROR_KINDS


def predict(req: PredictRequest, *, llm: Any = None, view: PublicView | None = None,
            on_answer: Callable[[dict[str, Any]], None] | None = None) -> int:
    """Answer every question of the view into ``answers.jsonl``; returns how many were answered now."""
    from memsys.store.atomic import atomic_write_text

    view_path = Path(req.view_path)
    view = view or PublicView.read(view_path)
    view_dir = view_path.parent
    memory_cfg = load_memory_config(req)
    out_dir = Path(req.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / ANSWERS_FILE
    asked = set(view.question_ids)
    done = {k: v for k, v in read_done(path).items() if k in asked} if req.resume else {}
    retry = [k for k, v in done.items() if is_transient_error(v.get("error"))]
    if retry:
        log.warning("%d answer(s) in %s failed at the endpoint (%s); asking again", len(retry), path,
                    ", ".join(TRANSIENT_ERROR_KINDS))
        for k in retry:
            del done[k]
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in done.values()))
    if req.reader == "llm" and llm is None:
        raise MemsysError("reader=llm needs an LLM client")
    lock = threading.Lock()
    answered = 0
    with open(path, "a", encoding="utf-8") as out:
        for conv in view.conversations:
            todo = [q for q in conv.questions if q.id not in done]
            if not todo:
                continue
            mem = None
            baseline = None
            if req.system in ("full_context", "recent_window"):
                baseline = FullContext(conv, req.full_context_budget)
            else:
                mem, _ = build_or_open_store(view, conv, memory_cfg, llm=llm, view_dir=view_dir)
            try:
                with ThreadPoolExecutor(max_workers=max(1, req.workers)) as pool:
                    futures = [pool.submit(answer_one, req, memory_cfg, q, mem, baseline, llm, view_dir) for q in todo]
                    for fut in as_completed(futures):
                        try:
                            rec = fut.result()
                        except (LLMAuthError, BudgetExceededError):  # retrying other questions cannot help
                            for f in futures:
                                f.cancel()
                            raise
                        with lock:
                            out.write(json.dumps(rec, ensure_ascii=False) + "\n")
                            out.flush()
                            answered += 1
                        if on_answer:
                            on_answer(rec)
            finally:
                if mem is not None:
                    mem.close()
    return answered


def open_reader(req: PredictRequest) -> Any:
    """The reader's LLM client as the request describes it (inside the sandbox: the gateway)."""
    from memsys.llm.client import LLMClient

    cfg = validate(LLMConfig, dict(req.llm), where="reader llm config")
    return LLMClient(cfg)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memsys.predict", description=__doc__.splitlines()[0])
    parser.add_argument("request", help="request JSON written by the trusted side")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        req = PredictRequest.read(Path(args.request))
        llm = open_reader(req) if req.reader == "llm" else None
        try:
            n = predict(req, llm=llm)
        finally:
            if llm is not None:
                llm.close()
        print(f"answered {n} questions into {Path(req.out_dir) / ANSWERS_FILE}")
        return 0
    except MemsysError as exc:
        print(f"error: {exc}", file=sys.stderr)
        print(f"MEMSYS_ERROR kind={exc.kind} message={exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
