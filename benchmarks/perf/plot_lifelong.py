"""Growth plot of the lifelong benchmark: planted recall@20 and retrieval latency vs haystack size.

Usage: ``python benchmarks/perf/plot_lifelong.py runs/bench/lifelong_small.json runs/bench/lifelong_1m.json
--out docs/lifelong_growth.png`` (reads the ``lifelong`` section of every JSON given).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--out", default="docs/lifelong_growth.png")
    args = ap.parse_args()
    by_size = {p["size"]: p for f in args.inputs for p in json.loads(Path(f).read_text()).get("lifelong", [])}
    points = [by_size[s] for s in sorted(by_size)]  # a later file's point replaces an earlier one of its size
    sizes = [p["size"] for p in points]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    rankings = [("set_union", "set-union", "tab:blue")]
    if all("recall_at_20_by_ranking" in p["unscoped"] for p in points):  # runs since session 8 rank as omni too
        rankings.append(("rrf_speaker_first", "omni (RRF + speaker first)", "tab:orange"))
    for key, name, color in rankings:
        def recall(part: dict) -> float:
            return part.get("recall_at_20_by_ranking", {}).get(key, part["evidence_recall_at_20"])
        ax1.plot(sizes, [recall(p["unscoped"]) for p in points], "o-", color=color, label=f"{name}: in the haystack")
        ax1.plot(sizes, [recall(p["scoped_to_planted"]) for p in points], "s--", color=color, alpha=0.6,
                 label=f"{name}: scoped to it")
        ax1.plot(sizes, [recall(p["alone"]) for p in points], ":", color=color, label=f"{name}: stored alone")
    ax1.set(xscale="log", xlabel="MAUs in the store", ylabel="evidence recall@20",
            title="Planted LoCoMo conversation")
    ax1.legend(fontsize=7)
    ax2.plot(sizes, [p["unscoped"]["p50_ms"] for p in points], "o-", label="p50")
    ax2.plot(sizes, [p["unscoped"]["p95_ms"] for p in points], "s--", label="p95")
    ax2.set(xscale="log", yscale="log", xlabel="MAUs in the store", ylabel="ms (query embedding excluded)",
            title="Hybrid retrieval latency (2 cores)")
    ax2.legend()
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(args.out)


if __name__ == "__main__":
    main()
