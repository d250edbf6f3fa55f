"""J for one scored evaluation: the judge asked about its answers and about the stress test's known-wrong ones,
and what J means written beside the F1 scores in the run folder.

Why a step after scoring, on the run folder: J needs each question's official F1 (the agreement with F1) and
the answers as the trusted side validated them, both in ``predictions.jsonl`` once the scorer has run. The
stress test runs in the same step, with the configured seed, so a J is never shown without how far its judge
can be fooled. The I/O stays at the edges: reading the rows and writing four files (``predictions.jsonl``
gains a per-question ``judge``, ``metrics.json`` the J figures, ``table.txt`` the J table, ``judge.json`` the
detail); asking goes through :func:`~benchmarks.judge.ask.ask_judge` and its resumable cache
(``judge.jsonl``), so a killed step run again asks only what it does not have.

Everything here is trusted: the config is the scorer's, the prompt is :mod:`benchmarks.judge.protocol`'s, and
the ``client`` is whatever OpenAI-SDK object the caller built (the research side builds one over its gateway).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from benchmarks.datasets.schema import Benchmark, category_names
from benchmarks.judge.ask import JudgeUsage, ask_judge, cache_usage
from benchmarks.judge.config import JudgeConfig, judge_metric_key
from benchmarks.judge.protocol import Protocol, get_protocol
from benchmarks.judge.score import JudgedRow, JudgeSummary, judge_items, judged_rows, length_warnings, mean_scores, summarize
from benchmarks.judge.stress import (
    KIND_NAMES,
    KINDS,
    Rate,
    StressPlan,
    false_accept_rates,
    names_by_conversation,
    stress_judge_items,
    stress_judgements,
    stress_plan,
    stress_warnings,
)
from harness.atomic import atomic_write_json, atomic_write_text
from harness.errors import ConfigError

#: the verdict cache (benchmarks.judge.ask) and the detail file, in the evaluation's run folder
JUDGE_CACHE = "judge.jsonl"
JUDGE_FILE = "judge.json"
#: columns of the J table, as the scorer's own (the text lines are never wrapped: a warning stays one line)
TABLE_WIDTH = 80
#: the scored rows (benchmarks.runner.PREDICTIONS, not imported: the runner sits above the judge)
PREDICTIONS = "predictions.jsonl"


@dataclass(frozen=True)
class JudgeRun:
    """Everything judging one evaluation produced."""

    cfg: JudgeConfig
    rows: tuple[JudgedRow, ...]  # one per question, judged or scored by its category's own rule
    summary: JudgeSummary
    plan: StressPlan
    stress_scores: Mapping[str, float]  # stress item id -> mean verdict
    rates: Mapping[str, Rate]  # kind -> false-accept rate
    warnings: tuple[str, ...]
    usage: JudgeUsage  # the calls in the verdict cache (killed steps included) and their tokens


# --- asking ------------------------------------------------------------------------------------------
def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    """The scored rows of an evaluation (``predictions.jsonl``)."""
    text = (Path(run_dir) / PREDICTIONS).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def answers_and_f1(rows: Sequence[Mapping[str, Any]]) -> tuple[dict[str, str], dict[str, float]]:
    """Each question's validated answer and its official F1, as the trusted scorer wrote them."""
    answers = {str(r["question_id"]): str(r.get("prediction") or "") for r in rows}
    f1 = {str(r["question_id"]): float(r["scores"]["f1"]) for r in rows
          if isinstance(r.get("scores"), Mapping) and r["scores"].get("f1") is not None}
    return answers, f1


def protocol_for(cfg: JudgeConfig, benchmark: str) -> Protocol:
    """The config's protocol, refused when it is written for another benchmark (its verdicts would not mean J)."""
    protocol = get_protocol(cfg.protocol)
    if protocol.benchmark != benchmark:
        raise ConfigError(f"judge protocol {protocol.name!r} grades {protocol.benchmark}, not {benchmark}: "
                          f"use judge={'memgallery' if benchmark == 'memgallery' else 'lenient or judge=strict'}")
    return protocol


def judge_answers(client: Any, cfg: JudgeConfig, bench: Benchmark, rows: Sequence[Mapping[str, Any]],
                  cache_path: Path) -> JudgeRun:
    """Ask the judge about every judged answer and every stress item (one list, one cache, one progress bar)."""
    protocol = protocol_for(cfg, bench.name)
    questions = list(bench.questions)
    answers, f1 = answers_and_f1(rows)
    items = judge_items(questions, answers, protocol)
    plan = stress_plan(questions, names_by_conversation(bench.conversations), cfg.stress_seed, cfg.stress_size)
    verdicts = ask_judge(client, cfg, [*items, *stress_judge_items(plan.items)], cache_path)
    answered = {i.id for i in items}
    judged = judged_rows(questions, answers, [v for v in verdicts if v.item_id in answered], protocol, f1)
    stress_scores = mean_scores(v for v in verdicts if v.item_id not in answered)
    summary = summarize(judged, protocol.name, cfg)
    rates = false_accept_rates(stress_judgements(plan.items, stress_scores), cfg.pass_score, cfg.ci_level)
    warnings = stress_warnings(rates, cfg.max_false_accept, cfg.ci_level) + length_warnings(summary, cfg.max_length_ratio)
    return JudgeRun(cfg, tuple(judged), summary, plan, stress_scores, rates, tuple(warnings), cache_usage(cache_path))


