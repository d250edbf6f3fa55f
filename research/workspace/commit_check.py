"""What a commit of the research agent may hold: paths in the mutable surface, regular files and
symlinks only, every symlink resolving inside the surface (read from git's trees, never the disk)."""

from __future__ import annotations

import posixpath

import git

from harness.surface import MUTABLE_SURFACE, in_surface

#: flags of every diff the Workspace runs: no external diff program, no textconv filter
NO_EXEC_DIFF = ("--no-ext-diff", "--no-textconv")
#: file modes a commit may hold inside the surface (regular, executable, symlink; 000000 = deleted)
_ALLOWED_MODES = {"100644", "100755", "120000", "000000"}
_SYMLINK = "120000"
_MAX_SYMLINK_HOPS = 40


def forbidden_in_commit(wrepo: git.Repo, parent: str, commit: str) -> list[str]:
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
