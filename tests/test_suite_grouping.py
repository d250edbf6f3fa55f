"""The test command's promise that tests sharing an expensive module fixture run on one worker.

``scripts/test.sh`` runs ``--dist loadgroup``: a module marked ``xdist_group`` (a Ray cluster, a recorded
loop run) builds its fixture once. When a pytest / pytest-xdist pair stops honouring the mark, nothing
fails: the fixture is silently built on every worker, the suite slows by minutes, and two Ray clusters
on one machine race for the client-server port. This runs a real pytest-xdist session to catch that.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

GROUPED = '''
import os, time, pytest
pytestmark = pytest.mark.xdist_group("one")

@pytest.fixture(scope="module")
def built():
    return os.environ["PYTEST_XDIST_WORKER"]

@pytest.mark.parametrize("i", range(6))
def test_grouped(built, i):
    time.sleep(0.2)
    assert os.environ["PYTEST_XDIST_WORKER"] == built
    with open(os.environ["GROUP_LOG"], "a") as log:
        log.write(built + "\\n")
'''

UNGROUPED = '''
import time

def test_other_a():
    time.sleep(0.2)

def test_other_b():
    time.sleep(0.2)
'''


def test_an_xdist_group_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    (tmp_path / "test_ungrouped.py").write_text(UNGROUPED)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # a root of its own: not this repo's conftest or options
    log = tmp_path / "workers.log"
    argv = [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider",
            "-p", "no:randomly", "--timeout", "60", "--basetemp", str(tmp_path / "inner-tmp"), str(tmp_path)]
    # --basetemp: without it the inner session prunes old /tmp/pytest-of-<user>/ folders, and deleting a
    # previous suite's stores and worktrees took 40-50 s of this test's 54 s (session 37)
    try:
        # 3-5 s alone; once, beside a reader bench and the rest of the suite, it passed 120 s: the inner
        # session's own timeout and this one's larger margin make the next stall say where it hung
        out = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "GROUP_LOG": str(log)})
    except subprocess.TimeoutExpired as exc:
        said = [(x or b"")[-3000:].decode(errors="replace") if isinstance(x, bytes) else (x or "")[-3000:]
                for x in (exc.stdout, exc.stderr)]
        raise AssertionError(f"the inner xdist session hung for 300 s; it said: {said[0]} {said[1]}") from None
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    workers = log.read_text().split()
    assert len(workers) == 6 and len(set(workers)) == 1, f"the group ran on {sorted(set(workers))}: see the module docstring"
