"""Git workspace of an optimization run (GitPython).

Each experiment gets its own worktree on its own branch from the current best
commit; every attempt is committed (failures too) so the branch history is the
journal; ``refs/autoresearch/<run>/best`` moves only on proceed. The user's own
working tree and branches are never touched.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import git

from research.errors import WorkspaceError

log = logging.getLogger(__name__)
AUTHOR = git.Actor("memsys-autoresearch", "autoresearch@localhost")


@dataclass
class Worktree:
    path: Path
    branch: str
    base_commit: str


class Workspace:
    def __init__(self, repo_path: Path, run_id: str, worktrees_dir: Path):
        try:
            self.repo = git.Repo(repo_path, search_parent_directories=True)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            raise WorkspaceError(f"not a git repository: {repo_path}") from exc
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

    def commit(self, wt: Worktree, message: str, allow_empty: bool = True) -> str:
        wrepo = git.Repo(wt.path)
        wrepo.git.add("-A")
        args = ["-m", message, "--no-verify"]
        if allow_empty:
            args.append("--allow-empty")
        wrepo.git.commit(*args, author=f"{AUTHOR.name} <{AUTHOR.email}>",
                         env={"GIT_COMMITTER_NAME": AUTHOR.name, "GIT_COMMITTER_EMAIL": AUTHOR.email})
        return wrepo.head.commit.hexsha

    def diff(self, base: str, commit: str) -> tuple[str, dict[str, int]]:
        text = self.repo.git.diff(base, commit)
        files = self.repo.git.diff("--name-only", base, commit).split()
        numstat = self.repo.git.diff("--numstat", base, commit).splitlines()
        ins = sum(int(l.split()[0]) for l in numstat if l.split()[0].isdigit())
        dels = sum(int(l.split()[1]) for l in numstat if l.split()[1].isdigit())
        return text, {"files": len(files), "insertions": ins, "deletions": dels}

    def changed_paths(self, base: str, commit: str) -> list[str]:
        return [p for p in self.repo.git.diff("--name-only", base, commit).split("\n") if p]

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


#: what a scratch copy of the project holds: the code the loop edits and runs
PROJECT_PATHS = ("memsys", "benchmarks", "research", "sandbox", "configs", "pyproject.toml")


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
