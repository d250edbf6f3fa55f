"""Fault injection through the real research loop: is each failure classified, healed, charged right?

Why: self-healing (docs/design.md section 4) is only worth its code if a failed experiment is
classified as what it is, gets its targeted fix, and infrastructure failures never count
against the agent. This drives the REAL ``ResearchLoop`` (git worktrees in a throwaway copy of
this repo, ``benchmarks.cli eval`` in the sandbox, LoCoMo tiny sample) with a scripted
OpenAI-protocol server playing the researcher (and, for the endpoint faults, the reader).
Each scripted proposal injects one fault with SEARCH/REPLACE edits of
``memsys/retrieve/merge.py`` (``merge_set_union`` runs for every question: the ``naive``
preset merges ``dense_only``, which calls it):

==================  ============================================================  ==========
class               injection                                                     loop
==================  ============================================================  ==========
syntax_error        ``def broken(:`` at module top                                reader=none
runtime_error       ``raise RuntimeError("injected fault")`` in merge_set_union   reader=none
dependency          ``import injected_missing_module_xyz`` at module top          reader=none
format_mismatch     ``os._exit(0)`` in merge_set_union (no result file)           reader=none
oom (oom_killed)    ``bytearray(64 GiB)`` in merge_set_union, memory_gb limit     reader=none
timeout             ``time.sleep(10**6)`` in merge_set_union, short wall timeout  reader=none
forbidden_edit      an edit of the scorer benchmarks/metrics/locomo.py            reader=none
invalid_proposal    the researcher's reply is not JSON (fails at propose)         reader=none
auth                the reader endpoint answers 403                               reader=llm
rate_limit          the reader endpoint answers 429, always                       reader=llm
api_error           the reader endpoint answers 500, always                       reader=llm
==================  ============================================================  ==========

When the loop asks for a repair (the prompt contains "Your last change failed") the server
returns the inverse edit (SEARCH the injected text, REPLACE with the original), so repairable
classes can heal. Researcher and reader calls are told apart by the system message.

Per class: injected, classified correctly (``record.failure["cls"]`` or the first healing
entry's ``failure`` equals the class), healing actions, healed (an objective value after at
least one healing entry), infrastructure, and counted as a degradation (measured on the loop
state: a failed experiment raised the consecutive degradations or forced a pivot; an evaluated one
degraded the metric). One loop per reader mode, so two baselines.

    python -m research.perf.bench_healing [--n 2] [--wall-timeout 90] [--memory-gb 3]
        [--only runtime_error,auth] [--out runs/bench/healing.json] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from research.workspace.repo import make_scratch_repo

if __package__ in (None, ""):  # run as a file: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.paths import cache_dir  # noqa: E402
from research.proposers.llm import PROMPTS  # noqa: E402
from tests.support.openai_server import OpenAITestServer, Reply  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
MERGE = "memsys/retrieve/merge.py"
SCORER = "benchmarks/metrics/locomo.py"
TOP = "from __future__ import annotations\n"  # once, at the top of merge.py
SEARCH_PATH = "    order = [pos for pos, _ in dense]\n"  # inside merge_set_union
REPAIR_MARK = "Your last change failed"
DUPLICATE_MARK = "this exact change was already tried"  # the loop re-asks for a repeated proposal
#: how a researcher request is recognised (the reader's system prompt is memsys.answer's)
RESEARCHER_SYSTEM = (PROMPTS / "researcher_system.txt").read_text(encoding="utf-8").strip().splitlines()[0]
HEALED_DECISIONS = ("proceed", "iterate", "pivot")


@dataclass
class Injection:
    name: str  # row of the table
    expected: str  # the FailureClass value it should be classified as
    group: str  # "none" | "llm" (reader mode of the loop it runs in)
    proposal: dict[str, Any] | str  # a str is sent verbatim (not JSON)
    repair: dict[str, Any] | None = None
    reader_status: int | None = None  # the reader endpoint's answer while this experiment runs
    # filled by the run
    experiment_id: str = ""
    repair_requests: int = 0
    result: dict[str, Any] = field(default_factory=dict)


def _proposal(name: str, edits: list[dict[str, str]], overrides: list[str] | None = None,
              dtype: str = "bug_fix") -> dict[str, Any]:
    return {"hypothesis": f"[fault injection: {name}] change the merge", "discovery_type": dtype,
            "expected_effect": "none (injected fault)", "config_overrides": overrides or [], "edits": edits}


def _code_fault(name: str, expected: str, code: str, at_top: bool, repairable: bool) -> Injection:
    anchor = TOP if at_top else SEARCH_PATH
    injected = (TOP + "\n" + code + "\n") if at_top else ("    " + code + "\n" + SEARCH_PATH)
    edit = {"path": MERGE, "search": anchor, "replace": injected}
    repair = _proposal(name, [{"path": MERGE, "search": injected, "replace": anchor}]) if repairable else None
    return Injection(name, expected, "none", _proposal(name, [edit]), repair)


def injections(rep: int = 0) -> list[Injection]:
    """One fresh injection per class for repetition ``rep`` (fresh objects: each run fills its own).

    Every repetition's change differs (a tag comment, another top_k): the loop re-asks the
    researcher when a proposal repeats one already tried from the same best commit.
    """
    tag = f"  # injection {rep + 1}"
    llm_prop = lambda name, k: _proposal(name, [], [f"retrieval.top_k={k}"], "hyperparameter_tuning")  # noqa: E731
    return [
        _code_fault("syntax_error", "syntax_error", f"def broken(:{tag}\n    pass", at_top=True, repairable=True),
        _code_fault("runtime_error", "runtime_error", f'raise RuntimeError("injected fault"){tag}', at_top=False,
                    repairable=True),
        _code_fault("dependency", "dependency", f"import injected_missing_module_xyz{tag}", at_top=True,
                    repairable=True),
        _code_fault("format_mismatch", "format_mismatch", f"import os; os._exit(0){tag}", at_top=False,
                    repairable=True),
        _code_fault("oom", "oom_killed", f"_x = bytearray(64 * 2**30){tag}", at_top=False, repairable=True),
        _code_fault("timeout", "timeout", f"import time; time.sleep(10**6){tag}", at_top=False, repairable=True),
        Injection("forbidden_edit", "forbidden_edit", "none",
                  _proposal("forbidden_edit", [{"path": SCORER, "search": "", "replace": f"# owned{tag}\n"}],
                            dtype="evaluation_format_alignment")),
        Injection("invalid_proposal", "format_mismatch", "none", "I think we should raise top_k. {not json"),
        Injection("auth", "auth", "llm", llm_prop("auth", 6 + 3 * rep), reader_status=403),
        Injection("rate_limit", "rate_limit", "llm", llm_prop("rate_limit", 7 + 3 * rep), reader_status=429),
        Injection("api_error", "api_error", "llm", llm_prop("api_error", 8 + 3 * rep), reader_status=500),
    ]


class Script:
    """The server's rule-based handler: researcher proposals/repairs in order, reader replies."""

    def __init__(self) -> None:
        self.queue: list[Injection] = []
        self.current: Injection | None = None
        self.lock = threading.Lock()
        self.unexpected = 0
        self.duplicate_reasks = 0

    def load(self, items: list[Injection]) -> None:
        with self.lock:
            self.queue, self.current = list(items), None

    def __call__(self, body: dict[str, Any]) -> Reply:
        msgs = body.get("messages") or []
        system = msgs[0].get("content", "") if msgs and msgs[0].get("role") == "system" else ""
        user = msgs[-1].get("content", "") if msgs else ""
        with self.lock:
            if isinstance(system, str) and system.startswith(RESEARCHER_SYSTEM):
                if DUPLICATE_MARK in user:  # not JSON: the loop keeps the original proposal
                    self.duplicate_reasks += 1
                    return Reply.ok("UNSCRIPTED duplicate re-ask")
                if REPAIR_MARK in user:
                    inj = self.current
                    if inj is None or inj.repair is None:
                        self.unexpected += 1
                        return Reply.ok("UNSCRIPTED repair")
                    inj.repair_requests += 1
                    return Reply.of_json(inj.repair)
                if not self.queue:
                    self.unexpected += 1
                    return Reply.ok("UNSCRIPTED proposal")
                self.current = self.queue.pop(0)
                p = self.current.proposal
                return Reply.ok(p) if isinstance(p, str) else Reply.of_json(p)
            inj = self.current  # a reader call (the answer prompt's system message)
            if inj is not None and inj.reader_status:
                return Reply.error(inj.reader_status, f"injected HTTP {inj.reader_status}")
            return Reply.ok("I do not know.")


