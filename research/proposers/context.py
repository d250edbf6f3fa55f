"""What the researcher sees at each step, built from the run's state, its journal and the repo.

Sections, in the order they are given the token budget (``research.loop.context_budget_tokens``, which
by default follows the model: research.proposers.factory.context_budget; counted with
``harness.tokens.count_tokens``): the goal (metric, questions scored, what one
question is worth), the live levers (rendered by the loop), the decision rule that fired, a
journal of the last experiments, the rolling lessons, the diagnosis of the best evaluation
(retrieval vs reader misses, with examples), then excerpts of the source files that matter for
the dominant kind of miss, then of the other kind (read with git at the commit the next experiment
starts from), cut to whole functions, with whatever budget is left. Lower
sections are cut or dropped first; the goal and the levers never are. A 1.5B local model has
a 4k context, a hosted one far more: the same code serves both.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from harness.tokens import count_tokens
from research.evaluation.diagnosis import (
    TurnTexts,
    diagnose,
    diagnose_misses,
    eligible_examples,
    questions_counted,
    questions_shown,
    read_rows,
)
from research.journal.trajectory import ExperimentRecord
from research.proposers.base import ResearchContext, is_sampler_draw
from research.proposers.factory import context_budget
from research.proposers.lessons import lesson_for, summarize_lessons

#: experiments shown in the journal (newest last)
JOURNAL_SIZE = 6
#: the most each section may take, as a share of the whole budget (priority decides who is cut
#: when the budget is short; the caps keep a long journal from starving the sections below it)
SHARES = {"journal": 0.25, "lessons": 0.2, "diagnosis": 0.35}
#: examples of the dominant miss kind, tried from the most (research.loop.failed_questions_shown) down
#: to this until the diagnosis fits
MIN_EXAMPLES = 3
#: a source excerpt is not started with fewer tokens than this left
MIN_EXCERPT_TOKENS = 60
#: source files per kind of miss (rotated every step: a small budget shows one at a time)
RETRIEVAL_FILES = ("memsys/retrieve/retriever.py", "memsys/retrieve/merge.py", "memsys/retrieve/pyramid.py")
READER_FILES = ("memsys/answer/generate.py",)  # plus the answer prompt folder the config selects
PROMPTS_DIR = "memsys/answer/prompts"


#: run seeds this far apart give disjoint step seeds for runs of up to this many steps; it keeps every
#: derived seed (the researcher's ``100 * step + offset``, a round's ``step + i``) inside 32 bits
#: for run seeds up to ~4,000
SEED_STRIDE = 10_007


def step_seed(run_seed: int, index: int) -> int:
    """The sampling seed of experiment ``index``: a run's own stream, reproducible on resume.

    ``run_seed + index`` (before session 10) made runs of neighbouring seeds the same run shifted by
    a step: seed 2's first TPE draw was seed 1's second. Seed 0 keeps its old seeds, so earlier seed-0
    runs still replay through the reply cache.
    """
    return int(run_seed) * SEED_STRIDE + int(index)


def build_context(state: Any, records: list[ExperimentRecord], setup: Any, preset: str, run_dir: Path, *,
                  knobs: str, mode_rule: str = "") -> ResearchContext:
    """The researcher's view of this step (``setup`` is a ``research.config.RunSetup``). Sources and
    the memory config are read at the commit the next experiment starts from (the best commit, or
    the attempt being refined): the SEARCH text of an edit must match that tree."""
    tree = CommitFiles(state.repo, getattr(state, "start_commit", None) or state.best_commit)
    memory = resolved_memory(tree.show(f"configs/memory/{preset}.yaml"))
    objective = setup.eval.objective
    total = context_budget(setup)
    left = total
    rows = read_rows(state.best_eval_dir)

    goal = render_goal(objective, rows, setup)
    left -= count_tokens(goal) + count_tokens(knobs)  # never cut
    rule = fit_lines(mode_rule.splitlines(), left)
    left -= count_tokens(rule)

    journal = render_journal(records, objective, min(left, int(total * SHARES["journal"])))
    left -= count_tokens(journal)
    lessons = summarize_lessons(records, max(0, min(left, int(total * SHARES["lessons"]))))
    left -= count_tokens(lessons)

    seed = step_seed(int(setup.research.seed), int(state.next_index))
    shown = setup.research.loop.failed_questions_shown
    before = set().union(*(r.shown_questions for r in records))
    cap = int(setup.research.loop.max_shown_fraction * len(rows))
    eligible = eligible_examples([r["question_id"] for r in rows], before, cap, seed)
    misses = diagnose_misses(rows, dev_turn_texts(setup.eval) if rows else {}, examples=shown, seed=seed,
                             category_names=_category_names(setup.eval.benchmark.name), eligible=eligible,
                             prefer=before)
    diagnosis = fit_diagnosis(misses, comparison_text(state, records, run_dir, eligible),
                              max(0, min(left, int(total * SHARES["diagnosis"]))), most=shown)
    left -= count_tokens(diagnosis)

    kind = misses.dominant_kind
    answer_prompt = getattr(getattr(memory, "answer", None), "prompt", "default")
    paths = excerpt_order(kind, tree.ls(f"{PROMPTS_DIR}/{answer_prompt}/"), int(state.next_index))
    files = select_excerpts(paths, tree.show, left, step=int(state.next_index))
    return ResearchContext(objective, state.best_value or 0.0, records, state.mode, state.current_hypothesis, [],
                           files, knobs, preset, diagnosis=diagnosis, goal=goal, journal=journal, lessons=lessons,
                           failure_kind=kind, rule=rule, memory=memory, seed=seed,
                           shown_questions=questions_shown(rows, diagnosis))


def file_block(path: str, text: str) -> str:
    """How a file is shown to the researcher (and counted against the budget)."""
    return f"--- {path} ---\n{text}"


def context_tokens(ctx: ResearchContext) -> int:
    """Tokens of everything ``build_context`` budgets: the sum of its sections."""
    sections = [ctx.goal, ctx.knobs, ctx.rule, ctx.journal, ctx.lessons, ctx.diagnosis]
    return sum(count_tokens(s) for s in sections) + sum(count_tokens(file_block(p, c)) for p, c in ctx.files.items())


# --- the repo at one commit (side effects: git) ----------------------------------------------
class CommitFiles:
    """Files of the repository as one commit has them."""

    def __init__(self, repo: str | Path, commit: str):
        import git

        self._git, self._error, self.commit = git.Repo(repo).git, git.GitCommandError, commit

    def show(self, path: str) -> str | None:
        try:
            return self._git.show(f"{self.commit}:{path}")
        except self._error:
            return None

    def ls(self, folder: str) -> list[str]:
        try:
            out = self._git.ls_tree("--name-only", self.commit, folder)
        except self._error:
            return []
        return sorted(p for p in out.splitlines() if p.strip())


def resolved_memory(preset_yaml: str | None) -> Any:
    """The structured MemoryConfig merged with the preset as the commit has it. A preset
    setting a key this checkout's schema lacks (the agent may extend the schema) is merged
    without the schema's check instead of failing the step."""
    from omegaconf import OmegaConf

    from harness.config import validate
    from harness.errors import ConfigError
    from memsys.config import MemoryConfig

    node = OmegaConf.create(preset_yaml or "{}")
    node.pop("defaults", None)  # Hydra's defaults list, not a memory setting
    try:
        return validate(MemoryConfig, node, where="memory preset")
    except ConfigError:
        return OmegaConf.merge(OmegaConf.to_container(OmegaConf.structured(MemoryConfig)), node)


