"""What a node needs to run an evaluation's sandbox, checked by hash, and shipped when it lacks it.

The sandbox spec names paths on the driver's filesystem: the candidate tree's code folders, the
public view, the evaluation's writable folders, the interpreter. A Ray node sees them only on one
machine or over a shared filesystem, and a shared filesystem can lag or hold another checkout at the
same path. So the driver describes what each path must hold (:class:`NodeNeeds`: a content digest per
folder, the environment's digest) and the worker checks them on its node before it starts the sandbox
(:func:`prepare_on_node`):

- the candidate tree and the public view: a digest of exactly the files the sandbox mounts (names,
  bytes, executable bits; ``__pycache__`` left out). Not the git commit: the sandbox mounts three
  folders, not a commit, and ``memsys eval`` may run on a checkout with uncommitted changes. When the
  node's copy is missing or differs (or ``research.ray.ship=always``), the worker takes the driver's
  tarball from Ray's object store (put there once per digest), unpacks it under the node's cache folder
  keyed by the digest, checks the digest again, and rewrites the spec's paths to it;
- the environment (the interpreter the spec runs, its version, and a digest of its installed
  distributions): never shipped. A venv is built for one machine; a node whose venv differs fails with
  one infrastructure line that names the node and the difference, never against the candidate;
- the writable folders: when the driver's evaluation folder is not on the node, the sandbox writes into a
  per-task folder of the node cache, and the answers travel back as bytes (research.worker). The
  sandbox's own cache folder then stays on the node: the driver merges nothing from it.

Read-only shared caches (the stores and embeddings the driver offers) that a node lacks are left out of
the spec with the variables that name them: the sandboxed code then builds them itself.

This module imports only the standard library (and Ray lazily, to fetch a bundle): it runs in workers,
which never load the scorer or the system under test.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from research.execution.node_cache import Hold, hold, prune, touch

SHIP_MODES = ("auto", "always", "never")
#: folders never mounted for their content (bytecode the sandbox rewrites as it pleases)
_SKIPPED_DIRS = {"__pycache__"}
#: what :meth:`Environment.of` runs in the interpreter; -I: no PYTHONPATH, no user site, no cwd
_ENV_PROBE = ("import importlib.metadata as m, json, platform, sys\n"
              "names = sorted({f\"{d.metadata['Name'].lower()}=={d.version}\" for d in m.distributions() "
              "if d.metadata['Name']})\n"
              "print(json.dumps({'version': platform.python_version(), 'packages': names}))")


@dataclass(frozen=True)
class TaskRoots:
    """What the paths of an evaluation's sandbox spec are (set by research.evaluation.two_half.begin_sandboxed)."""

    tree: Path  # the evaluated tree; the sandbox mounts its code_dirs
    code_dirs: tuple[str, ...]
    work: Path  # the evaluation's untrusted folder: public/ (read-only), out/ and cache/ (writable)
    public: Path
    request: Path  # the request file the sandbox's argv names (inside public/)
    gateway_socket: Path | None = None  # the driver's LLM gateway, when the reader uses it


@dataclass(frozen=True)
class Content:
    """A folder's files as the driver has them: their digest, and the tarball when it may be shipped."""

    kind: str  # tree | public
    path: Path
    names: tuple[str, ...]  # the entries of ``path`` included
    digest: str
    bundle: Any = None  # a Ray ObjectRef of the tarball; None with research.ray.ship=never


