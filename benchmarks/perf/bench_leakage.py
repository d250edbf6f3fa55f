"""The leakage screen's false-positive rate on the repository's own history, its speed, and the attacks it catches.

Why: a screen that refuses legitimate work is worse than none (the loop would learn to avoid real
changes), so every accepted change must pass. Screened here:

- ``history``: every commit of ``git log`` (all of HEAD's ancestors) whose diff against its first
  parent touches the mutable surface (memsys/, configs/memory/); a root commit against the empty tree;
- ``suite``: the legitimate researcher edits of the test suite (tests/research/, tests/support/loop.py):
  SEARCH/REPLACE blocks (the lines their REPLACE adds) and config overrides (applied to a preset with
  OmegaConf, as the loop writes them), read statically with ``ast`` (the loop's code is not imported);
- ``attacks``: synthetic leakage built from the real LoCoMo dev questions (30 questions -> evidence ids,
  30 questions -> gold answers, 30 question ids -> answers, hashed questions -> evidence ids, the
  evidence table pasted into an existing file, the table as a base64 zlib blob, a JSON table under
  memsys/): each must be refused.

The figure that matters is ``false_positive_rate`` (history and suite diffs with a hit; 0 expected) and
``screen_ms`` (the pure screen per diff, target <= 1000 ms); reading a diff from git is timed apart.

Usage: ``python -m benchmarks.perf.bench_leakage [--repo .] [--limit N] [--out runs/bench/leakage.json]``
"""

from __future__ import annotations

import argparse
import ast
import base64
import difflib
import hashlib
import json
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

from benchmarks.datasets import load_benchmark
from benchmarks.datasets.schema import Question
from benchmarks.leakage import (
    SURFACE,
    AddedFile,
    LeakageConfig,
    LeakageIndex,
    LeakageReport,
    added_files_from_git,
    load_index,
    screen_diff,
)
from benchmarks.leakage.screen import signal_levels
from benchmarks.splits import load_benchmark_config, select
from harness.bench_output import command, load_average, utc_now, write_json
from harness.paths import REPO_ROOT, runs_dir

SUITE_GLOBS = ("tests/research/**/*.py", "tests/support/loop.py")
DEFAULT_EDIT_PATH = "memsys/retrieve/merge.py"  # where the suite's (s, r) pairs apply (tests/research/test_healing_e2e.py)
PRESET = "configs/memory/naive.yaml"  # the preset the suite's overrides are written into
ATTACK_SIZE = 30  # questions per synthetic table: the recorded attack's table was of this order


# --- history ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Screened:
    """One diff screened: where it came from, what it added, what the screen found, how long it took."""

    source: str  # "history" | "suite" | "attack"
    name: str  # commit sha, test file:line, attack name
    title: str
    files: int
    added_lines: int
    hits: int
    kinds: tuple[str, ...]
    lesson: str
    read_ms: float
    screen_ms: float
    levels: dict[str, int]


def surface_commits(repo: Path, limit: int | None = None) -> list[tuple[str, str | None, str]]:
    """(commit, first parent or None, subject) of HEAD's ancestors, newest first, whose first-parent diff
    touches the surface (git log's own path filter would hide merges that bring surface changes)."""
    import git

    r = git.Repo(str(repo))
    try:
        out = []
        for c in r.iter_commits("HEAD"):
            parent = c.parents[0] if c.parents else None
            paths = [s.rstrip("/") for s in SURFACE]
            changed = c.diff(parent, paths=paths) if parent is not None else c.diff(git.NULL_TREE, paths=paths)
            if changed:
                out.append((c.hexsha, parent.hexsha if parent is not None else None, c.summary))
            if limit is not None and len(out) >= limit:
                break
        return out
    finally:
        r.close()


def screen_one(source: str, name: str, title: str, added: dict[str, AddedFile], index: LeakageIndex,
               cfg: LeakageConfig, read_ms: float = 0.0) -> Screened:
    t0 = time.perf_counter()
    report: LeakageReport = screen_diff(added, index, cfg)
    ms = (time.perf_counter() - t0) * 1e3
    return Screened(source, name, title[:100], report.files, sum(len(f.lines) for f in added.values()), len(report.hits),
                    tuple(sorted({h.kind for h in report.hits})), report.lesson, round(read_ms, 2), round(ms, 2),
                    signal_levels(added, index, cfg))