# --- the dev conversations (trusted side: the researcher only ever sees dev) ----------------
def dev_turn_texts(eval_setup: Any) -> TurnTexts:
    """(conversation id, turn id) -> the turn as the dialogue shows it, for every dev conversation;
    empty when the dataset cannot be read (the examples then show turn ids only)."""
    from benchmarks.datasets import load_benchmark
    from benchmarks.splits import select
    from harness.errors import MemsysError

    try:
        bench = select(load_benchmark(eval_setup.benchmark.name), "dev", None, eval_setup.benchmark)
    except MemsysError:
        return {}
    return {(c.id, t.id): t.dialogue_text for c in bench.conversations for s in c.sessions for t in s.turns}


def _category_names(benchmark: str) -> dict[str, str]:
    from benchmarks.datasets import category_names

    try:
        return category_names(benchmark)
    except KeyError:
        return {}


# --- sections --------------------------------------------------------------------------------
def render_goal(objective: str, rows: list[dict[str, Any]], setup: Any) -> str:
    """What to maximize and what one question is worth (the prompt shows the best value itself)."""
    ev, lc = setup.eval.options, setup.research.loop
    lines = [f"maximize {objective} on the dev split (sample {ev.sample or 'full'})."]
    counted = questions_counted(objective, rows)
    if not rows:
        lines.append("No evaluation of the best system yet.")
    elif not counted:
        lines.append(f"{len(rows)} questions are scored; none of them counts towards {objective}.")
    else:
        which = "" if len(counted) == len(rows) else f" ({len(counted)} of them count towards {objective})"
        lines.append(f"{len(rows)} questions are scored{which}: one question is worth 1/{len(counted)} = "
                     f"{1 / len(counted):.4f} points of {objective}.")
    lines.append(f"A change is accepted when it improves {objective} by at least {lc.min_rel_improvement:.1%} "
                 f"(relative) and the paired per-question test against the best gives p_better < {lc.alpha:g}.")
    return "\n".join(lines)