@dataclass(frozen=True)
class Environment:
    """The interpreter a sandbox runs and what is installed for it."""

    python: str
    version: str
    packages: str  # sha256 of the sorted name==version lines
    count: int

    @classmethod
    def of(cls, python: str) -> "Environment | None":
        """None when the interpreter is missing or does not run here."""
        try:
            out = subprocess.run([python, "-I", "-c", _ENV_PROBE], capture_output=True, timeout=120, check=True)
            data = json.loads(out.stdout)
        except (OSError, subprocess.SubprocessError, ValueError):
            return None
        digest = hashlib.sha256("\n".join(data["packages"]).encode()).hexdigest()
        return cls(python, data["version"], digest, len(data["packages"]))

    def differences(self, here: "Environment | None") -> list[str]:
        if here is None:
            return [f"python {self.python} is missing or does not run"]
        out = []
        if here.version != self.version:
            out.append(f"python {here.version}, the driver's is {self.version}")
        if here.packages != self.packages:
            out.append(f"installed distributions differ ({here.count} here, digest {here.packages[:12]}; "
                       f"{self.count} on the driver, digest {self.packages[:12]})")
        return out


@dataclass(frozen=True)
class NodeNeeds:
    """What the driver expects a node to hold for one task, and how to get what it lacks."""

    tree: Content
    public: Content
    environment: Environment | None
    request: bytes  # the request file's bytes (its paths are rewritten when the spec's are)
    ship: str = "auto"
    cache_root: str | None = None  # the node's cache folder; None: <tmp>/memsys-node-cache
    cache_keep: int = 32  # shipped trees a node keeps beyond those in use (research.execution.node_cache.prune)


@dataclass(frozen=True)
class NodeFault:
    """The node cannot run the task as specified (infrastructure: the executor raises ExecutorError)."""

    message: str


@dataclass
class Placed:
    """The task as this node runs it, and what was done to get there."""

    spec: Any  # sandbox.SandboxSpec, its paths rewritten to this node's
    answers_path: Path
    shipped: tuple[str, ...]
    scratch: Path | None  # the per-task folder made on this node (removed after the run)
    holds: tuple[Hold, ...] = ()  # the cache entries this task uses, held until its sandbox is done

    def release(self) -> None:
        for h in self.holds:
            h.release()


# ---------------------------------------------------------------------------- digests and bundles
def _files(root: Path, names: tuple[str, ...]) -> Iterator[tuple[str, Path]]:
    """(relative name, path) of every file and symlink under root/names, sorted, bytecode left out."""
    for name in sorted(names):
        top = root / name
        if top.is_symlink() or top.is_file():
            yield name, top
            continue
        for folder, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d not in _SKIPPED_DIRS)
            for f in sorted(files):
                path = Path(folder) / f
                yield path.relative_to(root).as_posix(), path


