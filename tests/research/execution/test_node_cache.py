"""research.execution.node_cache: a node's cache stays bounded, and nothing a live task uses is removed.

Real pieces: folders on disk, real flocks, a real worker process killed with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.paths import REPO_ROOT
from research.execution.node_cache import STAGING_STALE_S, hold, prune


def _entries(root: Path, names: list[str]) -> None:
    now = time.time()
    for age, name in enumerate(reversed(names)):  # the first name is the most recently used
        (root / name / "memsys").mkdir(parents=True)
        os.utime(root / name, (now - 10 * age, now - 10 * age))


def test_prune_keeps_the_most_recently_used_and_every_entry_in_use(tmp_path):
    content = tmp_path / "content"
    _entries(content, ["tree-a", "tree-b", "tree-c", "tree-d", "tree-e"])  # tree-e newest
    in_use = hold(content / "tree-a")  # the oldest, but a sandbox reads it
    removed = prune(tmp_path, keep=2)
    assert sorted(removed) == ["content/tree-b", "content/tree-c"]
    assert sorted(p.name for p in content.iterdir() if not p.name.startswith(".")) == ["tree-a", "tree-d", "tree-e"]
    in_use.release()
    assert prune(tmp_path, keep=2) == ["content/tree-a"]


def test_a_killed_workers_scratch_is_removed_and_a_live_tasks_is_kept(tmp_path):
    tasks = tmp_path / "tasks"
    worker = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from research.execution.node_cache import hold\n"
         "d = Path(sys.argv[1]); h = hold(d); (d / 'out').mkdir(parents=True); print('ready', flush=True)\n"
         "time.sleep(600)", str(tasks / "dead")],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout.readline().strip() == "ready"
        mine = hold(tasks / "live")
        (tasks / "live").mkdir()
        assert prune(tmp_path, keep=0) == []  # both held
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        assert prune(tmp_path, keep=0) == ["tasks/dead"]  # the lock went with the process
        assert (tasks / "live").is_dir()
        mine.release()
        assert prune(tmp_path, keep=0) == ["tasks/live"]
    finally:
        worker.kill()
        worker.wait()


def test_staging_left_by_a_killed_unpack_is_removed_once_stale(tmp_path):
    staging = tmp_path / "content" / ".tree-a.0badf00d"
    staging.mkdir(parents=True)
    assert prune(tmp_path, keep=4) == []
    assert prune(tmp_path, keep=4, now=time.time() + STAGING_STALE_S + 1) == ["content/.tree-a.0badf00d"]
    assert not staging.exists()


def test_a_hold_survives_its_lock_file_being_replaced(tmp_path):
    entry = tmp_path / "content" / "tree-a"
    entry.mkdir(parents=True)
    first = hold(entry)
    lock = tmp_path / "content" / ".locks" / "tree-a.lock"
    lock.unlink()  # another cleaner removed it: the next holder must lock the file that is there now
    second = hold(entry)
    assert lock.exists()
    first.release()
    assert prune(tmp_path, keep=0) == []  # the second hold is on the live lock file
    second.release()
    assert prune(tmp_path, keep=0) == ["content/tree-a"]