def journal_line(rec: ExperimentRecord, objective: str) -> str:
    auto = lesson_for(rec, objective)
    value = "" if rec.objective_value is None else f" {rec.objective_value:.4f}"
    line = f"- {rec.experiment_id} [{rec.decision}{value}] {auto}"
    if rec.index > 0 and is_sampler_draw(rec):  # shown as a hypothesis, its words were copied into the model's
        line += " | a sampler's draw, not a hypothesis"
    elif rec.hypothesis and rec.index > 0:
        line += f" | hypothesis: {_cut(rec.hypothesis, 120)}"
    if rec.lesson and rec.lesson != auto:
        line += f" | lesson: {rec.lesson}"
    return line


def render_journal(records: Sequence[ExperimentRecord], objective: str, limit: int) -> str:
    """The last experiments, newest last; the oldest are dropped first to fit ``limit``."""
    lines = [journal_line(r, objective) for r in records[-JOURNAL_SIZE:]]
    while lines and count_tokens("\n".join(lines)) > limit:
        lines.pop(0)
    return "\n".join(lines)


def comparison_text(state: Any, records: Sequence[ExperimentRecord], run_dir: Path,
                    eligible: set[str] | None = None) -> str:
    """Where the last evaluated experiment differed from the best (when it did not win)."""
    last = next((r for r in reversed(records) if (r.eval_dir or r.eval_run_id) and r.index > 0), None)
    if last is None or last.decision == "proceed":
        return ""
    new_dir = Path(run_dir) / (last.eval_dir or Path("evals") / last.experiment_id / str(last.eval_run_id))
    d = diagnose(read_rows(state.best_eval_dir), read_rows(new_dir), eligible)
    if not d.category_deltas:
        return ""
    if not d.broke and not d.fixed and not any(d.category_deltas.values()):
        return f"Last evaluated experiment ({last.experiment_id}): the same score as the best on every question."
    return f"Last evaluated experiment ({last.experiment_id}) vs best:\n" + d.render(limit=2)


def fit_diagnosis(misses: Any, comparison: str, limit: int, most: int = 5) -> str:
    """The miss diagnosis with as many examples as fit, up to ``most`` (at least MIN_EXAMPLES before
    the comparison with the last experiment is given up), then fewer; lines cut last."""
    both = (True, False) if comparison else (False,)
    tries = [(n, c) for lo, hi in ((min(MIN_EXAMPLES, most), most), (0, min(MIN_EXAMPLES, most) - 1))
             for c in both for n in range(hi, lo - 1, -1)]
    for n, with_comparison in tries:
        text = misses.render(examples=n) + (f"\n{comparison}" if with_comparison else "")
        if count_tokens(text) <= limit:
            return text
    return fit_lines(misses.render(examples=0).splitlines(), limit)


def fit_lines(lines: list[str], limit: int) -> str:
    """The leading lines that fit ``limit`` tokens."""
    kept: list[str] = []
    for line in lines:
        if count_tokens("\n".join([*kept, line])) > limit:
            break
        kept.append(line)
    return "\n".join(kept)


