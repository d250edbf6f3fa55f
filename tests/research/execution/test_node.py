"""research.execution.node without Ray: digests of what a sandbox mounts, the environment check against real
interpreters, and the spec rewritten to a node's paths.

Real pieces: files on disk, this venv's interpreter and the system's (/usr/bin/python3) when present.
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import tarfile
from pathlib import Path

import pytest

from research.execution.node import (
    Content,
    Environment,
    NodeFault,
    NodeNeeds,
    TaskRoots,
    content_digest,
    pack,
    prepare_on_node,
    rebase_spec,
    unpack,
)
from research.execution.node_cache import prune
from research.execution.worker import UntrustedTask
from sandbox import SandboxSpec, make_sandbox


def _tree(root: Path) -> Path:
    (root / "memsys" / "__pycache__").mkdir(parents=True)
    (root / "memsys" / "a.py").write_text("A = 1\n")
    (root / "configs").mkdir()
    (root / "configs" / "x.yaml").write_text("x: 1\n")
    return root


def test_the_digest_covers_names_bytes_and_exec_bits_not_bytecode(tmp_path):
    root = _tree(tmp_path / "t")
    names = ("configs", "memsys")
    first = content_digest(root, names)
    (root / "memsys" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0bytecode")
    assert content_digest(root, names) == first  # the sandbox's own bytecode changes nothing
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    assert content_digest(copy, names) == first  # where it lies does not matter
    (copy / "memsys" / "a.py").write_text("A = 2\n")
    assert content_digest(copy, names) != first
    os.chmod(root / "configs" / "x.yaml", 0o755)
    assert content_digest(root, names) != first
    assert content_digest(root, ("memsys", "harness")) is None  # a missing folder: nothing to compare


def test_an_environment_is_equal_to_itself_and_another_interpreter_differs():
    here = Environment.of(sys.executable)
    assert here is not None and here.count > 10 and here.differences(Environment.of(sys.executable)) == []
    assert here.differences(None) == [f"python {sys.executable} is missing or does not run"]
    assert Environment.of("/nonexistent/bin/python") is None
    system = Environment.of("/usr/bin/python3") if Path("/usr/bin/python3").exists() else None
    if system is None:
        pytest.skip("no second interpreter on this machine")
    differs = " ".join(here.differences(system))
    assert "installed distributions differ" in differs


def _tarball(*members: tuple[str, bytes, str]) -> bytes:
    """A tarball of (type, name, link target or content) members, as a hostile tree could be packed."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for kind, name, payload in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                info.linkname = payload.decode()
                tar.addfile(info)
            else:
                info.size = len(payload) if kind == tarfile.REGTYPE else 0
                tar.addfile(info, io.BytesIO(payload) if kind == tarfile.REGTYPE else None)
    return buf.getvalue()


HOSTILE = {
    "dot-dot name": [(tarfile.REGTYPE, "../outside", b"x")],
    "link out": [(tarfile.SYMTYPE, "memsys/out", b"../../outside")],
    "absolute link": [(tarfile.SYMTYPE, "memsys/etc", b"/etc/passwd")],
    "hard link out": [(tarfile.LNKTYPE, "memsys/hard", b"../outside")],
    "fifo": [(tarfile.FIFOTYPE, "memsys/pipe", b"")],
}


@pytest.mark.parametrize("filters", [True, False], ids=["data-filter", "no-filter"])
def test_a_shipped_tree_unpacks_whole_and_a_hostile_tarball_is_refused(tmp_path, monkeypatch, filters):
    """Debian 12's Python 3.11.2 has no tarfile extraction filters (a newcomer's venv built on it could not
    ship a tree to a Ray node): without them the same rules are checked before anything is written."""
    if filters and not hasattr(tarfile, "data_filter"):
        pytest.skip("this Python has no tarfile extraction filters")
    if not filters:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    tree = _tree(tmp_path / "tree")
    (tree / "memsys" / "alias.py").symlink_to("a.py")
    names = ("configs", "memsys")
    unpack(pack(tree, names), tmp_path / "copy")
    assert content_digest(tmp_path / "copy", names) == content_digest(tree, names)
    assert (tmp_path / "copy" / "memsys" / "alias.py").readlink() == Path("a.py")
    for case, members in HOSTILE.items():
        dest = tmp_path / "dest" / case.replace(" ", "-")
        with pytest.raises((ValueError, tarfile.TarError)):
            unpack(_tarball((tarfile.DIRTYPE, "memsys", b""), *members), dest)
        assert not (dest.parent / "outside").exists() and not (dest / "memsys" / "etc").exists(), case
    absolute = _tarball((tarfile.REGTYPE, "/abs-outside", b"x"))
    try:  # the data filter strips the leading '/', the fallback refuses the name: either way it stays inside
        unpack(absolute, tmp_path / "abs")
    except ValueError:
        assert not filters
    assert not Path("/abs-outside").exists()