def screen_history(repo: Path, index: LeakageIndex, cfg: LeakageConfig, limit: int | None = None) -> list[Screened]:
    """Every surface commit's added text, screened (the routine the history test runs too)."""
    out = []
    for sha, parent, subject in surface_commits(repo, limit):
        t0 = time.perf_counter()
        added = added_files_from_git(repo, parent, sha)
        read_ms = (time.perf_counter() - t0) * 1e3
        out.append(screen_one("history", sha[:12], subject, added, index, cfg, read_ms))
    return out


# --- the test suite's researcher edits --------------------------------------------------------------
def const_env(tree: ast.Module) -> dict[str, Any]:
    """Module-level names bound to evaluable literals (strings, lists of strings), in order."""
    env: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = evaluate(node.value, env)
            if value is not None:
                env[node.targets[0].id] = value
    return env


def evaluate(node: ast.AST, env: dict[str, Any]) -> Any:
    """A literal expression's value: constants, names of ``env``, ``+``, f-strings (unknown parts as ""),
    lists/tuples of those; None when it is something else."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return env.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = evaluate(node.left, env), evaluate(node.right, env)
        return left + right if isinstance(left, str) and isinstance(right, str) else None
    if isinstance(node, ast.JoinedStr):
        parts = [evaluate(v.value if isinstance(v, ast.FormattedValue) else v, env) for v in node.values]
        return "".join(p if isinstance(p, str) else "" for p in parts)
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [evaluate(e, env) for e in node.elts]
        return None if any(i is None for i in items) else items
    return None


def replace_edits(tree: ast.Module, env: dict[str, Any]) -> Iterator[tuple[int, str, str, str]]:
    """(line, path, search, replace) of each SEARCH/REPLACE the file writes: dicts with a "replace" key,
    and (search, replace) pairs handed to a proposal helper."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            named = ((evaluate(k, env), v) for k, v in zip(node.keys, node.values) if k is not None)
            fields = {k: v for k, v in named if isinstance(k, str)}
            replace = evaluate(fields["replace"], env) if "replace" in fields else None
            if isinstance(replace, str):
                path = evaluate(fields["path"], env) if "path" in fields else None
                search = evaluate(fields["search"], env) if "search" in fields else ""
                yield node.lineno, path if isinstance(path, str) else DEFAULT_EDIT_PATH, search or "", replace
        elif isinstance(node, ast.Call):
            for arg in node.args:
                pairs = evaluate(arg, env)
                if isinstance(pairs, list) and pairs and all(
                        isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in pairs):
                    for search, replace in pairs:
                        yield node.lineno, DEFAULT_EDIT_PATH, search, replace


def memory_keys(repo: Path) -> set[str]:
    """Top-level keys of the memory presets: what an override of the memory config starts with."""
    from omegaconf import OmegaConf

    keys: set[str] = set()
    for p in sorted((repo / "configs" / "memory").glob("*.yaml")):
        keys.update(str(k) for k in OmegaConf.to_container(OmegaConf.load(p)) if k != "defaults")
    return keys


def override_sets(tree: ast.Module, env: dict[str, Any], keys: set[str]) -> Iterator[tuple[int, list[str]]]:
    """(line, overrides) of each list of memory-config overrides ("retrieval.top_k=12") in the file."""
    for node in ast.walk(tree):
        if isinstance(node, ast.List):
            items = evaluate(node, env)
            if items and all(isinstance(i, str) and "=" in i for i in items):
                ours = [i for i in items if i.split("=", 1)[0].strip().removeprefix("memory.").split(".")[0] in keys]
                if ours:
                    yield node.lineno, ours


def changed_lines(old: str, new: str) -> tuple[tuple[int, str], ...]:
    """(line number in ``new``, text) of the lines ``new`` adds over ``old``, as a diff would show them."""
    a, b = old.split("\n"), new.split("\n")
    out: list[tuple[int, str]] = []
    for tag, _, _, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("insert", "replace"):
            out.extend((j + 1, b[j]) for j in range(j1, j2))
    return tuple(out)


def edit_added(repo: Path, path: str, search: str, replace: str) -> AddedFile:
    """What one SEARCH/REPLACE adds to the repository's file (REPLACE alone when it does not apply)."""
    target = repo / path
    text = target.read_text(encoding="utf-8") if target.is_file() else None
    if text is not None and search and search in text:
        return AddedFile(path, changed_lines(text, text.replace(search, replace, 1)))
    return AddedFile(path, changed_lines(search, replace), new=text is None)


