"""How far the LLM judge can be fooled, and what a verdict costs, on this machine: the judge's stress test on a
fixed sample.

Why: a J is only comparable with another under the same judge and the same false-accept rates (docs/judge.md),
and on a CPU model every judge call is seconds. This runs the stress test of ``benchmarks.judge.stress`` (known-
wrong answers built from the gold: vague-but-topical, specific-but-wrong; ``stress_size`` per kind, stratified by
category, ``stress_seed``) against one judge endpoint and writes:

- the false-accept rate of each kind with its Wilson interval, and the warning lines J would be printed with;
- seconds per judge call (mean, median, p90) and prompt / completion tokens (total and per call), over the calls
  asked in this run (calls answered from the verdict cache are counted apart, never timed);
- the construction's counts (pool, skipped, dropped) and the judge config.

The judge is the trusted config's (``configs/judge/<name>.yaml``, Hydra-style overrides): by default the embedded
model (``judge.endpoint=local``, started as benchmarks/perf/bench_llm.py starts it), or any OpenAI-compatible
server with ``judge.base_url=... judge.model=...`` (key from ``--api-key-env``). Verdicts go to a resumable cache
(``--cache``), so a killed run continues where it stopped.

Usage::

    python benchmarks/perf/bench_judge.py judge=lenient                          # 40 per kind, 3 runs each
    python benchmarks/perf/bench_judge.py judge=strict judge.stress_size=2 judge.runs=1 --out /tmp/j.json  # smoke
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # runnable as a plain script

from benchmarks.judge.ask import VerdictCache, ask_judge, judge_requests  # noqa: E402
from benchmarks.judge.config import JudgeConfig  # noqa: E402
from benchmarks.judge.protocol import JudgeReplyError, Verdict, get_protocol, parse_verdict  # noqa: E402
from benchmarks.judge.score import mean_scores  # noqa: E402
from benchmarks.judge.stress import (  # noqa: E402
    KINDS,
    StressPlan,
    false_accept_rates,
    gold_accept_rate,
    gold_controls,
    names_by_conversation,
    stress_judge_items,
    stress_judgements,
    stress_plan,
    stress_warnings,
)
from harness.bench_output import command, load_average, utc_now, write_result  # noqa: E402
from harness.errors import ConfigError  # noqa: E402
from harness.paths import runs_dir  # noqa: E402

#: the key sent to a server that needs none (the embedded one, a loopback test server)
PLACEHOLDER_KEY = "sk-none"
#: percentile of the per-call seconds reported beside the median
TAIL_PERCENTILE = 90


class TimedClient:
    """An OpenAI SDK client whose chat calls are timed, with the usage each reply reports (what ask_judge calls)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.seconds: list[float] = []
        self.prompt_tokens: list[int] = []
        self.completion_tokens: list[int] = []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    def _create(self, **params: Any) -> Any:
        started = time.perf_counter()
        completion = self.client.chat.completions.create(**params)
        self.seconds.append(time.perf_counter() - started)
        used = getattr(completion, "usage", None)
        self.prompt_tokens.append(int(getattr(used, "prompt_tokens", 0) or 0))
        self.completion_tokens.append(int(getattr(used, "completion_tokens", 0) or 0))
        return completion


def load_setup(overrides: Sequence[str]) -> Any:
    """The trusted eval setup with its judge (configs/judge/<name>.yaml and the overrides)."""
    from benchmarks.config import load_eval_setup

    setup = load_eval_setup(["reader=llm", "mlflow=false", *overrides])
    if setup.judge is None:
        raise ConfigError("name a judge: judge=lenient | strict (LoCoMo) | memgallery")
    return setup


def _endpoint_llm(cfg: JudgeConfig) -> Any:
    """The llm config group the judge names (configs/llm/<endpoint>.yaml)."""
    from memsys.config import LLMConfig, compose, validate

    return validate(LLMConfig, compose("eval", [f"llm={cfg.endpoint}"]).llm, where=f"llm={cfg.endpoint}")


def open_judge(stack: ExitStack, cfg: JudgeConfig, api_key_env: str | None) -> tuple[Any, str]:
    """An OpenAI SDK client to the judge and its base URL: ``judge.base_url``, else the endpoint group (the embedded
    server is started here for ``local`` and stopped with ``stack``)."""
    import openai

    llm = _endpoint_llm(cfg)
    base_url = cfg.base_url or llm.base_url
    if not cfg.base_url and llm.backend == "local":
        from memsys.llm.local import shared_server

        base_url = stack.enter_context(shared_server(llm.local, alias=cfg.model)).base_url
    key = os.environ.get(api_key_env or llm.api_key_env) or PLACEHOLDER_KEY
    client = openai.OpenAI(base_url=base_url, api_key=key, timeout=llm.timeout_s, max_retries=llm.max_retries)
    stack.callback(client.close)
    return client, str(base_url)


def stress_sample(setup: Any) -> StressPlan:
    """The fixed sample: the split's questions, ``stress_size`` items per kind drawn with ``stress_seed``."""
    from benchmarks.datasets import load_benchmark
    from benchmarks.splits import select

    ev, cfg = setup.options, setup.judge
    bench = select(load_benchmark(setup.benchmark.name), ev.split, ev.sample, setup.benchmark)
    return stress_plan(list(bench.questions), names_by_conversation(bench.conversations), cfg.stress_seed,
                       cfg.stress_size)


