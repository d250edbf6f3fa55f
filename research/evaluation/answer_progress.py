"""Progress of a sandboxed evaluation, read from the one channel the trusted side watches: the growth of
the sandbox's answers file. Nothing the sandbox prints or sends is trusted for it, so a candidate cannot
fake progress any more than a score; a bar that lags is the price.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class answer_progress:
    """Progress fed by the growth of the sandbox's answers file (the only channel we read): a tqdm
    bar, or ``on_update(done, total)`` calls (the loop turns them into stage progress events)."""

    def __init__(self, path: Path, total: int, on_update: Any = None):
        self.path, self.total, self.on_update = path, total, on_update
        self._stop = None
        self._bar = None

    def _update(self, seen: int, n: int) -> None:
        if self._bar is not None:
            self._bar.update(n - seen)
        else:
            self.on_update(n, self.total)

    def __enter__(self) -> "answer_progress":
        import threading

        total = self.total
        if self.on_update is None:
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="q", desc="eval")
        self._stop = threading.Event()
        self._seen = 0

        def poll() -> None:
            while not self._stop.wait(0.5):
                try:
                    with open(self.path, "rb") as fh:
                        n = min(fh.read().count(b"\n"), total)
                except OSError:
                    continue
                if n > self._seen:
                    self._update(self._seen, n)
                    self._seen = n

        self._thread = threading.Thread(target=poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        if exc[0] is None and self._seen < self.total:
            self._update(self._seen, self.total)
        if self._bar is not None:
            self._bar.close()