def overrides_added(repo: Path, overrides: list[str]) -> AddedFile:
    """What the loop's config overrides add to the preset: it rewrites the whole file with OmegaConf."""
    from omegaconf import OmegaConf

    from harness.config import override_value

    path = repo / PRESET
    old = path.read_text(encoding="utf-8")
    cfg = OmegaConf.load(path)
    for ov in overrides:
        key, value = ov.split("=", 1)
        try:
            OmegaConf.update(cfg, key.strip().removeprefix("memory."), override_value(value),
                             force_add=True)
        except Exception:  # noqa: BLE001 - a malformed override the loop refuses too: it writes nothing
            continue
    return AddedFile(PRESET, changed_lines(old, OmegaConf.to_yaml(cfg)))


def suite_diffs(repo: Path) -> Iterator[tuple[str, dict[str, AddedFile]]]:
    """(test file:line, added files) of every researcher edit and override set the test suite makes."""
    keys = memory_keys(repo)
    for pattern in SUITE_GLOBS:
        for test_file in sorted(repo.glob(pattern)):
            try:
                tree = ast.parse(test_file.read_text(encoding="utf-8"))
            except (SyntaxError, UnicodeDecodeError, OSError):  # a file mid-edit elsewhere: nothing to read
                continue
            env = const_env(tree)
            rel = test_file.relative_to(repo)
            for line, path, search, replace in replace_edits(tree, env):
                added = edit_added(repo, path, search, replace)
                if added.lines:
                    yield f"{rel}:{line}", {path: added}
            for line, overrides in override_sets(tree, env, keys):
                yield f"{rel}:{line}", {PRESET: overrides_added(repo, overrides)}


def screen_suite(repo: Path, index: LeakageIndex, cfg: LeakageConfig) -> list[Screened]:
    return [screen_one("suite", name, "test-suite edit", added, index, cfg) for name, added in suite_diffs(repo)]


# --- synthetic attacks from the real dev data -------------------------------------------------------
def dev_questions(n: int = ATTACK_SIZE) -> list[Question]:
    """The first ``n`` LoCoMo dev questions with a gold answer and evidence (what a memoriser would carry)."""
    dev = select(load_benchmark("locomo"), "dev", None, load_benchmark_config("locomo"))
    return [q for q in dev.questions if q.answer.strip() and q.evidence][:n]


def table_module(name: str, table: dict[str, Any], body: str) -> str:
    """A plausible memsys module holding ``table`` as a literal dict and a function that reads it."""
    rows = "".join(f"    {k!r}: {v!r},\n" for k, v in table.items())
    return (f'"""{name}: hints for hard questions."""\n\nfrom __future__ import annotations\n\n'
            f"_TABLE = {{\n{rows}}}\n\n\n{body}\n")


LOOKUP = ("def hint(question: str, ranked: list[str]) -> list[str]:\n"
          "    first = _TABLE.get(question.strip(), [])\n"
          "    return list(first) + [r for r in ranked if r not in first]")


def synthetic_attacks(questions: Sequence[Question]) -> dict[str, dict[str, AddedFile]]:
    """Leaking diffs, each a table over ``questions``; names say what is carried."""
    def key(q: Question) -> str:
        return hashlib.sha1(q.question.encode()).hexdigest()[:16]

    evidence = {q.question: list(q.evidence) for q in questions}
    tables = {
        "questions_to_evidence_ids": ("memsys/retrieve/hints.py", evidence),
        "questions_to_gold_answers": ("memsys/answer/hints_table.py", {q.question: q.answer for q in questions}),
        "question_ids_to_answers": ("memsys/answer/known.py", {q.id: q.answer for q in questions}),
        "hashed_questions_to_evidence_ids": ("memsys/retrieve/priors.py", {key(q): list(q.evidence) for q in questions}),
    }
    out = {name: {path: AddedFile.from_text(path, table_module(path, t, LOOKUP))} for name, (path, t) in tables.items()}
    inserted = table_module("merge", evidence, LOOKUP).split("\n")[4:]  # the table pasted into an existing file
    out["evidence_table_inserted_in_merge"] = {
        DEFAULT_EDIT_PATH: AddedFile(DEFAULT_EDIT_PATH, tuple(enumerate(inserted, start=30)))}
    blob = base64.b64encode(zlib.compress(json.dumps(evidence).encode())).decode()
    out["compressed_blob"] = {"memsys/retrieve/prior.py": AddedFile.from_text("memsys/retrieve/prior.py", f'_PRIOR = "{blob}"\n')}
    data = json.dumps({key(q): list(q.evidence) for q in questions}, indent=1)
    out["json_data_file"] = {"memsys/retrieve/priors.json": AddedFile.from_text("memsys/retrieve/priors.json", data)}
    return out