# --- what the run folder gains ---------------------------------------------------------------------------
def judge_metrics(run: JudgeRun) -> dict[str, Any]:
    """Flat figures for metrics.json: J overall and per category, length, agreement, false-accept rates, warnings."""
    s, cfg = run.summary, run.cfg
    m: dict[str, Any] = {"judge_protocol": s.protocol, "judge_model": cfg.model, "judge_runs": cfg.runs, "judge_n": s.n}
    if s.j is not None:
        m["j"] = s.j
    for cat, value in s.j_by_category.items():
        m[f"j_cat{cat}"], m[f"judge_n_cat{cat}"] = value, s.n_by_category[cat]
    for cat, value in s.unjudged.items():
        m[f"judge_rule_cat{cat}"] = value
    if s.length is not None:  # with its limit, so a record alone says whether the answers were too long
        m |= {"answer_words": s.length.answer_words, "gold_words": s.length.gold_words, "length_ratio": s.length.ratio,
              "length_ratio_mean": s.length.mean_ratio, "judge_max_length_ratio": cfg.max_length_ratio}
    if s.agreement is not None:
        m |= {"judge_f1_agreement": s.agreement.agreement, "judge_f1_agreement_n": s.agreement.n}
        if s.agreement.kappa is not None:
            m["judge_f1_kappa"] = s.agreement.kappa
    for kind, r in run.rates.items():
        m |= {f"judge_false_accept_{kind}": r.rate, f"judge_false_accept_{kind}_low": r.ci_low,
              f"judge_false_accept_{kind}_high": r.ci_high, f"judge_false_accept_{kind}_n": r.n}
    m |= {"judge_warnings": "\n".join(run.warnings), "judge_calls": run.usage.calls,
          "judge_prompt_tokens": run.usage.prompt_tokens, "judge_completion_tokens": run.usage.completion_tokens}
    return m


def with_objective(metrics: dict[str, Any]) -> dict[str, Any]:
    """``objective_value`` filled in when the requested objective is a judge figure (the scorer left it empty)."""
    key = judge_metric_key(str(metrics.get("objective")))
    if key is not None:
        metrics["objective_value"] = metrics.get(key)
    return metrics


def judged_prediction_rows(rows: Sequence[Mapping[str, Any]], judged: Sequence[JudgedRow]) -> list[dict[str, Any]]:
    """Each scored row with its per-question ``judge`` (the mean verdict; None when its category is not judged,
    whose own rule's score is then ``judge_rule``) and the verdicts of every run."""
    by_id = {r.qid: r for r in judged}
    out = []
    for row in rows:
        j = by_id[str(row["question_id"])]
        extra = {"judge": j.j, "judge_verdicts": list(j.scores)} if j.judged else {"judge": None, "judge_rule": j.j}
        out.append({**row, **extra})
    return out


def judge_detail(run: JudgeRun) -> dict[str, Any]:
    """judge.json: the config, the figures, and every stress item with the judge's mean verdict on it."""
    plan = run.plan
    items = [{**asdict(i), "score": run.stress_scores.get(i.item_id)} for i in plan.items]
    return {"config": asdict(run.cfg), "metrics": judge_metrics(run), "warnings": list(run.warnings),
            "rates": {k: asdict(r) for k, r in run.rates.items()}, "usage": asdict(run.usage),
            "stress": {"seed": run.cfg.stress_seed, "size": run.cfg.stress_size, "pool": plan.pool,
                       "skipped": dict(plan.skipped), "dropped": dict(plan.dropped), "items": items}}


# --- the printed table ---------------------------------------------------------------------------------------
def _fmt(v: Any) -> str:
    return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def _f1_keys(bench_name: str, category: str | None) -> str:
    """The scorer's F1 key of a category (None: overall, LoCoMo's over categories 1-4)."""
    if bench_name == "locomo":
        return "f1_cat1_4" if category is None else f"f1_cat{category}"
    return "f1" if category is None else f"f1_{category}"


