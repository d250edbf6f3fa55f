"""benchmarks/perf/bench_judge.py against the OpenAI-protocol test server: the stress test's rates, seconds and
tokens per call in the JSON, and a second run answered from its verdict cache."""

from __future__ import annotations

import json

from benchmarks.perf import bench_judge
from tests.support.openai_server import OpenAITestServer, Reply


def test_the_bench_writes_rates_seconds_and_tokens_and_resumes(tmp_path, locomo_path):
    out = tmp_path / "judge.json"
    with OpenAITestServer(handler=lambda r: Reply.of_json({"label": "WRONG"})) as server:
        argv = ["judge=lenient", f"judge.base_url={server.base_url}", "judge.model=bench-judge",
                "judge.stress_size=3", "judge.runs=2", "sample=tiny", "--out", str(out)]
        result = bench_judge.main(argv)
        asked = len(server.chat_requests)
        again = bench_judge.main(argv)
        assert len(server.chat_requests) == asked  # the verdict cache beside --out answered everything
    assert json.loads(out.read_text())["false_accept"] == again["false_accept"] == result["false_accept"]
    controls = result["gold_accept"]["n"]  # the gold itself, once per question of the stress sample
    assert 0 < controls <= sum(result["items"].values())
    assert asked == result["calls_asked"] == 2 * (sum(result["items"].values()) + controls) and again["calls_asked"] == 0
    assert result["gold_accept"]["rate"] == 0.0  # this judge says WRONG to everything: the control shows it
    for kind in ("vague", "specific"):
        rate = result["false_accept"][kind]
        assert rate["rate"] == 0.0 and rate["n"] == result["items"][kind] and rate["ci_high"] > 0
    assert result["warnings"] == [] and result["unreadable_replies"] == []
    assert result["seconds_per_call"]["mean"] > 0 and result["tokens"]["prompt_per_call"] > 0
    assert result["judge"]["model"] == "bench-judge" and "bench_judge judge=lenient" in result["command"]
    assert out.with_suffix(".md").read_text().startswith("| kind | items |")
