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
"""

from __future__ import annotations

import logging
import os
import posixpath
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import git

from harness.surface import MUTABLE_SURFACE, in_surface
from research.errors import ForbiddenEditError, WorkspaceError

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
#: flags of every diff the Workspace runs: no external diff program, no textconv filter
NO_EXEC_DIFF = ("--no-ext-diff", "--no-textconv")
#: file modes a commit may hold inside the surface (regular, executable, symlink; 000000 = deleted)
_ALLOWED_MODES = {"100644", "100755", "120000", "000000"}
_SYMLINK = "120000"
_MAX_SYMLINK_HOPS = 40


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
        return self.repo.head.commit.hexsha

    def uncommitted_changes(self) -> list[str]:
        """Tracked files modified in the user's tree (they are NOT part of the run)."""
        return [d.a_path for d in self.repo.index.diff(None)] + [d.a_path for d in self.repo.index.diff("HEAD")]

    def init_refs(self, base_commit: str) -> None:
        for ref in (self.base_ref, self.best_ref):
            self.repo.git.update_ref(ref, base_commit)

    def best_commit(self) -> str:
        return self.repo.git.rev_parse(self.best_ref)

    def move_best(self, commit: str) -> None:
        self.repo.git.update_ref(self.best_ref, commit)

    def branch_name(self, experiment_id: str) -> str:
        return f"autoresearch/{self.run_id}/{experiment_id}"

    # ----------------------------------------------------------------- worktrees
    def create(self, experiment_id: str, from_commit: str) -> Worktree:
        path = self.worktrees_dir / experiment_id
        branch = self.branch_name(experiment_id)
        if path.exists():  # left over from a crash
            self.remove(path)
        if branch in [h.name for h in self.repo.heads]:
            self.repo.git.branch("-D", branch)
        self.worktrees_dir.mkdir(parents=True, exist_ok=True)
        try:
            self.repo.git.worktree("add", "-b", branch, str(path), from_commit)
        except git.GitCommandError as exc:
            raise WorkspaceError(f"cannot create worktree {path}: {exc.stderr.strip().splitlines()[-1] if exc.stderr else exc}") from exc
        return Worktree(path, branch, from_commit)

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
        when the worktree's ``.git`` was replaced (``repo_at``). With
        ``allow_empty=False`` and nothing to commit, git's ``GitCommandError`` propagates.
        """
        wrepo = self.repo_at(wt.path)
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
        bad = self._forbidden_in_commit(wrepo, parent, commit)
        if bad:
            wrepo.git.reset("-q", parent)  # branch and index back to the parent; files stay
            shown = ", ".join(bad[:10]) + (f" (+{len(bad) - 10} more)" if len(bad) > 10 else "")
            raise ForbiddenEditError(f"commit on {wt.branch} undone: outside the mutable surface: {shown}")
        return commit

    def _forbidden_in_commit(self, wrepo: git.Repo, parent: str, commit: str) -> list[str]:
        """Paths of ``parent..commit`` that may not be committed, each with the reason."""
        bad: list[str] = []
        raw = wrepo.git.diff_tree("-r", "-z", "--no-renames", "--no-commit-id", *NO_EXEC_DIFF, parent, commit,
                                  strip_newline_in_stdout=False)
        fields = raw.split("\0")
        i = 0
        while i + 1 < len(fields):
            meta, path = fields[i], fields[i + 1]
            i += 2
            if not meta.startswith(":"):
                continue
            new_mode = meta[1:].split()[1]
            if not in_surface(path, MUTABLE_SURFACE):
                bad.append(path)
            elif new_mode not in _ALLOWED_MODES:
                bad.append(f"{path} (mode {new_mode})")
        # every symlink in the committed surface must resolve, inside the repo, to the surface
        # (all of them, since a new link can redirect an old one; a bad link the parent already had is not new)
        before, after = _bad_symlinks(wrepo, parent), _bad_symlinks(wrepo, commit)
        bad += [f"{link} -> {target}" for link, target in sorted(after.items()) if before.get(link) != target]
        return bad

    def diff(self, base: str, commit: str) -> tuple[str, dict[str, int]]:
        text = self.repo.git.diff(*NO_EXEC_DIFF, base, commit)
        files = self.repo.git.diff(*NO_EXEC_DIFF, "--name-only", base, commit).split()
        numstat = self.repo.git.diff(*NO_EXEC_DIFF, "--numstat", base, commit).splitlines()
        ins = sum(int(l.split()[0]) for l in numstat if l.split()[0].isdigit())
        dels = sum(int(l.split()[1]) for l in numstat if l.split()[1].isdigit())
        return text, {"files": len(files), "insertions": ins, "deletions": dels}

    def changed_paths(self, base: str, commit: str) -> list[str]:
        return [p for p in self.repo.git.diff(*NO_EXEC_DIFF, "--name-only", base, commit).split("\n") if p]

    def remove(self, path: Path) -> None:
        try:
            self.repo.git.worktree("remove", "--force", str(path))
        except git.GitCommandError:
            shutil.rmtree(path, ignore_errors=True)
            self.repo.git.worktree("prune")

    def cleanup(self) -> int:
        """Remove every worktree of this run (also those a crash left behind)."""
        n = 0
        if self.worktrees_dir.exists():
            for p in sorted(self.worktrees_dir.iterdir()):
                if p.is_dir():
                    self.remove(p)
                    n += 1
        self.repo.git.worktree("prune")
        return n


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


def _symlinks(wrepo: git.Repo, commit: str) -> dict[str, str]:
    """path -> target of every symlink in the commit's tree."""
    out = wrepo.git.ls_tree("-r", "-z", "--full-tree", commit, strip_newline_in_stdout=False)
    links: dict[str, str] = {}
    for entry in out.split("\0"):
        meta, _, path = entry.partition("\t")
        parts = meta.split()
        if len(parts) == 3 and parts[0] == _SYMLINK:
            links[path] = wrepo.git.cat_file("blob", parts[2], strip_newline_in_stdout=False)
    return links


def _bad_symlinks(wrepo: git.Repo, commit: str) -> dict[str, str]:
    """Symlinks in the surface of ``commit`` that resolve outside it (or outside the repo): path -> target."""
    links = _symlinks(wrepo, commit)
    bad = {}
    for link, target in links.items():
        if in_surface(link, MUTABLE_SURFACE):
            end = _resolve(link, links)
            if end is None or not in_surface(end, MUTABLE_SURFACE):
                bad[link] = target
    return bad


def _resolve(path: str, links: dict[str, str]) -> str | None:
    """Where ``path`` ends up once every symlink of the tree on the way is followed (None: outside the repo)."""
    todo = path.split("/")
    done: list[str] = []
    hops = 0
    while todo:
        part = todo.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not done:
                return None  # above the repository root
            done.pop()
            continue
        done.append(part)
        here = "/".join(done)
        if here in links:
            hops += 1
            target = links[here]
            if hops > _MAX_SYMLINK_HOPS or target.startswith("/") or posixpath.isabs(target) or "\0" in target:
                return None
            done.pop()
            todo = target.split("/") + todo
    return "/".join(done) or None


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
