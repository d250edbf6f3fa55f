"""Overhead of the LLM gateway per reader call.

Three processes, as in a real evaluation: the OpenAI-protocol test server
(tests/support/openai_server.py, 127.0.0.1) stands in for the model server, this
process runs :class:`research.gateway.service.LLMGateway` (Unix socket, with a budget and
a price table, no cache) like the research loop does, and a worker process runs the
real :class:`memsys.llm.client.LLMClient` like a sandboxed reader. The worker
alternates a direct call (client -> test server) and a routed one (client ->
gateway -> test server) so both see the same machine state; the overhead is the
per-iteration difference of the two latencies. The gateway's own counter (time in
the gateway, upstream wait excluded) is reported next to it. Target: < 2 ms at p50.

    .venv/bin/python -m research.perf.bench_gateway [--calls 300] [--warmup 30]

Writes ``runs/bench/gateway.json`` (under $MEMSYS_RUNS_DIR when set).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET_P50_MS = 2.0
REPO = Path(__file__).resolve().parents[2]
MESSAGES = [{"role": "system", "content": "Answer from the memory context. " * 20},
            {"role": "user", "content": "When did Caroline go to the LGBTQ support group? " * 5}]

# The stdlib test server writes headers and body in two sends with Nagle on, so a reply can
# stall on the client's delayed ACK (up to 40 ms) on *both* paths; real servers do not, and the
# stalls would drown the difference measured here. Switched off in the server process only.
_UPSTREAM = """
import sys
from tests.support import openai_server as module
module._OpenAIRequestHandler.disable_nagle_algorithm = {nodelay}
with module.OpenAITestServer() as server:
    print(server.base_url, flush=True)
    sys.stdin.read()  # until the parent closes our stdin