def readable_verdicts(cfg: JudgeConfig, plan: StressPlan, cache_path: Path) -> tuple[list[Verdict], list[str]]:
    """The verdicts in the cache and the replies without one (a bench reports them; J would refuse them)."""
    protocol, cache = get_protocol(cfg.protocol), VerdictCache(cache_path)
    verdicts, unreadable = [], []
    for r in judge_requests(cfg, stress_judge_items(plan.items) + gold_controls(plan.items)):
        try:
            verdicts.append(Verdict(r.item_id, r.run, parse_verdict(protocol, cache.replies[r.key]), "", True, r.key))
        except (JudgeReplyError, KeyError):
            unreadable.append(f"{r.item_id} run {r.run}")
    return verdicts, unreadable


def _percentile(values: Sequence[float], q: int) -> float | None:
    if not values:
        return None
    value = statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]
    return round(value, 3)


def timing(client: TimedClient) -> dict[str, Any]:
    """Seconds per call and tokens, over the calls asked in this run."""
    n, secs = len(client.seconds), client.seconds
    per = (lambda total: round(total / n, 2)) if n else (lambda total: None)
    return {"calls_asked": n, "seconds_total": round(sum(secs), 2),
            "seconds_per_call": {"mean": round(statistics.fmean(secs), 3) if n else None,
                                 "median": round(statistics.median(secs), 3) if n else None,
                                 f"p{TAIL_PERCENTILE}": _percentile(secs, TAIL_PERCENTILE)},
            "tokens": {"prompt": sum(client.prompt_tokens), "completion": sum(client.completion_tokens),
                       "prompt_per_call": per(sum(client.prompt_tokens)),
                       "completion_per_call": per(sum(client.completion_tokens))}}


def measure(setup: Any, client: TimedClient, cache_path: Path) -> dict[str, Any]:
    """Ask the judge about every stress item (``runs`` times each) and read its false-accept rates."""
    cfg = setup.judge
    plan = stress_sample(setup)
    started = time.perf_counter()
    controls = gold_controls(plan.items)
    try:
        ask_judge(client, cfg, stress_judge_items(plan.items) + controls, cache_path)
    except JudgeReplyError:
        pass  # every reply is cached, readable or not: counted below
    wall = time.perf_counter() - started
    verdicts, unreadable = readable_verdicts(cfg, plan, cache_path)
    scores = mean_scores(verdicts)
    rates = false_accept_rates(stress_judgements(plan.items, scores), cfg.pass_score, cfg.ci_level)
    gold = gold_accept_rate(controls, scores, cfg.pass_score, cfg.ci_level)
    return {"gold_accept": asdict(gold) if gold else None,"items": {k: sum(i.kind == k for i in plan.items) for k in KINDS}, "pool": plan.pool,
            "skipped": dict(plan.skipped), "dropped": dict(plan.dropped),
            "false_accept": {k: asdict(r) for k, r in rates.items()}, "ci_level": cfg.ci_level,
            "warnings": stress_warnings(rates, cfg.max_false_accept, cfg.ci_level),
            "unreadable_replies": unreadable, "wall_s": round(wall, 2), **timing(client)}


def table(result: dict[str, Any]) -> str:
    """The markdown table beside the JSON."""
    lines = ["| kind | items | false-accept | CI |", "| --- | ---: | ---: | --- |"]
    for kind in KINDS:
        r = result["false_accept"].get(kind)
        lines.append(f"| {kind} | {result['items'][kind]} | " + ("- | - |" if r is None else
                     f"{100 * r['rate']:.0f}% ({r['k']}/{r['n']}) | {100 * r['ci_low']:.0f}%-{100 * r['ci_high']:.0f}% |"))
    g = result.get("gold_accept")
    if g:
        lines.append(f"| gold itself (control) | {g['n']} | accepted {100 * g['rate']:.0f}% ({g['k']}/{g['n']}) | "
                     f"{100 * g['ci_low']:.0f}%-{100 * g['ci_high']:.0f}% |")
    spc = result["seconds_per_call"]
    lines.append(f"\n{result['calls_asked']} calls asked, {spc['mean']} s per call (median {spc['median']}), "
                 f"tokens per call: {result['tokens']['prompt_per_call']} prompt, "
                 f"{result['tokens']['completion_per_call']} completion")
    return "\n".join(lines + result["warnings"])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="judge=lenient judge.stress_size=40 judge.runs=3 split=dev ...")
    parser.add_argument("--api-key-env", default=None, help="the variable holding the endpoint's key")
    parser.add_argument("--cache", default=None, help="verdict cache (default: next to --out); resumes a killed run")
    parser.add_argument("--out", default=str(runs_dir() / "bench" / "judge.json"))
    args = parser.parse_args(argv)
    setup = load_setup(args.overrides or ["judge=lenient"])
    cfg, out = setup.judge, Path(args.out)
    cache_path = Path(args.cache) if args.cache else out.with_suffix(".verdicts.jsonl")
    result: dict[str, Any] = {"bench": "judge_stress", "command": command("benchmarks.perf.bench_judge", argv),
                              "started": utc_now(), "load_average_before": load_average(),
                              "benchmark": setup.benchmark.name, "split": setup.options.split,
                              "sample": setup.options.sample, "judge": asdict(cfg), "cache": str(cache_path)}
    with ExitStack() as stack:
        started = time.perf_counter()
        client, base_url = open_judge(stack, cfg, args.api_key_env)
        result |= {"endpoint": base_url, "endpoint_ready_s": round(time.perf_counter() - started, 2)}
        result |= measure(setup, TimedClient(client), cache_path)
    result |= {"finished": utc_now(), "load_average_after": load_average()}
    write_result(out, result, table(result))
    return result


if __name__ == "__main__":
    main()
