"""One store per conversation of a split, built with a preset: the reader-free benches' common first step.

Why its own module: the abstention margins (bench_abstention), the context rebuild of the reader-run
compositions (research.perf.bench_answer_times) and the retrieval benches all ingest a split's
conversations the same way; one definition keeps them measuring the same stores.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Iterator, Sequence

from benchmarks.datasets import load_benchmark
from benchmarks.splits import load_benchmark_config, select
from benchmarks.views import public_turn
from memsys.memory import Memory
from memsys.predict import to_turn
from memsys.records import Turn


def memsys_turns(conv: Any) -> list[Turn]:
    """A dataset conversation's turns exactly as an evaluation ingests them (caption mode): through the
    public view, so a Mem-Gallery round keeps the assistant's reply and the image id before its caption."""
    return [to_turn(public_turn(conv, t)) for s in conv.sessions for t in s.turns]


def split_memories(split: str, preset: str, overrides: Sequence[str] = (),
                   question_ids: set[str] | None = None, *, benchmark: str = "locomo") -> Iterator[tuple[Any, Memory]]:
    """(conversation, its freshly built Memory) for each conversation of the benchmark's split, in a
    temporary folder; each store is closed when the caller moves on. With ``question_ids``, only the
    conversations that hold one of them are built."""
    bench = select(load_benchmark(benchmark), split, None, load_benchmark_config(benchmark))
    with tempfile.TemporaryDirectory(prefix="bench-stores-") as tmp:
        for conv in bench.conversations:
            if question_ids is not None and not any(q.id in question_ids for q in conv.questions):
                continue
            mem = Memory.create(Path(tmp) / conv.id, preset, overrides=list(overrides))
            try:
                mem.add(memsys_turns(conv))
                yield conv, mem
            finally:
                mem.close()