"""


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _stats_ms(values_s: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values_s]
    return {"p50": _pct(ms, 0.50), "p95": _pct(ms, 0.95), "mean": statistics.fmean(ms), "min": min(ms), "max": max(ms)}


def worker(direct_url: str, socket_path: str, calls: int, warmup: int) -> dict[str, list[float]]:
    """The reader side: latencies of direct and gateway-routed calls, alternating."""
    from memsys.config import LLMConfig
    from memsys.llm.client import GATEWAY_SOCKET_ENV, LLMClient

    cfg = LLMConfig(backend="openai", model="test-model", base_url=direct_url, api_key_env="MEMSYS_BENCH_NO_KEY",
                    cache=False, max_retries=0, timeout_s=30.0, max_tokens=64)
    os.environ.pop(GATEWAY_SOCKET_ENV, None)
    direct = LLMClient(cfg)
    os.environ[GATEWAY_SOCKET_ENV] = socket_path  # read at construction, as in the sandbox
    routed = LLMClient(cfg)
    times: dict[str, list[float]] = {"direct": [], "gateway": []}
    with direct, routed:
        for _ in range(warmup):
            direct.chat(MESSAGES)
            routed.chat(MESSAGES)
        for i in range(calls):
            pair = [("direct", direct), ("gateway", routed)]
            for name, client in pair if i % 2 == 0 else reversed(pair):  # alternate the order
                started = time.perf_counter()
                client.chat(MESSAGES)
                times[name].append(time.perf_counter() - started)
    return times


def run(calls: int = 300, warmup: int = 30, nodelay_upstream: bool = True) -> dict[str, Any]:
    from harness.llm_budget import Budget
    from memsys.tokens import count_tokens
    from research.gateway.service import LLMGateway

    count_tokens("load the tokenizer now")  # once per process (~0.2 s), not in the first call's overhead
    load_start = os.getloadavg()[0]  # the machine may be shared: both ends of the run are recorded

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    upstream = subprocess.Popen([sys.executable, "-c", _UPSTREAM.format(nodelay=nodelay_upstream)], cwd=REPO, env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        base_url = upstream.stdout.readline().strip()  # type: ignore[union-attr]
        if not base_url:
            raise RuntimeError("the test server process did not start")
        with tempfile.TemporaryDirectory(prefix="gwbench-") as tmp:
            socket_path = Path(tmp) / "llm.sock"
            budget = Budget(max_tokens=10**12, max_usd=10**6)
            with LLMGateway(base_url, socket_path=socket_path, api_key="sk-bench", model="test-model",
                            budget=budget, price_input_per_1m=0.15, price_output_per_1m=0.6) as gateway:
                worker_argv = [sys.executable, "-m", "research.perf.bench_gateway", "--worker", base_url,
                               str(socket_path), "--calls", str(calls), "--warmup", str(warmup)]
                proc = subprocess.run(worker_argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
                if proc.returncode != 0:
                    raise RuntimeError(f"bench worker failed: {proc.stderr.strip().splitlines()[-1:]}")
                usage = gateway.usage()
                upstream_client = "http.client" if gateway._pool is not None else "httpx (environment proxy)"
    finally:
        upstream.stdin.close()  # type: ignore[union-attr]
        upstream.wait(timeout=10)
    times = json.loads(proc.stdout.strip().splitlines()[-1])
    t_direct, t_gateway = times["direct"], times["gateway"]
    diffs = [g - d for g, d in zip(t_gateway, t_direct)]
    return {
        "calls": calls,
        "warmup": warmup,
        "upstream_tcp_nodelay": nodelay_upstream,
        "upstream_client": upstream_client,  # the gateway's upstream leg (httpx only behind a proxy)
        "direct_ms": _stats_ms(t_direct),
        "gateway_ms": _stats_ms(t_gateway),
        "overhead_ms": _stats_ms(diffs) | {"p50_of_latencies": (_pct(t_gateway, 0.5) - _pct(t_direct, 0.5)) * 1000},
        # warm-up calls included: the counter covers every request this gateway answered
        "gateway_internal_overhead_ms_mean": usage.overhead_per_request_s * 1000,
        "gateway_usage": usage.to_dict(),
        "target_p50_ms": TARGET_P50_MS,
        "meets_target": _pct(diffs, 0.5) * 1000 < TARGET_P50_MS,
        "machine": {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
                    "loadavg_1m_start": load_start, "loadavg_1m": os.getloadavg()[0]},
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def print_table(result: dict[str, Any], path: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"LLM gateway overhead per reader call ({result['calls']} sequential calls)")
    for col in ("path", "p50 ms", "p95 ms", "mean ms"):
        table.add_column(col, justify="left" if col == "path" else "right")
    for label, key in (("direct (TCP)", "direct_ms"), ("via gateway (UDS)", "gateway_ms"),
                       ("overhead (paired diff)", "overhead_ms")):
        s = result[key]
        table.add_row(label, f"{s['p50']:.3f}", f"{s['p95']:.3f}", f"{s['mean']:.3f}")
    table.add_row("gateway internal (counter)", "", "", f"{result['gateway_internal_overhead_ms_mean']:.3f}")
    console = Console()
    console.print(table)
    verdict = "meets" if result["meets_target"] else "MISSES"
    machine = result["machine"]
    console.print(f"p50 overhead {result['overhead_ms']['p50']:.3f} ms {verdict} the < {TARGET_P50_MS:g} ms target "
                  f"(upstream via {result['upstream_client']}; load avg {machine['loadavg_1m_start']:.1f} -> "
                  f"{machine['loadavg_1m']:.1f} on {machine['cpus']} cpus); wrote {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--out", type=Path, default=None, help="default: runs/bench/gateway.json")
    parser.add_argument("--nagle-upstream", action="store_true",
                        help="leave Nagle on in the test server (its delayed-ACK stalls then hit both paths)")
    parser.add_argument("--worker", nargs=2, metavar=("DIRECT_URL", "SOCKET"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.worker[1], args.calls, args.warmup)))
        return 0
    from memsys.paths import runs_dir
    from memsys.store.atomic import atomic_write_json

    result = run(args.calls, args.warmup, nodelay_upstream=not args.nagle_upstream)
    path = args.out or runs_dir() / "bench" / "gateway.json"
    atomic_write_json(path, result)  # temp file in the same folder, fsync, os.replace
    print_table(result, path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
