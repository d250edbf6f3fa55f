"""Helpers shared by the research-loop tests: git in a scratch repo, the loop's LLM on the test server."""

from __future__ import annotations

import dataclasses
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from memsys.llm.client import LLMClient
from tests.support.openai_server import OpenAITestServer


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def scripted_opener(server: OpenAITestServer, *, cache: bool = False, timeout_s: float = 30.0):
    """An ``llm_opener`` for ResearchLoop: the researcher (and reader) talk to the scripted server."""
    @contextmanager
    def opener(cfg: Any, *, budget: Any = None, **_: Any) -> Iterator[LLMClient]:
        c = dataclasses.replace(cfg, backend="openai", base_url=server.base_url, cache=cache, max_retries=0,
                                timeout_s=timeout_s)
        with LLMClient(c, budget=budget) as client:
            yield client
    return opener
