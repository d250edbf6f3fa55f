"""Git workspace of an optimization run (GitPython).

Each experiment gets its own worktree on its own branch from the current best
commit; every attempt is committed (failures too) so the branch history is the
journal; ``refs/autoresearch/<run>/best`` moves only on proceed. The user's own
working tree and branches are never touched.

The research agent is treated as hostile, and code it wrote may have run in a
worktree (on a weak sandbox: written any file there, replaced ``.git``). So:

- **No git hook or config-driven command ever runs** (git >= 2.31). Every git command of the
  Workspace (main repo and worktrees, and the git processes those spawn) runs with
  ``GIT_CONFIG_COUNT``/``GIT_CONFIG_KEY_n``/``GIT_CONFIG_VALUE_n`` in its environment
  (command-line precedence, beats any config file): ``core.hooksPath=/dev/null`` (no
  hook of any kind: pre-commit, post-checkout, post-commit, reference-transaction,
  pre-auto-gc ...), ``core.fsmonitor=false`` (an fsmonitor is a command run by
  status/add), ``core.pager=cat``, ``submodule.recurse=false``, ``gc.auto=0`` and
  ``maintenance.auto=false`` (no background gc). Diffs run with ``--no-ext-diff
  --no-textconv`` (``diff.external``, diff drivers and textconv are commands).
  Clean/smudge filters configured in the user's own git config are not disabled
  (they are named by the user, not the agent).
- **A worktree's own ``.git`` file is not trusted.** ``repo_at`` checks it still
  points at the git-created admin folder of that worktree and pins ``GIT_DIR`` /
  ``GIT_WORK_TREE``, so a replaced ``.git`` (own config, hooks, refs) is refused.
- **Commits take only the mutable surface** (``harness.surface.MUTABLE_SURFACE``);
  see ``Workspace.commit``.

A run can be killed (``kill -9``) between any two git commands, or inside one. Every step is
therefore idempotent: ``create`` recreates an experiment's worktree and branch whatever a killed
run left of them, ``prune`` removes stale worktrees (registered or only on disk, locked or not)
and the branches they held, ``init_refs``/``move_best`` set refs whatever they held, and a lock
file a killed git left on one of the run's refs is removed. A git failure that is left raises
``WorkspaceError`` with git's own last line, never a raw ``GitCommandError``.
"""

from __future__ import annotations

import logging
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection, Iterator

import git

from harness.surface import MUTABLE_SURFACE, in_surface
from research.errors import ForbiddenEditError, WorkspaceError
from research.workspace import stale_worktrees
from research.workspace.commit_check import NO_EXEC_DIFF, forbidden_in_commit
from research.workspace.stale_worktrees import AdminEntry, admin_entries, force_rmtree, inside, stale_ref_locks

log = logging.getLogger(__name__)
AUTHOR = git.Actor("memsys-autoresearch", "autoresearch@localhost")

#: config forced on every git command the Workspace runs (see the module docstring)
SAFE_GIT_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", os.devnull),
    ("core.fsmonitor", "false"),
    ("core.pager", "cat"),
    ("submodule.recurse", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
)


def safe_git_env() -> dict[str, str]:
    """The environment that disables hooks and config-driven commands (``SAFE_GIT_CONFIG``)."""
    env = {"GIT_CONFIG_COUNT": str(len(SAFE_GIT_CONFIG))}
    for i, (key, value) in enumerate(SAFE_GIT_CONFIG):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env


def _harden(repo: git.Repo, **extra: str) -> git.Repo:
    repo.git.update_environment(**safe_git_env(), **extra)
    return repo


@contextmanager
def git_errors(what: str) -> Iterator[None]:
    """Turn a ``GitCommandError`` into a one-line ``WorkspaceError`` naming the step."""
    try:
        yield
    except git.GitCommandError as exc:
        raise WorkspaceError(f"{what}: {git_reason(exc)}") from exc