def _task(tmp: Path, python: str) -> tuple[UntrustedTask, NodeNeeds]:
    tree = _tree(tmp / "tree")
    work = tmp / "work"
    (work / "public").mkdir(parents=True)
    (work / "out").mkdir()
    (work / "public" / "view.json").write_text("{}")
    request = work / "public" / "request.json"
    request.write_text('{"view_path": "%s", "out_dir": "%s"}' % (work / "public" / "view.json", work / "out"))
    spec = SandboxSpec(argv=[python, "-c", "pass", str(request)], workdir=work / "out", writable=[work / "out"],
                       readonly=[tree / "memsys", work / "public"], env={"PYTHONPATH": str(tree)})
    roots = TaskRoots(tree, ("configs", "memsys"), work, work / "public", request)
    task = UntrustedTask(make_sandbox("process"), spec, work / "out" / "answers.jsonl", "t", roots)
    needs = NodeNeeds(Content("tree", tree, roots.code_dirs, content_digest(tree, roots.code_dirs)),
                      Content("public", work / "public", ("view.json",), content_digest(work / "public", ("view.json",))),
                      Environment.of(sys.executable), request.read_bytes(), "never", str(tmp / "cache"))
    return task, needs


def test_a_node_whose_environment_differs_fails_in_one_line_naming_it(tmp_path):
    if not Path("/usr/bin/python3").exists():
        pytest.skip("no second interpreter on this machine")
    task, needs = _task(tmp_path, "/usr/bin/python3")  # the driver expects this venv's interpreter
    fault = prepare_on_node(task, needs, "node-7 (hostB)")
    assert isinstance(fault, NodeFault) and "\n" not in fault.message
    assert fault.message.startswith("node node-7 (hostB): the environment differs from the driver's: ")
    # this venv may be built on /usr/bin/python3 itself (Debian's, as a newcomer's bootstrap makes it):
    # then only the distributions differ, and the message must not claim another version
    system = Environment.of("/usr/bin/python3")
    same_version = system is not None and system.version == needs.environment.version
    assert ("the driver's: python 3." in fault.message) is not same_version
    assert "installed distributions differ" in fault.message


def test_a_node_that_matches_runs_the_spec_as_given_and_never_ships_a_different_view_unasked(tmp_path):
    task, needs = _task(tmp_path, sys.executable)
    placed = prepare_on_node(task, needs, "n1")
    assert placed.spec == task.spec and placed.shipped == () and placed.scratch is None
    (tmp_path / "work" / "public" / "view.json").write_text('{"stale": true}')
    fault = prepare_on_node(task, needs, "n1")  # research.ray.ship=never: no bundle to take
    assert isinstance(fault, NodeFault)
    assert "the public at" in fault.message and "is different" in fault.message and "ship=never" in fault.message


def test_rebased_spec_moves_paths_and_drops_caches_this_node_lacks(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    (new / "code").mkdir(parents=True)
    spec = SandboxSpec(argv=["python", str(old / "code" / "r.json")], workdir=old / "code",
                       readonly=[old / "code", tmp_path / "gone"],
                       env={"PYTHONPATH": f"{old / 'code'}{os.pathsep}{old}x", "STORES": str(tmp_path / "gone"),
                            "BASE": "http://gateway/v1"})
    moved = rebase_spec(spec, {str(old): str(new)})
    assert moved.argv == ("python", str(new / "code" / "r.json")) and moved.workdir == new / "code"
    assert moved.readonly == (new / "code",)
    assert moved.env == {"PYTHONPATH": f"{new / 'code'}{os.pathsep}{old}x", "BASE": "http://gateway/v1"}


def test_a_shipped_tree_moves_only_its_code_folders_and_its_root_by_name(tmp_path):
    """The driver's checkout holds more than the tree (the venv, the run folders): only the shipped
    folders, and the root where a path names it exactly (PYTHONPATH), move to the node's copy."""
    root, new = tmp_path / "repo", tmp_path / "node" / "tree-x"
    (new / "memsys").mkdir(parents=True)
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / "runs" / "r1" / "out").mkdir(parents=True)
    spec = SandboxSpec(argv=[str(root / ".venv" / "bin" / "python"), "-m", "memsys.predict"],
                       workdir=root / "runs" / "r1" / "out", writable=[root / "runs" / "r1" / "out"],
                       readonly=[root / "memsys", root / ".venv"], env={"PYTHONPATH": str(root)})
    moved = rebase_spec(spec, {str(root / "memsys"): str(new / "memsys")}, {str(root): str(new)})
    assert moved.argv[0] == str(root / ".venv" / "bin" / "python")  # the venv stays where it is
    assert moved.workdir == root / "runs" / "r1" / "out" and moved.writable == (root / "runs" / "r1" / "out",)
    assert moved.readonly == (new / "memsys", root / ".venv")
    assert moved.env == {"PYTHONPATH": str(new)}


def test_a_task_whose_folder_is_elsewhere_gets_scratch_that_is_held_until_released(tmp_path):
    task, needs = _task(tmp_path, sys.executable)
    shutil.rmtree(tmp_path / "work" / "out")  # the driver's evaluation folder is not on this node
    placed = prepare_on_node(task, needs, "n1")
    assert placed.scratch is not None and placed.scratch.parent == tmp_path / "cache" / "tasks"
    assert (placed.scratch / "out").is_dir() and placed.spec.workdir == placed.scratch / "out"
    assert prune(tmp_path / "cache", keep=0) == []  # in use
    placed.release()  # a worker that died before removing its scratch
    assert prune(tmp_path / "cache", keep=0) == [f"tasks/{placed.scratch.name}"]