def screen_attacks(index: LeakageIndex, cfg: LeakageConfig) -> list[Screened]:
    return [screen_one("attack", name, "synthetic leakage from LoCoMo dev", added, index, cfg)
            for name, added in synthetic_attacks(dev_questions()).items()]


# --- report -----------------------------------------------------------------------------------------
def thresholds(cfg: LeakageConfig) -> dict[str, int]:
    """Each measure of ``signal_levels`` -> the value at which it becomes a hit (table_literals only gates
    table_records: history's lexicons are larger than any attack)."""
    return {"long_questions": 1, "short_questions": cfg.short_questions_min, "answers": cfg.answer_min_distinct,
            "evidence_ids": cfg.evidence_ids_min, "evidence_ids_near_question": cfg.evidence_ids_near_question_min,
            "question_ids": cfg.question_ids_min, "table_literals": cfg.table_min_literals,
            "table_records": cfg.table_min_record_like, "blob_chars": cfg.blob_min_chars, "data_files": 1}


def margins(legit: list[Screened], attacks: list[Screened], cfg: LeakageConfig) -> dict[str, dict[str, Any]]:
    """Per measure: the most legitimate code reached, the threshold, and each attack's value."""
    return {m: {"legit_max": max((s.levels[m] for s in legit), default=0),
                "legit_max_at": max(legit, key=lambda s: s.levels[m]).name if legit else None,
                "threshold": t, "attacks": {s.name: s.levels[m] for s in attacks}}
            for m, t in thresholds(cfg).items()}


def timing(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    return {"n": len(values), "mean": round(sum(values) / len(values), 2), "p95": ordered[int(0.95 * (len(ordered) - 1))],
            "max": ordered[-1]}


def summarise(history: list[Screened], suite: list[Screened], attacks: list[Screened], cfg: LeakageConfig) -> dict[str, Any]:
    legit = history + suite
    flagged = [s for s in legit if s.hits]
    return {
        "history": {"commits_screened": len(history), "commits_with_hits": sum(1 for s in history if s.hits),
                    "hits_per_commit": [{"commit": s.name, "title": s.title, "files": s.files,
                                         "added_lines": s.added_lines, "hits": s.hits, "kinds": s.kinds} for s in history]},
        "suite": {"edits_screened": len(suite), "edits_with_hits": sum(1 for s in suite if s.hits),
                  "edits": [{"where": s.name, "added_lines": s.added_lines, "hits": s.hits} for s in suite]},
        "false_positive_rate": round(len(flagged) / len(legit), 4) if legit else 0.0,
        "false_positives": [asdict(s) for s in flagged],
        "attacks": {s.name: {"caught": s.hits > 0, "kinds": s.kinds, "lesson": s.lesson} for s in attacks},
        "all_attacks_caught": all(s.hits > 0 for s in attacks),
        "margins": margins(legit, attacks, cfg),
        "screen_ms": timing([s.screen_ms for s in legit + attacks]),
        "read_ms": timing([s.read_ms for s in history]),
        "largest_diff": max(({"name": s.name, "added_lines": s.added_lines, "screen_ms": s.screen_ms} for s in legit),
                            key=lambda d: d["added_lines"], default=None),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repo", type=Path, default=REPO_ROOT)
    p.add_argument("--limit", type=int, default=None, help="screen only the newest N surface commits")
    p.add_argument("--out", type=Path, default=runs_dir() / "bench" / "leakage.json")
    args = p.parse_args(argv)
    cfg = LeakageConfig()
    t0 = time.perf_counter()
    index = load_index(cfg=cfg)
    build_s = time.perf_counter() - t0
    history = screen_history(args.repo, index, cfg, args.limit)
    suite = screen_suite(args.repo, index, cfg)
    attacks = screen_attacks(index, cfg)
    report = {"command": command("benchmarks.perf.bench_leakage", argv), "finished": utc_now(),
              "load_average_end": load_average(), "repo": str(args.repo),
              "index": {**index.stats(), "versions": list(index.versions), "build_s": round(build_s, 3)},
              "config": asdict(cfg), **summarise(history, suite, attacks, cfg)}
    write_json(args.out, report)
    print(json.dumps({k: report[k] for k in ("false_positive_rate", "screen_ms", "read_ms", "all_attacks_caught")}))
    for s in [*history, *suite, *attacks]:
        if s.hits and s.source != "attack":
            print(f"FALSE POSITIVE {s.source} {s.name}: {s.lesson}")
    for name, a in report["attacks"].items():
        print(f"attack {name}: caught={a['caught']} kinds={a['kinds']}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