def _git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", *args], cwd=repo,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def run_group(group: str, items: list[Injection], repo: Path, server: OpenAITestServer, script: Script,
              args: argparse.Namespace, sandbox: Any) -> dict[str, Any]:
    from research.config import load_run_setup
    from research.loop.research_loop import ResearchLoop

    overrides = [
        f"reader={group}", "sample=tiny", "mlflow=false", "workers=2", "research.proposer=llm",
        f"research.repo={repo}", f"research.budget.experiments={len(items)}", "research.budget.wall_time_s=1000000",
        "research.loop.smoke_sample=null", "research.loop.max_pivots=1000", "research.loop.ceiling_window=1000",
        "research.sandbox.backend=auto", f"research.sandbox.wall_timeout_s={args.wall_timeout}",
        f"research.sandbox.memory_gb={args.memory_gb}",
        "llm=openai", f"llm.base_url={server.base_url}", "llm.model=scripted", "++llm.cache=false",
        "++llm.max_retries=0", "++llm.timeout_s=30",
    ]
    setup = load_run_setup(overrides)
    script.load(items)
    by_exp: dict[str, Injection] = {}
    snap: dict[str, tuple[int, int]] = {}
    holder: list[Any] = []

    def on_event(kind: str, data: dict[str, Any]) -> None:
        st = holder[0].state
        if kind == "propose":
            snap[data["experiment"]] = (st.consecutive_degradations, st.pivots)
        elif kind == "experiment":
            rec = data["record"]
            if rec.index == 0:
                return
            inj = script.current
            if inj is None or inj.experiment_id:
                return
            inj.experiment_id = rec.experiment_id
            by_exp[rec.experiment_id] = inj
            before = snap.get(rec.experiment_id, (0, 0))
            if rec.objective_value is None:  # failed/rejected: charged by _count_failure (maybe with a pivot)
                degraded = st.consecutive_degradations > before[0] or st.pivots > before[1]
            else:  # evaluated: the decision rule saw a worse metric (not an iteration-cap pivot)
                degraded = (st.consecutive_degradations > before[0]
                            or (rec.decision == "pivot" and "consecutive degradations" in rec.notes))
            inj.result = summarize(inj, rec, degraded)
            print(f"  {rec.experiment_id} {inj.name:17s} -> {inj.result['decision']:8s} "
                  f"class={inj.result['observed_class']} actions={inj.result['actions']} "
                  f"healed={inj.result['healed']} ({rec.durations.get('total_s', 0):.0f}s)", flush=True)

    run_id = f"heal-{group}"
    loop = ResearchLoop(setup, run_id, sandbox=sandbox, on_event=on_event)
    holder.append(loop)
    t0 = time.perf_counter()
    st = loop.run()
    base = loop.records[0] if loop.records else None
    return {"run_id": run_id, "wall_s": round(time.perf_counter() - t0, 1), "stop_reason": st.stop_reason,
            "baseline": None if base is None else {"objective": base.objective, "value": base.objective_value,
                                                   "eval_s": round(base.durations.get("eval_s", 0.0), 1),
                                                   "failure": base.failure},
            "experiments": len(by_exp)}


