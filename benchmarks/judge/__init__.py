"""LLM-judge accuracy ("J") and the judge's stress test: the trusted core.

- :mod:`~benchmarks.judge.protocol`: the protocols (LoCoMo lenient / strict, Mem-Gallery 0-0.5-1) as data,
  their chat messages, and the parser of a judge's reply;
- :mod:`~benchmarks.judge.score`: J per question / category / overall, answer length, agreement with F1;
- :mod:`~benchmarks.judge.stress`: known-wrong answers built from the gold, false-accept rates, warnings;
- :mod:`~benchmarks.judge.ask`: the I/O edge (an OpenAI SDK client, a resumable verdict cache);
- :mod:`~benchmarks.judge.config`: the trusted ``JudgeConfig``.

See docs/judge.md.
"""

from __future__ import annotations

from benchmarks.judge.ask import VerdictCache, ask_judge
from benchmarks.judge.config import JudgeConfig, judge_config
from benchmarks.judge.protocol import (
    PROTOCOLS,
    JudgeItem,
    JudgeReplyError,
    Protocol,
    Verdict,
    build_messages,
    get_protocol,
    parse_verdict,
)
from benchmarks.judge.score import JudgedRow, JudgeSummary, judge_items, judged_rows, length_warnings, summarize
from benchmarks.judge.stress import (
    Rate,
    StressItem,
    StressPlan,
    build_stress_items,
    false_accept_rates,
    names_by_conversation,
    stress_judge_items,
    stress_plan,
    stress_warnings,
)

__all__ = [
    "PROTOCOLS",
    "JudgeConfig",
    "JudgeItem",
    "JudgeReplyError",
    "JudgeSummary",
    "JudgedRow",
    "Protocol",
    "Rate",
    "StressItem",
    "StressPlan",
    "Verdict",
    "VerdictCache",
    "ask_judge",
    "build_messages",
    "build_stress_items",
    "false_accept_rates",
    "get_protocol",
    "judge_config",
    "judge_items",
    "judged_rows",
    "length_warnings",
    "names_by_conversation",
    "parse_verdict",
    "stress_judge_items",
    "stress_plan",
    "stress_warnings",
    "summarize",
]
