"""Memory-system subcommands of the ``memsys`` program: ingest, search, ask.

Registered by the top-level dispatcher (launcher/main.py); this module imports
only memsys so the system under test stays independent of its scorer and optimizer.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, ContextManager, Sequence


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ingest", help="ingest a LoCoMo-format JSON or a JSONL of turns into a store")
    p.add_argument("file", type=Path)
    p.add_argument("--conversation", help="only this LoCoMo sample_id (e.g. conv-26)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--append", action="store_true", help="add new turns to an existing store")
    mode.add_argument("--resume", action="store_true",
                      help="finish an ingest of this same input that was stopped: what it stored is skipped")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("search", help="query a store and print ranked items with level and score")
    p.add_argument("query")
    p.add_argument("-n", type=int, default=10, help="items to print")
    _scope_args(p)
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("ask", help="answer a question from a store with the configured reader (llm=...)")
    p.add_argument("question")
    _scope_args(p)
    p.set_defaults(func=cmd_ask)


def _scope_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("scope (applied inside the index query)")
    g.add_argument("--user", help="only this user's memories (a MAU's details.user)")
    g.add_argument("--conversation", help="only this conversation (details.conversation, else the session id)")
    g.add_argument("--since", help="only memories at or after this time (ISO 8601, e.g. 2023-05-01)")
    g.add_argument("--until", help="only memories at or before this time (ISO 8601; a bare date means its end)")


def _scope(args: argparse.Namespace):
    """The query scope named by the flags, or None; a bad date is a one-line InputError."""
    from datetime import datetime, time

    from memsys.errors import InputError
    from memsys.index.scope import Scope

    def when(text: str | None, flag: str, *, end: bool) -> datetime | None:
        if text is None:
            return None
        try:
            ts = datetime.fromisoformat(text)
        except ValueError:
            raise InputError(f"--{flag} {text!r} is not an ISO 8601 date or time (e.g. 2023-05-01)") from None
        return datetime.combine(ts.date(), time.max) if end and len(text) <= 10 else ts

    flag = {k: getattr(args, k, None) for k in ("user", "conversation", "since", "until")}  # callers may omit them
    scope = Scope(user=flag["user"], conversation=flag["conversation"],
                  start=when(flag["since"], "since", end=False), end=when(flag["until"], "until", end=True))
    return None if scope.is_empty() else scope


def _cfg(overrides: Sequence[str]):
    from memsys.config import MemoryConfig, compose, validate

    cfg = compose("memsys", overrides)
    return cfg, validate(MemoryConfig, cfg.memory, where="memory config")


def cmd_ingest(args: argparse.Namespace) -> int:
    from rich.console import Console

    from memsys.errors import InputError
    from memsys.ingest.readers import read_jsonl_turns, read_locomo_turns
    from memsys.memory import Memory
    from memsys.store.store import half_created

    console = Console()
    cfg, mcfg = _cfg(args.overrides)
    store = Path(cfg.store)
    if args.file.suffix == ".jsonl":
        turns = list(read_jsonl_turns(args.file))
    else:
        per_conv = read_locomo_turns(args.file, args.conversation)
        turns = [t for ts in per_conv.values() for t in ts]
    # a store whose creation was stopped holds nothing: any ingest creates it again (MemoryStore.create)
    exists = store.is_dir() and any(store.iterdir()) and not half_created(store)
    if exists and not (args.append or args.resume):
        raise InputError(f"{store} already holds a store: --append adds new turns to it, --resume finishes an "
                         "ingest of this input that was stopped")
    # --resume of an ingest killed before its store existed starts it; --append needs the store
    mem = Memory.open(store, mcfg) if exists or args.append else Memory.create(store, mcfg)
    with mem, _compression_llm(cfg, mcfg) as llm:
        report = mem.add(turns, progress=True, resume=args.resume, llm=llm)
    skipped = f", {report.resumed_after} already processed by the stopped ingest" if args.resume else ""
    console.print(
        f"[bold]{store}[/]: {report.accepted} MAUs stored ({report.uncertain} uncertain), "
        f"{report.rejected} rejected as redundant, {len(turns)} turns read{skipped}"
    )
    comp = report.compression
    if comp is not None:
        resumed = f", {comp.resumed_windows} written by the stopped ingest" if comp.resumed_windows else ""
        failed = f"; {comp.failed_windows} failed (a rerun with --resume asks them again)" if comp.failed_windows else ""
        console.print(f"compression: {comp.windows} windows{resumed}, {comp.statements} restatements, "
                      f"{comp.consolidated} consolidated{failed}")
    return 0


def _compression_llm(cfg: Any, mcfg: Any) -> ContextManager[Any]:
    """The configured LLM (``llm=...``) when the memory config compresses at write time, else nothing."""
    from contextlib import nullcontext

    if not mcfg.ingest.compression.enabled:
        return nullcontext()
    from memsys.config import LLMConfig, validate
    from memsys.llm import open_llm

    return open_llm(validate(LLMConfig, cfg.llm, where="llm config"))


def cmd_search(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from memsys.memory import Memory

    cfg, mcfg = _cfg(args.overrides)
    overrides_given = any(o.startswith("memory") for o in args.overrides)
    mem = Memory.open(cfg.store, mcfg if overrides_given else None, read_only=True)
    r = mem.retrieve(args.query, scope=_scope(args))
    table = Table(title=f"{args.query}  ({r.context.total_tokens} tokens, {len(r.items)} items)")
    for col in ("#", "level", "sim", "via", "when", "who", "text"):
        table.add_column(col, overflow="fold")
    for n, it in enumerate(r.items[: args.n], start=1):
        when = f"{it.mau.timestamp:%Y-%m-%d}" if it.mau.timestamp else ""
        table.add_row(str(n), str(it.level), f"{it.similarity:.3f}", "+".join(sorted(it.sources)), when,
                      it.mau.speaker or "", it.text[:200])
    Console().print(table)
    return 0


def cmd_ask(args: argparse.Namespace) -> int:
    """Retrieve, answer with ``llm`` (default: the embedded model), print the answer and the context lines
    the reader was given."""
    from rich.console import Console

    from memsys.answer.generate import answer_question
    from memsys.config import LLMConfig, validate
    from memsys.llm import open_llm
    from memsys.memory import Memory

    cfg, mcfg = _cfg(args.overrides)
    scope = _scope(args)
    overrides_given = any(o.startswith("memory") for o in args.overrides)
    llm_cfg = validate(LLMConfig, cfg.llm, where="llm config")
    console = Console()
    with Memory.open(cfg.store, mcfg if overrides_given else None, read_only=True) as mem, open_llm(llm_cfg) as llm:
        context = mem.retrieve(args.question, scope=scope).context
        ans = answer_question(llm, args.question, context, mem.cfg.answer)
    console.print(f"[bold]{ans.text}[/]")
    why = ""
    if context.abstain_reason:
        why = f"abstained before asking the reader: {context.abstain_reason}"
    elif ans.abstain_reason:
        why = f"abstained after the reply {ans.raw_reply!r}: {ans.abstain_reason}"
    if why:
        console.print(why, style="dim", markup=False, highlight=False, soft_wrap=True)
    console.print(f"[dim]{context.total_tokens} context tokens, {ans.prompt_tokens} prompt tokens, "
                  f"{ans.latency_s:.1f} s[/]")
    rendered = context.render(include_metadata=mem.cfg.answer.include_metadata,
                              include_graph=mem.cfg.answer.include_graph_facts,
                              group_by_session=mem.cfg.answer.group_by_session,
                              facts_style=mem.cfg.answer.graph_facts_style)
    console.print(rendered or "(no memories)", markup=False, highlight=False, soft_wrap=True)
    return 0