def git_reason(exc: git.GitCommandError) -> str:
    """The last line git printed (stderr, else stdout), without GitPython's framing."""
    for stream in (exc.stderr, exc.stdout):
        text = (stream or "").strip()
        for prefix in ("stderr:", "stdout:"):
            if text.startswith(prefix):
                text = text[len(prefix):].strip().strip("'")
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if lines:
            return lines[-1]
    return f"git exited with {exc.status}"


@dataclass
class Pruned:
    """What ``Workspace.prune`` removed: worktree folders, experiment branches, stale lock files."""

    worktrees: list[str] = field(default_factory=list)
    branches: list[str] = field(default_factory=list)
    locks: list[str] = field(default_factory=list)


@dataclass
class Worktree:
    path: Path
    branch: str
    base_commit: str
    #: changed/untracked paths outside the surface that the last ``Workspace.commit`` left out
    left_out: list[str] = field(default_factory=list)


class Workspace:
    def __init__(self, repo_path: Path, run_id: str, worktrees_dir: Path):
        try:
            self.repo = _harden(git.Repo(repo_path, search_parent_directories=True))
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise WorkspaceError(f"not a git repository: {repo_path}") from exc
        if self.repo.git.version_info[:2] < (2, 31):  # older git ignores GIT_CONFIG_COUNT: hooks would run
            raise WorkspaceError(f"git >= 2.31 is needed (found {'.'.join(map(str, self.repo.git.version_info))})")
        self.root = Path(self.repo.working_tree_dir)
        self.run_id = run_id
        self.worktrees_dir = Path(worktrees_dir)
        self.best_ref = f"refs/autoresearch/{run_id}/best"
        self.base_ref = f"refs/autoresearch/{run_id}/base"

    # ----------------------------------------------------------------- refs
    def head_commit(self) -> str:
        with git_errors(f"cannot read HEAD of {self.root}"):
            return self.repo.git.rev_parse("--verify", "HEAD^{commit}")

    def uncommitted_changes(self) -> list[str]:
        """Tracked files modified in the user's tree (they are NOT part of the run)."""
        with git_errors(f"cannot read the status of {self.root}"):
            return [d.a_path for d in self.repo.index.diff(None)] + [d.a_path for d in self.repo.index.diff("HEAD")]

    def init_refs(self, base_commit: str) -> None:
        """Point the run's base and best refs at ``base_commit`` (again, if a killed start set them already)."""
        for ref in (self.base_ref, self.best_ref):
            self._set_ref(ref, base_commit)

    def best_commit(self) -> str:
        with git_errors(f"no best commit for run {self.run_id} ({self.best_ref})"):
            return self.repo.git.rev_parse("--verify", f"{self.best_ref}^{{commit}}")

    def move_best(self, commit: str) -> None:
        """Point the best ref at ``commit``; a no-op when it is there already."""
        self._set_ref(self.best_ref, commit)

    def _set_ref(self, ref: str, commit: str) -> None:
        sha = self._commit_sha(commit)
        what = f"cannot set {ref} to {sha[:12]}"
        try:
            self.repo.git.update_ref(ref, sha)
        except git.GitCommandError as exc:
            if not self._clear_stale_locks():  # a killed git's lock on one of our refs
                raise WorkspaceError(f"{what}: {git_reason(exc)}") from exc
            with git_errors(what):
                self.repo.git.update_ref(ref, sha)

    def _commit_sha(self, commit: str) -> str:
        with git_errors(f"no commit {commit!r} in {self.root}"):
            return self.repo.git.rev_parse("--verify", "--end-of-options", f"{commit}^{{commit}}")

    def file_at(self, commit: str, path: str) -> str:
        """The text of ``path`` in ``commit``'s tree (read from git, never from a worktree)."""
        with git_errors(f"cannot read {path} at {commit[:12]}"):
            return self.repo.git.show(f"{self._commit_sha(commit)}:{path}")

    def tree_id(self, commit: str, path: str) -> str:
        """The object id of ``path`` (a folder or file) in ``commit``'s tree: its content's identity."""
        with git_errors(f"no {path} at {commit[:12]}"):
            return self.repo.git.rev_parse("--verify", f"{self._commit_sha(commit)}:{path}")

    def head_of(self, wt: Worktree) -> str:
        """The commit checked out in the worktree (its ``.git`` checked first, see ``repo_at``)."""
        with git_errors(f"cannot read HEAD of {wt.path}"):
            return self.repo_at(wt.path).git.rev_parse("--verify", "HEAD^{commit}")

    def branch_name(self, experiment_id: str) -> str:
        return f"autoresearch/{self.run_id}/{experiment_id}"

    # ----------------------------------------------------------------- worktrees
    def create(self, experiment_id: str, from_commit: str) -> Worktree:
        """A fresh worktree at ``<worktrees_dir>/<experiment_id>`` on a new branch at ``from_commit``.

        Whatever a killed run left under that name (a worktree, locked or half-created, a folder
        on disk, the branch itself) is removed first, so creating again always starts clean.
        """
        path = self.worktrees_dir / experiment_id
        branch = self.branch_name(experiment_id)
        sha = self._commit_sha(from_commit)
        self._git_prune()  # entries whose folder is gone (and not locked) go first
        for entry in self._entries():
            if entry.branch == branch and not self._owned(entry):
                raise WorkspaceError(f"branch {branch} is checked out at {entry.path}, outside this run's "
                                     f"worktrees: remove that worktree (git worktree remove) and resume")
            if self._owned(entry) and (entry.branch == branch or _same_path(entry.path, path)):
                self._remove_entry(entry)
        force_rmtree(path)
        self._git_prune()
        if branch in self._run_branches():
            self._delete_branch(branch)
        self.worktrees_dir.mkdir(parents=True, exist_ok=True)
        with git_errors(f"cannot create worktree {path}"):
            self.repo.git.worktree("add", "-b", branch, str(path), sha)
        return Worktree(path, branch, sha)

    def repo_at(self, path: Path) -> git.Repo:
        """A hook-less ``git.Repo`` of one of this repo's worktrees (use it for every git command there).

        Raises ``ForbiddenEditError`` when ``<path>/.git`` is not the file git wrote (a
        symlink, a folder, or pointing at another git dir): code run in the worktree
        replaced it. Raises ``WorkspaceError`` when ``path`` is no worktree of this repo.
        """
        path = Path(path)
        admin = self._admin_dir(path)
        dotgit = path / ".git"
        ok = dotgit.is_file() and not dotgit.is_symlink()
        if ok:
            text = dotgit.read_text(encoding="utf-8", errors="replace").strip()
            ok = text.startswith("gitdir:") and _same(Path(text[len("gitdir:"):].strip()), admin)
        if not ok:
            raise ForbiddenEditError(f"{dotgit} was replaced: it no longer points at {admin}")
        try:
            repo = git.Repo(path)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise WorkspaceError(f"not a git worktree: {path}") from exc
        return _harden(repo, GIT_DIR=str(admin), GIT_WORK_TREE=str(path.resolve()))

    def restore(self, wt: Worktree, commit: str | None = None) -> None:
        """Put the worktree's files back: at its HEAD (``commit=None``: also the index), or at
        ``commit``'s files on the same branch; untracked files are deleted either way."""
        wrepo = self.repo_at(wt.path)
        with git_errors(f"cannot restore worktree {wt.path}"):
            if commit is None:
                wrepo.git.reset("--hard", "HEAD")
            else:
                wrepo.git.checkout(commit, "--", ".")
            wrepo.git.clean("-fd")

    def _admin_dir(self, path: Path) -> Path:
        """``<common git dir>/worktrees/<name>`` of the worktree at ``path`` (from git's own records)."""
        target = path.resolve()
        admin_root = Path(self.repo.common_dir) / "worktrees"
        if admin_root.is_dir():
            for admin in sorted(admin_root.iterdir()):
                record = admin / "gitdir"  # git writes "<worktree>/.git" here
                if record.is_file():
                    recorded = Path(record.read_text(encoding="utf-8", errors="replace").strip())
                    if _same(recorded.parent, target):
                        return admin.resolve()
        raise WorkspaceError(f"{path} is not a worktree of {self.root}")

    def commit(self, wt: Worktree, message: str, *, allow_empty: bool = True) -> str:
        """Commit the worktree's changes inside ``MUTABLE_SURFACE`` only; return the new commit sha.

        Everything else changed or untracked in the worktree is left out of the commit,
        logged, and listed in ``wt.left_out``. The committed diff against the parent is
        then verified (every added/modified/deleted/renamed/mode-changed path lies in the
        surface, only regular files and symlinks, every symlink in the surface resolves
        inside the surface within the repo); if not, the branch is reset to the parent
        and ``ForbiddenEditError`` is raised naming the paths. ``ForbiddenEditError`` too
        when the worktree's ``.git`` was replaced (``repo_at``). Any git failure (also
        ``allow_empty=False`` with nothing to commit) raises ``WorkspaceError``.
        """
        wrepo = self.repo_at(wt.path)
        with git_errors(f"commit on {wt.branch} failed"):
            return self._commit_surface(wrepo, wt, message, allow_empty)

    def _commit_surface(self, wrepo: git.Repo, wt: Worktree, message: str, allow_empty: bool) -> str:
        parent = wrepo.git.rev_parse("HEAD")
        wrepo.git.reset("-q")  # the index is HEAD again: nothing staged earlier rides along
        changed = _status_paths(wrepo)
        take = [p for p in changed if in_surface(p, MUTABLE_SURFACE)]
        wt.left_out = [p for p in changed if not in_surface(p, MUTABLE_SURFACE)]
        if wt.left_out:
            log.warning("commit of %s leaves out %d path(s) outside the mutable surface: %s",
                        wt.branch, len(wt.left_out), ", ".join(wt.left_out[:20]))
        # stage by surface folder ("memsys", not each file: a folder swapped for a symlink stages cleanly)
        roots = [r for r in (s.rstrip("/") for s in MUTABLE_SURFACE) if any(in_surface(p, (r,)) for p in take)]
        if roots:
            try:
                wrepo.git.add("-A", "--", *roots, env={"GIT_LITERAL_PATHSPECS": "1"})
            except git.GitCommandError as exc:
                if "beyond a symbolic link" not in str(exc.stderr):
                    raise
                raise ForbiddenEditError(f"commit on {wt.branch} refused: a folder above the mutable surface "
                                         f"({', '.join(roots)}) was replaced by a symlink") from exc
        args = ["-m", message, "--no-verify"]
        if allow_empty:
            args.append("--allow-empty")
        wrepo.git.commit(*args, author=f"{AUTHOR.name} <{AUTHOR.email}>",
                         env={"GIT_COMMITTER_NAME": AUTHOR.name, "GIT_COMMITTER_EMAIL": AUTHOR.email})
        commit = wrepo.git.rev_parse("HEAD")
        bad = forbidden_in_commit(wrepo, parent, commit)
        if bad:
            wrepo.git.reset("-q", parent)  # branch and index back to the parent; files stay
            shown = ", ".join(bad[:10]) + (f" (+{len(bad) - 10} more)" if len(bad) > 10 else "")
            raise ForbiddenEditError(f"commit on {wt.branch} undone: outside the mutable surface: {shown}")
        return commit

    def diff(self, base: str, commit: str) -> tuple[str, dict[str, int]]:
        with git_errors(f"cannot diff {base[:12]}..{commit[:12]}"):
            text = self.repo.git.diff(*NO_EXEC_DIFF, base, commit)
            files = self.repo.git.diff(*NO_EXEC_DIFF, "--name-only", base, commit).split()
            numstat = self.repo.git.diff(*NO_EXEC_DIFF, "--numstat", base, commit).splitlines()
        ins = sum(int(l.split()[0]) for l in numstat if l.split()[0].isdigit())
        dels = sum(int(l.split()[1]) for l in numstat if l.split()[1].isdigit())
        return text, {"files": len(files), "insertions": ins, "deletions": dels}

    def changed_paths(self, base: str, commit: str) -> list[str]:
        with git_errors(f"cannot diff {base[:12]}..{commit[:12]}"):
            out = self.repo.git.diff(*NO_EXEC_DIFF, "--name-only", base, commit)
        return [p for p in out.split("\n") if p]

    def remove(self, path: Path) -> None:
        """Remove one worktree (registered or not, locked or not); its branch stays: it is the journal.

        Removing a worktree that is already gone is fine.
        """
        for entry in self._entries():
            if self._owned(entry) and _same_path(entry.path, path):
                self._remove_entry(entry)
        force_rmtree(path)
        self._git_prune()

    def discard(self, wt: Worktree) -> None:
        """Remove a scratch worktree and its branch (a helper checkout, not an experiment of the journal)."""
        self.remove(wt.path)
        self._delete_branch(wt.branch)

    def cleanup(self) -> int:
        """Remove every worktree of this run (also those a crash left behind); returns how many."""
        return len(self.prune().worktrees)

    def prune(self, keep_branches: Collection[str] = ()) -> Pruned:
        """Remove what a killed run left: stale worktrees, then the branches they held, then stale locks.

        Stale worktrees are those git registered under ``worktrees_dir`` or on one of this run's
        branches (locked, half-created, or already deleted on disk), and every folder left in
        ``worktrees_dir``. Their experiment branches are deleted, except those of the experiment ids
        in ``keep_branches`` (experiments the journal already holds: their branch is their history).
        A worktree outside ``worktrees_dir`` that holds one of the run's branches is someone's own
        checkout: it is left alone, and so is its branch. Call it only while no other process works
        on this run (lock files on the run's refs are taken to be a killed process's).
        """
        out = Pruned()
        out.locks = [str(p) for p in self._clear_stale_locks()]
        held: set[str] = set()
        for entry in self._entries():
            if not self._owned(entry):
                continue
            self._remove_entry(entry)
            out.worktrees.append(entry.path.name if entry.path else entry.admin.name)
            if entry.branch or entry.path:  # a half-created worktree has no branch in HEAD yet
                held.add(entry.branch or self.branch_name(entry.path.name))
        if self.worktrees_dir.is_dir():
            for p in sorted(self.worktrees_dir.iterdir()):
                force_rmtree(p)
                if p.name not in out.worktrees:
                    out.worktrees.append(p.name)
                held.add(self.branch_name(p.name))
        self._git_prune()
        keep = {self.branch_name(e) for e in keep_branches}
        foreign = {e.branch for e in self._entries() if e.branch}  # checked out elsewhere: not ours to delete
        existing = self._run_branches()
        for branch in sorted(held - keep - foreign):
            if branch in existing:
                self._delete_branch(branch)
                out.branches.append(branch)
        if out.worktrees or out.branches or out.locks:
            log.info("pruned run %s: worktrees %s, branches %s, locks %s", self.run_id, out.worktrees, out.branches,
                     out.locks)
        return out

    # ----------------------------------------------------------------- recovery helpers
    def _entries(self) -> list[AdminEntry]:
        return admin_entries(Path(self.repo.common_dir))

    def _owned(self, entry: AdminEntry) -> bool:
        """The worktree is this run's to remove: it lies in ``worktrees_dir``, or it holds one of the
        run's branches and nothing of it is on disk (git never recorded where, or the folder is gone)."""
        if entry.path is not None and inside(entry.path, self.worktrees_dir):
            return True
        ours = bool(entry.branch and entry.branch.startswith(self.branch_name("")))
        return ours and (entry.path is None or not os.path.lexists(entry.path))

    def _remove_entry(self, entry: AdminEntry) -> None:
        """Remove one registered worktree, by git if git can, else by hand (what git would have removed)."""
        if entry.path is not None:
            try:  # -f -f: also a locked worktree, also one whose folder is gone
                self.repo.git.worktree("remove", "--force", "--force", str(entry.path))
            except git.GitCommandError as exc:
                log.debug("git worktree remove %s: %s (removing it by hand)", entry.path, git_reason(exc))
            force_rmtree(entry.path)
        force_rmtree(entry.admin)

    def _git_prune(self) -> None:
        with git_errors("git worktree prune failed"):
            self.repo.git.worktree("prune")

    def _run_branches(self) -> set[str]:
        with git_errors(f"cannot list the branches of run {self.run_id}"):
            out = self.repo.git.for_each_ref("--format=%(refname:short)", f"refs/heads/{self.branch_name('')}")
        return {line.strip() for line in out.splitlines() if line.strip()}

    def _delete_branch(self, branch: str) -> None:
        try:
            self.repo.git.branch("-D", branch)
        except git.GitCommandError as exc:
            if branch not in self._run_branches():
                return  # already gone
            stale_worktrees.wait_for_shared_locks(Path(self.repo.common_dir))  # a killed git's young packed-refs.lock
            if not self._clear_stale_locks():
                raise WorkspaceError(f"cannot delete branch {branch}: {git_reason(exc)}") from exc
            with git_errors(f"cannot delete branch {branch}"):
                self.repo.git.branch("-D", branch)

    def _clear_stale_locks(self) -> list[Path]:
        """Remove lock files a killed git left on this run's refs (and old shared ones); returns them."""
        found = stale_ref_locks(Path(self.repo.common_dir), (f"refs/autoresearch/{self.run_id}",
                                                             f"refs/heads/{self.branch_name('')}".rstrip("/")))
        for p in found:
            log.warning("removing a lock file left by a killed git: %s", p)
            p.unlink(missing_ok=True)
        return found