def summarize(inj: Injection, rec: Any, degraded: bool) -> dict[str, Any]:
    f = rec.failure or {}
    heal = [e for e in rec.healing if isinstance(e, dict)]
    first = next((e.get("failure") for e in heal if e.get("failure")), None)
    observed = f.get("cls") or first
    return {
        "experiment_id": rec.experiment_id,
        "decision": rec.decision,
        "observed_class": observed,
        "classified_correctly": f.get("cls") == inj.expected or first == inj.expected,
        "stage": f.get("stage", "evaluate" if f else None),
        "infrastructure": bool(f.get("is_infrastructure")) if f else None,
        "actions": [e.get("action") for e in heal],
        "healing": heal,
        "repair_requests": inj.repair_requests,
        "healed": bool(heal) and rec.decision in HEALED_DECISIONS and rec.objective_value is not None,
        "objective_value": rec.objective_value,
        "counted_as_degradation": degraded,
        "message": (f.get("message") or "")[:200],
        "notes": rec.notes[:200],
        "total_s": round(rec.durations.get("total_s", 0.0), 1),
        "eval_s": round(rec.durations.get("eval_s", 0.0), 1),
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = ["class", "injected", "classified", "healing actions", "healed", "infra", "degradation", "wall s"]
    body = [[r["class"], str(r["injected"]), f"{r['classified_correctly']}/{r['injected']}",
             ", ".join(f"{a} x{n}" for a, n in r["healing_actions"].items()) or "-",
             f"{r['healed']}/{r['injected']}", "/".join(sorted({str(x) for x in r["infrastructure"]})),
             f"{r['counted_as_degradation']}/{r['injected']}", f"{r['wall_s']:.0f}"] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths]), *map(line, body)])