def content_digest(root: Path, names: tuple[str, ...]) -> str | None:
    """sha256 over names, bytes and exec bits of the files; None when an entry is missing."""
    if not all((root / n).exists() or (root / n).is_symlink() for n in names):
        return None
    h = hashlib.sha256()
    for rel, path in _files(root, names):
        if path.is_symlink():
            h.update(f"L {rel}\0{os.readlink(path)}\0".encode())
            continue
        mode = "x" if os.stat(path).st_mode & stat.S_IXUSR else "f"
        h.update(f"{mode} {rel}\0".encode() + hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def pack(root: Path, names: tuple[str, ...]) -> bytes:
    """An uncompressed tarball of what :func:`content_digest` covers (the object store moves bytes
    faster than gzip makes them smaller on a cluster's network)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, path in _files(root, names):
            tar.add(path, arcname=rel, recursive=False)
    return buf.getvalue()


def unpack(data: bytes, dest: Path) -> None:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4
            tar.extractall(dest, filter="data")  # no absolute names, no links out of dest, no devices
        else:  # Debian 12's Python 3.11.2 has no extraction filters: check the same rules first
            root = dest.resolve()
            tar.extractall(dest, members=[_checked(m, root) for m in tar.getmembers()])


def _checked(member: tarfile.TarInfo, root: Path) -> tarfile.TarInfo:
    """``member`` when extracting it stays inside ``root`` (resolved; the rules of tarfile's "data" filter
    that a packed tree can break: names and link targets outside it, device and fifo entries)."""
    target = (root / member.name).resolve()
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        raise ValueError(f"tarball member {member.name!r} is not a file, folder or link")
    if member.name.startswith("/") or not target.is_relative_to(root):
        raise ValueError(f"tarball member {member.name!r} would land outside {root}")
    if member.issym() or member.islnk():
        base = target.parent if member.issym() else root
        if member.linkname.startswith("/") or not (base / member.linkname).resolve().is_relative_to(root):
            raise ValueError(f"tarball link {member.name!r} -> {member.linkname!r} points outside {root}")
    return member


def content_dir(content: Content, cache_root: Path) -> Path:
    return cache_root / "content" / f"{content.kind}-{content.digest[:24]}"


def materialize(content: Content, cache_root: Path) -> Path:
    """The node's copy of ``content`` under ``cache_root``, fetched, unpacked and verified once per digest.
    The caller holds the entry (research.execution.node_cache.hold) so that the pruner leaves it alone."""
    dest = content_dir(content, cache_root)
    if content_digest(dest, content.names) == content.digest:
        touch(dest)
        return dest
    import ray

    staging = cache_root / "content" / f".{dest.name}.{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    try:
        unpack(ray.get(content.bundle), staging)
        got = content_digest(staging, content.names)
        if got != content.digest:
            raise ValueError(f"the shipped {content.kind} unpacked to digest {str(got)[:12]}, "
                             f"expected {content.digest[:12]}")
        shutil.rmtree(dest, ignore_errors=True)  # a partial or altered copy
        try:
            staging.rename(dest)
        except OSError:  # another task on this node put the same digest there first
            if content_digest(dest, content.names) != content.digest:
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return dest


# ---------------------------------------------------------------------------- rewriting the spec
#: paths moved only when named exactly (a shipped tree's root: PYTHONPATH names it, but the venv,
#: the run folders and anything else under the driver's checkout are not part of the tree)
Exact = dict[str, str]


def _longest_first(moves: dict[str, str]) -> list[tuple[str, str]]:
    """Prefix moves, longest prefix first (a moved folder inside a moved folder wins)."""
    return sorted(moves.items(), key=lambda kv: len(kv[0]), reverse=True)


def _rebase_one(value: str, mapping: list[tuple[str, str]], exact: Exact | None = None) -> str:
    if exact and value in exact:
        return exact[value]
    for old, new in mapping:
        if value == old or value.startswith(old + "/"):
            return new + value[len(old):]
    return value


def _rebase(value: str, mapping: list[tuple[str, str]], exact: Exact | None = None) -> str:
    """A path, or a PATH-like list of paths, under the first (longest) matching prefix."""
    return os.pathsep.join(_rebase_one(part, mapping, exact) for part in value.split(os.pathsep))


def _rebase_json(value: Any, mapping: list[tuple[str, str]], exact: Exact | None = None) -> Any:
    if isinstance(value, str):
        return _rebase_one(value, mapping, exact)
    if isinstance(value, list):
        return [_rebase_json(v, mapping, exact) for v in value]
    if isinstance(value, dict):
        return {k: _rebase_json(v, mapping, exact) for k, v in value.items()}
    return value


def rebase_spec(spec: Any, moves: dict[str, str], exact: Exact | None = None) -> Any:
    """The spec with every path under a moved prefix (or named exactly in ``exact``) rewritten;
    read-only paths missing here (the driver's optional caches) are dropped with the variables
    naming them."""
    mapping = _longest_first(moves)
    readonly = [Path(_rebase(str(p), mapping, exact)) for p in spec.readonly]
    missing = [p for p in readonly if not p.exists()]
    env = {k: _rebase(v, mapping, exact) for k, v in spec.env.items()}
    env = {k: v for k, v in env.items() if not any(v == str(m) or v.startswith(f"{m}/") for m in missing)}
    return dataclasses.replace(
        spec, argv=[_rebase(a, mapping, exact) for a in spec.argv],
        workdir=Path(_rebase(str(spec.workdir), mapping, exact)),
        writable=[Path(_rebase(str(p), mapping, exact)) for p in spec.writable],
        readonly=[p for p in readonly if p not in missing], env=env)


# ---------------------------------------------------------------------------- on the node
def default_cache_root() -> Path:
    return Path(tempfile.gettempdir()) / "memsys-node-cache"


_ENVIRONMENTS: dict[str, Environment | None] = {}  # per worker process: a venv does not change mid-run


def _environment_here(python: str) -> Environment | None:
    if python not in _ENVIRONMENTS:
        _ENVIRONMENTS[python] = Environment.of(python)
    return _ENVIRONMENTS[python]


def _content_moves(needs: NodeNeeds, cache_root: Path, node: str,
                   holds: list[Hold]) -> tuple[dict[str, str], Exact, list[str]] | NodeFault:
    """Prefix moves (each shipped folder or file), exact moves (the shipped roots), what was shipped;
    each shipped entry is held (appended to ``holds``) before it is checked or unpacked."""
    moves: dict[str, str] = {}
    exact: Exact = {}
    shipped: list[str] = []
    for content in (needs.tree, needs.public):
        here = None if needs.ship == "always" else content_digest(content.path, content.names)
        if here == content.digest:
            continue
        if content.bundle is None:
            state = "missing" if here is None else f"different (digest {here[:12]}, the driver's {content.digest[:12]})"
            return NodeFault(f"node {node}: the {content.kind} at {content.path} is {state} and "
                             "research.ray.ship=never")
        try:
            holds.append(hold(content_dir(content, cache_root)))
            dest = materialize(content, cache_root)
        except Exception as exc:  # noqa: BLE001 - object store, disk, tar: all our side
            return NodeFault(f"node {node}: could not ship the {content.kind}: {type(exc).__name__}: "
                             f"{' '.join(str(exc).split())[:200]}")
        exact[str(content.path)] = str(dest)
        for name in content.names:  # only what was shipped: a venv or run folder under the root stays put
            moves[str(content.path / name)] = str(dest / name)
        shipped.append(content.kind)
    return moves, exact, shipped


def prepare_on_node(task: Any, needs: NodeNeeds, node: str, relay_dir: Path | None = None) -> Placed | NodeFault:
    """Check the node against ``needs``; ship what it lacks; the spec as this node runs it.
    ``relay_dir``: where the gateway relay listens on this node (it stands in for the gateway's folder).
    The caller runs the sandbox, then calls ``Placed.release`` (after removing the scratch)."""
    spec = task.spec
    if needs.environment is not None:
        differs = needs.environment.differences(_environment_here(spec.argv[0]))
        if differs:
            return NodeFault(f"node {node}: the environment differs from the driver's: {'; '.join(differs)}")
    cache_root = Path(needs.cache_root) if needs.cache_root else default_cache_root()
    holds: list[Hold] = []
    try:
        placed = _place(task, needs, node, relay_dir, cache_root, holds)
    except BaseException:
        _release(holds)
        raise
    if isinstance(placed, NodeFault):
        _release(holds)
        return placed
    try:
        prune(cache_root, needs.cache_keep)
    except OSError:  # housekeeping never fails a task
        pass
    return placed


def _release(holds: list[Hold]) -> None:
    for h in holds:
        h.release()


def _new_scratch(cache_root: Path, holds: list[Hold]) -> Path:
    scratch = cache_root / "tasks" / uuid.uuid4().hex[:16]
    holds.append(hold(scratch))  # before it exists: the pruner never sees it unheld
    return scratch


def _place(task: Any, needs: NodeNeeds, node: str, relay_dir: Path | None, cache_root: Path,
           holds: list[Hold]) -> Placed | NodeFault:
    roots: TaskRoots = task.roots
    spec = task.spec
    got = _content_moves(needs, cache_root, node, holds)
    if isinstance(got, NodeFault):
        return got
    moves, exact, shipped = got
    if relay_dir is not None and roots.gateway_socket is not None:
        moves[str(roots.gateway_socket.parent)] = str(relay_dir)
    elif roots.gateway_socket is not None and not roots.gateway_socket.exists():
        return NodeFault(f"node {node}: the LLM gateway's socket {roots.gateway_socket} is not on this node and "
                         "research.ray.gateway_relay=never")
    scratch = None
    if not (roots.work / "out").is_dir():  # the driver's evaluation folder is not on this node
        scratch = _new_scratch(cache_root, holds)
        for sub in ("out", "cache"):
            (scratch / sub).mkdir(parents=True)
        moves[str(roots.work)] = str(scratch)
    if moves or exact:
        scratch = scratch or _new_scratch(cache_root, holds)
        request = scratch / "request" / roots.request.name
        request.parent.mkdir(parents=True)
        request.write_text(json.dumps(_rebase_json(json.loads(needs.request), _longest_first(moves), exact)), encoding="utf-8")
        moves[str(roots.request)] = str(request)
        spec = rebase_spec(spec, moves, exact)
        spec = dataclasses.replace(spec, readonly=[*spec.readonly, request.parent])
    answers = Path(_rebase(str(task.answers_path), _longest_first(moves), exact))
    return Placed(spec, answers, tuple(shipped), scratch, tuple(holds))


# ---------------------------------------------------------------------------- on the driver
class Shipments:
    """Driver side: each task's :class:`NodeNeeds`, with one tarball per digest in Ray's object store.

    The tarball is made when the digest is first seen, with the same bytes the digest covered, so a
    node gets what the driver prepared for this evaluation even if the driver's files change later.
    The last ``keep`` tarballs stay referenced (a candidate's tree is evaluated several times: screen,
    evaluation, check); older ones are freed by Ray once no task holds them."""

    def __init__(self, ship: str, cache_root: str | None, keep: int = 16, cache_keep: int = 32) -> None:
        if ship not in SHIP_MODES:
            raise ValueError(f"ship must be {' | '.join(SHIP_MODES)}, got {ship!r}")
        self.ship, self.cache_root, self.keep, self.cache_keep = ship, cache_root, keep, cache_keep
        self._bundles: dict[str, Any] = {}  # digest -> ObjectRef, oldest first
        self._environments: dict[str, Environment | None] = {}
        import threading

        self._lock = threading.Lock()  # the executor's run() is called from several threads

    def needs_of(self, task: Any) -> NodeNeeds | None:
        roots: TaskRoots | None = task.roots
        if roots is None:
            return None
        python = task.spec.argv[0]
        with self._lock:
            if python not in self._environments:
                self._environments[python] = Environment.of(python)
            environment = self._environments[python]
        request_name = roots.request.name
        public_names = tuple(sorted(p.name for p in roots.public.iterdir() if p.name != request_name))
        return NodeNeeds(self._content("tree", roots.tree, roots.code_dirs),
                         self._content("public", roots.public, public_names),
                         environment, roots.request.read_bytes(), self.ship, self.cache_root, self.cache_keep)

    def _content(self, kind: str, path: Path, names: tuple[str, ...]) -> Content:
        digest = content_digest(path, names)
        if digest is None:
            raise FileNotFoundError(f"the driver's {kind} at {path} lacks one of {', '.join(names)}")
        if self.ship == "never":
            return Content(kind, path, names, digest)
        with self._lock:
            ref = self._bundles.pop(digest, None)
            if ref is None:
                import ray

                data = pack(path, names)
                if content_digest(path, names) != digest:
                    raise RuntimeError(f"the driver's {kind} at {path} changed while it was packed")
                ref = ray.put(data)
            self._bundles[digest] = ref  # most recent last
            while len(self._bundles) > self.keep:
                self._bundles.pop(next(iter(self._bundles)))
        return Content(kind, path, names, digest, ref)