def _same_path(a: Path | None, b: Path) -> bool:
    return a is not None and _same(a, b)


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _status_paths(wrepo: git.Repo) -> list[str]:
    """Every changed, deleted or untracked (not ignored) path of the worktree, vs HEAD."""
    out = wrepo.git.status("--porcelain=v1", "-z", "--untracked-files=all", "--no-renames",
                           "--ignore-submodules=all", strip_newline_in_stdout=False)
    return sorted({entry[3:] for entry in out.split("\0") if len(entry) > 3})


#: what a scratch copy of the project holds: the code the loop edits and runs
PROJECT_PATHS = ("harness", "memsys", "benchmarks", "research", "sandbox", "launcher", "configs", "pyproject.toml")


def make_scratch_repo(dest: Path, source: Path | None = None, paths: tuple[str, ...] = PROJECT_PATHS) -> Path:
    """A throwaway git repo holding a copy of the project (one commit on ``main``).

    For runs that must not add branches to your checkout (benchmarks, tests, trials):
    ``memsys run research.repo=<dest> ...``.
    """
    from memsys.paths import REPO_ROOT

    source = Path(source or REPO_ROOT)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=False)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in paths:
        src = source / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=ignore)
        elif src.exists():
            shutil.copy2(src, dest / name)
    (dest / ".gitignore").write_text("runs/\n__pycache__/\n", encoding="utf-8")
    repo = git.Repo.init(dest, initial_branch="main")
    repo.git.add("-A")
    repo.git.commit("-q", "-m", "scratch copy of the project", author=f"{AUTHOR.name} <{AUTHOR.email}>",
                    env={"GIT_COMMITTER_NAME": AUTHOR.name, "GIT_COMMITTER_EMAIL": AUTHOR.email})
    return dest
