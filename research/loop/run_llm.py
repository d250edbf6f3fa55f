"""The run's one LLM endpoint: the researcher's client and, for a reader run, the gateway the sandboxed
reader reaches it through, under one token and USD budget.

Why apart from the loop: the key stays in this process. The sandbox has no network; its reader talks to a
Unix-socket gateway that forwards to this client. Switching to the embedded model (the paper's 403 case)
replaces both at once, so researcher and reader never run on different models by accident.
"""

from __future__ import annotations

import shutil
from contextlib import ExitStack
from typing import Any, Callable, Iterable

from benchmarks.config import reader_prompt_cap
from harness.errors import MemsysError
from research.config import RunSetup
from research.evaluation.reader_link import open_gateway, short_socket_dir


class RunLLM:
    def __init__(self, setup: RunSetup, opener: Callable[..., Any] | None = None):
        self.setup, self._opener = setup, opener
        self.llm: Any = None
        self.gateway: Any = None
        self.budget: Any = None
        self.stack: ExitStack | None = None  # the run's stack: a switch opens the new client on it

    def needed(self) -> bool:
        return self.setup.eval.options.reader == "llm" or self.setup.research.proposer in ("llm", "alternate", "hybrid")

    def open(self, stack: ExitStack) -> None:
        """The client (and the gateway for a reader run), closed with ``stack``; nothing when no LLM is needed."""
        self.stack = stack
        if not self.needed():
            return
        from harness.llm_budget import Budget

        cfg = self.setup.eval.llm
        opener = self._opener
        if opener is None:
            from memsys.llm.client import open_llm as opener
        b = self.setup.research.budget
        if self.budget is None:  # one budget for the researcher and the reader (through the gateway)
            self.budget = Budget(max_tokens=b.tokens, max_usd=b.usd)
        self.llm = stack.enter_context(opener(cfg, budget=self.budget))
        if self.setup.eval.options.reader == "llm":
            # the sandbox has no network: its reader reaches this endpoint through a gateway on a
            # Unix socket; the key stays in this process
            sock = short_socket_dir()
            stack.callback(shutil.rmtree, sock, True)
            self.gateway = stack.enter_context(open_gateway(cfg, self.llm, sock, self.budget,
                                                            prompt_cap=reader_prompt_cap(self.setup.eval.options)))

    def use_local_config(self) -> Any:
        """Point the run's LLM config at the embedded model; returns the config it replaced."""
        from memsys.config import LLMConfig, compose, validate

        old = self.setup.eval.llm
        self.setup.eval.llm = validate(LLMConfig, compose("run", ["llm=local"]).llm, where="llm=local")
        return old

    def switch_to_local(self, proposers: Iterable[Any] = ()) -> str:
        """The paper's 403 case: continue on the embedded local model (reader and researcher)."""
        old = self.use_local_config()
        try:
            self.open(self.stack)
        except MemsysError as exc:
            self.setup.eval.llm = old
            return f"local fallback failed: {exc}"
        for p in proposers:
            if hasattr(p, "llm"):
                p.llm = self.llm
        return f"switched reader and researcher from {old.model} to the embedded {self.setup.eval.llm.model}"