def stress_line(run: JudgeRun) -> str:
    """The stress test's result in one line (the warnings, when any, follow it)."""
    parts = []
    for kind in KINDS:
        r = run.rates.get(kind)
        parts.append(f"{KIND_NAMES[kind]}: none could be built" if r is None else
                     f"{_pct(r.rate)} of {KIND_NAMES[kind]} (n={r.n}, {_pct(run.cfg.ci_level)} CI "
                     f"{_pct(r.ci_low)}-{_pct(r.ci_high)})")
    return f"judge stress test (seed {run.cfg.stress_seed}): accepted " + "; ".join(parts)


def _j_table(bench_name: str, metrics: Mapping[str, Any], run: JudgeRun) -> Any:
    """Per category: questions, F1 and J side by side (a category the judge does not grade shows its rule)."""
    from rich.table import Table

    s, names = run.summary, category_names(bench_name)
    t = Table(title=f"J, LLM judge: protocol {s.protocol}, {run.cfg.model}, {run.cfg.runs} run(s) per answer")
    for col, justify in (("category", "left"), ("n", "right"), ("F1", "right"), ("J", "right")):
        t.add_column(col, justify=justify)  # type: ignore[arg-type]
    for cat in sorted({*s.j_by_category, *s.unjudged}):
        n = s.n_by_category.get(cat, s.n_unjudged.get(cat))
        j = _fmt(s.j_by_category[cat]) if cat in s.j_by_category else f"not judged (rule {_fmt(s.unjudged[cat])})"
        t.add_row(f"{cat} {names.get(cat, '')}".strip(), _fmt(n), _fmt(metrics.get(_f1_keys(bench_name, cat))), j)
    judged = "categories 1-4" if bench_name == "locomo" else "all"
    t.add_row(f"overall ({judged})", _fmt(s.n), _fmt(metrics.get(_f1_keys(bench_name, None))), _fmt(s.j), style="bold")
    return t


def render_judge_table(bench_name: str, metrics: Mapping[str, Any], run: JudgeRun) -> str:
    """J beside F1, then length, agreement with F1, the stress test's line and its warnings."""
    from io import StringIO

    from rich.console import Console

    buf = StringIO()
    console = Console(file=buf, width=TABLE_WIDTH, force_terminal=False)
    console.print(_j_table(bench_name, metrics, run))
    s = run.summary
    if s.length is not None:
        console.print(f"answers {s.length.answer_words:.1f} words, gold {s.length.gold_words:.1f}: "
                      f"length ratio {s.length.ratio:.2f}x (limit {run.cfg.max_length_ratio:g}x)", markup=False, soft_wrap=True)
    if s.agreement is not None:
        kappa = "undefined" if s.agreement.kappa is None else f"{s.agreement.kappa:.2f}"
        console.print(f"judge agrees with F1 >= {run.cfg.f1_pass:g} on {_pct(s.agreement.agreement)} of "
                      f"{s.agreement.n} questions (Cohen's kappa {kappa})", markup=False, soft_wrap=True)
    console.print(stress_line(run), markup=False, soft_wrap=True)
    for line in run.warnings:
        console.print(line, markup=False, soft_wrap=True)
    return buf.getvalue().rstrip()


# --- the step --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class JudgedEval:
    """What an evaluation looks like once judged: its metrics and table, and the judging itself."""

    metrics: dict[str, Any]
    table: str
    run: JudgeRun


def judge_scored_run(client: Any, cfg: JudgeConfig, bench: Benchmark, run_dir: Path, metrics: Mapping[str, Any],
                     table: str) -> JudgedEval:
    """Judge a scored evaluation in ``run_dir`` (the scorer's ``metrics`` and ``table``) and write what it gains,
    every file atomically. Run again, it asks only what ``judge.jsonl`` lacks and writes the same files."""
    run_dir = Path(run_dir)
    rows = read_rows(run_dir)
    run = judge_answers(client, cfg, bench, rows, run_dir / JUDGE_CACHE)
    merged = with_objective({**metrics, **judge_metrics(run)})
    text = table.rstrip() + "\n" + render_judge_table(bench.name, merged, run)
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in judged_prediction_rows(rows, run.rows))
    atomic_write_text(run_dir / PREDICTIONS, lines)
    atomic_write_json(run_dir / "metrics.json", merged)
    atomic_write_text(run_dir / "table.txt", text + "\n")
    atomic_write_json(run_dir / JUDGE_FILE, judge_detail(run))
    return JudgedEval(merged, text, run)


__all__ = ["JUDGE_CACHE", "JUDGE_FILE", "JudgeRun", "JudgedEval", "answers_and_f1",
           "judge_answers", "judge_detail", "judge_metrics", "judge_scored_run", "judged_prediction_rows",
           "protocol_for", "read_rows", "render_judge_table", "stress_line", "with_objective"]