def class_rows(known: list[str], items: list[Injection]) -> list[dict[str, Any]]:
    """One row per injected class, in catalogue order: what was classified, healed and decided."""
    rows = []
    for name in known:
        mine = [i for i in items if i.name == name]
        if not mine:
            continue
        res = [i.result for i in mine if i.result]
        rows.append({
            "class": name, "expected_class": mine[0].expected, "injected": len(mine),
            "ran": len(res),
            "classified_correctly": sum(r["classified_correctly"] for r in res),
            "observed_classes": dict(Counter(str(r["observed_class"]) for r in res)),
            "healing_actions": dict(Counter(a for r in res for a in r["actions"])),
            "healed": sum(r["healed"] for r in res),
            "decisions": dict(Counter(r["decision"] for r in res)),
            "infrastructure": sorted({r["infrastructure"] for r in res}, key=str),
            "counted_as_degradation": sum(r["counted_as_degradation"] for r in res),
            "wall_s": round(sum(r["total_s"] for r in res), 1),
            "runs": res,
        })
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=2, help="injections per class (default 2)")
    ap.add_argument("--wall-timeout", type=float, default=90.0, help="research.sandbox.wall_timeout_s")
    ap.add_argument("--memory-gb", type=float, default=3.0, help="research.sandbox.memory_gb")
    ap.add_argument("--only", default="", help="comma-separated class names (default: all)")
    ap.add_argument("--out", default=str(REPO / "runs" / "bench" / "healing.json"))
    ap.add_argument("--keep", action="store_true", help="keep the temp repo and run folders")
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    known = [i.name for i in injections()]
    unknown = sorted(set(names) - set(known))
    if unknown:
        ap.error(f"unknown class(es) {', '.join(unknown)}; known: {', '.join(known)}")

    # stores are cached by content hash: keep using the shared cache, put everything else in a temp dir
    os.environ.setdefault("MEMSYS_CACHE_DIR", str(cache_dir()))
    work = Path(tempfile.mkdtemp(prefix="bench-healing-"))
    os.environ["MEMSYS_RUNS_DIR"] = str(work / "runs")
    from sandbox import make_sandbox

    sandbox = make_sandbox("auto")
    started = time.perf_counter()
    all_items: list[Injection] = []
    groups: dict[str, Any] = {}
    script = Script()
    try:
        repo = make_scratch_repo(work / "repo")
        with OpenAITestServer(script) as server:
            for group in ("none", "llm"):
                items = [inj for rep in range(args.n) for inj in injections(rep)
                         if inj.group == group and (not names or inj.name in names)]
                if not items:
                    continue
                print(f"loop reader={group}: {len(items)} injections (sandbox {sandbox.name})", flush=True)
                groups[group] = run_group(group, items, repo, server, script, args, sandbox)
                all_items += items
    finally:
        if args.keep:
            print(f"kept {work}", flush=True)
        else:
            shutil.rmtree(work, ignore_errors=True)

    rows = class_rows(known, all_items)
    report = {
        "bench": "healing", "n_per_class": args.n, "wall_timeout_s": args.wall_timeout,
        "memory_gb": args.memory_gb, "sandbox": sandbox.name, "sample": "tiny", "preset": "naive",
        "host": {"python": platform.python_version(), "cpus": os.cpu_count(), "machine": platform.machine()},
        "total_wall_s": round(time.perf_counter() - started, 1),
        "unexpected_llm_requests": script.unexpected, "duplicate_reasks": script.duplicate_reasks,
        "loops": groups, "classes": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, default=str) + "\n", encoding="utf-8")
    print(json.dumps({k: v for k, v in report.items() if k != "classes"}, indent=2, default=str))
    print(table(rows))
    print(f"total wall time {report['total_wall_s']:.0f} s; written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
