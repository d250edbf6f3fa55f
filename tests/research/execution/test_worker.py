"""research.worker: a sandbox killed along with its Ray node is told apart from a candidate that died.

Real processes: the "raylet" is a real parent process that exits (or stays), and the worker asks about
its own parent, as a Ray worker does about its raylet (RAY_RAYLET_PID).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from research.execution.worker import killed_with_its_node
from sandbox import SandboxResult


def ended(sig: int | None, *, timed_out: bool = False, oom_killed: bool = False) -> SandboxResult:
    return SandboxResult(exit_code=None if sig else 0, signal=sig, timed_out=timed_out, oom_killed=oom_killed,
                         stdout="", stderr="", stdout_truncated=False, stderr_truncated=False, duration_s=0.1,
                         backend="process")


#: a worker whose parent (its "raylet") is the shell that started it; it records what it concluded
WORKER = """
import json, os, sys, time
os.environ["RAY_RAYLET_PID"] = str(os.getppid())
from research.execution.worker import killed_with_its_node
from sandbox import SandboxResult
started = time.monotonic()
lost = killed_with_its_node(SandboxResult(None, 9, False, False, "", "", False, False, 0.1, "process"), grace_s=20)
open(sys.argv[1], "w").write(json.dumps({"lost": lost, "waited": time.monotonic() - started}))
"""


def test_a_kill_followed_by_the_raylet_going_is_the_nodes(tmp_path: Path):
    """The order a dying node shows: the sandbox is SIGKILLed, then the raylet goes (here 0.5 s later)."""
    out = tmp_path / "verdict.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run(["sh", "-c", f'"{sys.executable}" -c \'{WORKER}\' "{out}" & sleep 0.5'], env=env, check=True)
    deadline = time.monotonic() + 30
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    verdict = json.loads(out.read_text())
    assert verdict["lost"] is True and verdict["waited"] < 10  # it noticed the parent go, well before the grace ran out


def test_a_kill_on_a_live_node_is_the_candidates(monkeypatch):
    monkeypatch.setenv("RAY_RAYLET_PID", str(os.getppid()))  # our parent outlives this test
    started = time.monotonic()
    assert killed_with_its_node(ended(signal.SIGKILL), grace_s=0.3) is False
    assert time.monotonic() - started >= 0.3  # it gave the node the grace to go first


def test_kills_the_sandbox_explains_and_other_endings_are_never_the_nodes(monkeypatch):
    monkeypatch.setenv("RAY_RAYLET_PID", "1")  # a parent that is not ours: "gone" at once, if ever asked
    assert killed_with_its_node(ended(signal.SIGKILL)) is True
    for result in (ended(signal.SIGKILL, timed_out=True), ended(signal.SIGKILL, oom_killed=True),
                   ended(signal.SIGTERM), ended(signal.SIGSEGV), ended(None)):
        assert killed_with_its_node(result, grace_s=0) is False, result
    monkeypatch.delenv("RAY_RAYLET_PID")  # not a Ray worker (executor=local): never the node's
    assert killed_with_its_node(ended(signal.SIGKILL), grace_s=0) is False