def _cut(text: str, n: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= n else flat[: n - 3] + "..."


# --- source excerpts -------------------------------------------------------------------------
def source_files(kind: str, prompt_files: Sequence[str]) -> list[str]:
    """The files that matter for a kind of miss (both kinds when nothing dominates yet)."""
    reader = [*prompt_files, *READER_FILES]
    if kind == "retrieval":
        return list(RETRIEVAL_FILES)
    if kind == "reader":
        return reader
    return [*RETRIEVAL_FILES, *reader]


def excerpt_order(kind: str, prompt_files: Sequence[str], step: int) -> list[str]:
    """The files excerpts are cut from, in order: the dominant kind's (rotated, so each step leads with the
    next), then the other kind's. A small budget is spent on the first; a hosted model's larger one goes on
    to the rest of the code it can change (the retriever, the pyramid and the answer code)."""
    first = source_files(kind, prompt_files)
    rest = [p for p in source_files("", prompt_files) if p not in first]
    return [*rotation(first, step), *rest]


def rotation(paths: Sequence[str], step: int) -> list[str]:
    """``paths`` starting at ``step`` (mod their number): each step leads with the next file."""
    if not paths:
        return []
    k = step % len(paths)
    return [*paths[k:], *paths[:k]]


def select_excerpts(paths: Sequence[str], show: Any, limit: int, *, step: int = 0) -> dict[str, str]:
    """Excerpts of ``paths`` (read with ``show``) in order, each as much as the budget left allows."""
    files: dict[str, str] = {}
    for path in paths:
        header = count_tokens(file_block(path, ""))
        if limit - header < MIN_EXCERPT_TOKENS:
            break
        text = show(path)
        if not text:
            continue
        part = excerpt(path, text, limit - header, step=step)
        if not part:
            continue
        files[path] = part
        limit -= count_tokens(file_block(path, part))
    return files


@dataclass
class _Segment:
    start: int  # first line (0-based)
    end: int  # one past the last line
    kind: str  # doc | import | def (a function or method) | code (other statements, a class's lines before its methods)
    name: str
    parent: int | None = None  # index of the class header a method needs


def excerpt(path: str, text: str, limit: int, *, step: int = 0) -> str:
    """``text`` whole when it fits ``limit`` tokens, else its whole functions and sections that
    fit, in file order, with a marker where lines were left out. The module docstring comes
    first, then functions and statements (starting at a different one each ``step``), imports
    last. Returns "" when nothing fits."""
    if count_tokens(text) <= limit:
        return text
    lines = text.splitlines(keepends=True)
    segments = _py_segments(text, lines) if path.endswith(".py") else None
    if segments is None:
        segments = _paragraphs(lines)
    by_kind = {kind: [i for i, s in enumerate(segments) if s.kind == kind] for kind in ("doc", "def", "code", "import")}
    defs = by_kind["def"]
    if defs:
        k = step % len(defs)
        defs = defs[k:] + defs[:k]
    order = by_kind["doc"] + defs + by_kind["code"] + by_kind["import"]
    chosen: set[int] = set()
    best = ""
    for i in order:
        if i in chosen:
            continue
        trial = chosen | {i} | ({segments[i].parent} if segments[i].parent is not None else set())
        rendered = _render(path, lines, segments, trial)
        if count_tokens(rendered) <= limit:
            chosen, best = trial, rendered
    return best


def _render(path: str, lines: list[str], segments: list[_Segment], chosen: set[int]) -> str:
    out: list[str] = []
    gap: list[_Segment] = []
    comment = "#" if path.endswith(".py") else ""

    def flush() -> None:
        if gap:
            names = ", ".join(s.name for s in gap)
            first = lines[gap[0].start]
            indent = first[: len(first) - len(first.lstrip())] if first.strip() else ""
            out.append(f"{indent}{comment}[... lines {gap[0].start + 1}-{gap[-1].end} not shown: {_cut(names, 80)}]\n")
            gap.clear()

    for i, s in enumerate(segments):
        if i in chosen:
            flush()
            out.extend(lines[s.start:s.end])
        else:
            gap.append(s)
    flush()
    return "".join(out).rstrip("\n")


def _py_segments(text: str, lines: list[str]) -> list[_Segment] | None:
    """Top-level statements (methods of classes split out), each with the comments above it."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    starts: list[tuple[int, str, str, int | None]] = []  # (start line, kind, name, parent start)

    def start_of(node: ast.stmt) -> int:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]) - 1
        while first > 0 and lines[first - 1].lstrip().startswith("#"):
            first -= 1
        return first

    for n, node in enumerate(tree.body):
        if n == 0 and isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant):
            starts.append((0, "doc", "module docstring", None))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if not starts or starts[-1][1] != "import":
                starts.append((start_of(node), "import", "imports", None))
        elif isinstance(node, ast.ClassDef):
            head = start_of(node)
            starts.append((head, "code", f"class {node.name}", None))
            starts += [(start_of(m), "def", f"{node.name}.{m.name}", head) for m in node.body
                       if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            starts.append((start_of(node), "def", node.name, None))
        else:
            starts.append((start_of(node), "code", _statement_name(node, lines), None))
    if starts and starts[0][0] > 0:
        starts.insert(0, (0, "doc", "header", None))
    index = {s[0]: i for i, s in enumerate(starts)}
    return [_Segment(s, starts[i + 1][0] if i + 1 < len(starts) else len(lines), kind, name,
                     index.get(parent) if parent is not None else None)
            for i, (s, kind, name, parent) in enumerate(starts)]


def _statement_name(node: ast.stmt, lines: list[str]) -> str:
    targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
    names = [t.id for t in targets if isinstance(t, ast.Name)]
    return ", ".join(names) or _first_words(lines[node.lineno - 1])


def _paragraphs(lines: list[str]) -> list[_Segment]:
    """Blank-line separated paragraphs (prompt templates, anything that does not parse)."""
    segments: list[_Segment] = []
    start = 0
    for i in range(1, len(lines) + 1):
        if i == len(lines) or (not lines[i].strip() and lines[i - 1].strip()):
            segments.append(_Segment(start, i, "def", _first_words(lines[start])))
            start = i
    return segments


def _first_words(line: str) -> str:
    return _cut(line.strip(), 30) or "blank"
