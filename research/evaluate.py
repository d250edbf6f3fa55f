"""Evaluate a worktree's memory system in the sandbox and read its result file.

The evaluation is a separate process (never in-process with the loop's secrets):
``python -m benchmarks.cli eval ... --result-file OUT`` with the worktree first on
PYTHONPATH, so the edited ``memsys`` is what runs. The scorer, splits, data and
loop are mounted read-only; only the output folder and the content-hash cache
are writable.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from memsys.paths import cache_dir, data_dir
from research.failures import Failure, classify_result
from sandbox import SandboxResult, SandboxSpec

RESULT_SCHEMA = "memsys-eval-result/1"
READONLY_IN_WORKTREE = ("benchmarks", "research", "sandbox", "configs/benchmark", "configs/eval.yaml",
                        "configs/run.yaml", "scripts", "tests")


@dataclass
class EvalRequest:
    worktree: Path
    out_dir: Path
    overrides: list[str]
    wall_timeout_s: float = 1800.0
    memory_bytes: int | None = 8 << 30
    network: str = "none"
    extra_env: dict[str, str] = field(default_factory=dict)  # e.g. an API key, only when needed


@dataclass
class EvalOutcome:
    ok: bool
    result: dict[str, Any] | None
    failure: Failure | None
    sandbox: SandboxResult | None
    result_status: str  # ok | missing | invalid

    @property
    def objective_value(self) -> float | None:
        return None if not self.result else self.result.get("objective_value")


def read_result(path: Path) -> tuple[str, dict[str, Any] | None]:
    if not path.exists():
        return "missing", None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return "invalid", None
    if not isinstance(data, dict) or data.get("schema") != RESULT_SCHEMA or not isinstance(data.get("metrics"), dict):
        return "invalid", None
    return "ok", data


def build_spec(req: EvalRequest) -> SandboxSpec:
    wt = req.worktree.resolve()
    out = req.out_dir.resolve()
    out.mkdir(parents=True, exist_ok=True)
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    result_file = out / "result.json"
    result_file.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "benchmarks.cli", "eval", *req.overrides, "--no-progress",
            "--result-file", str(result_file)]
    env = {
        "PYTHONPATH": str(wt),
        "MEMSYS_RUNS_DIR": str(out),
        "MEMSYS_CACHE_DIR": str(cache),
        "MEMSYS_DATA_DIR": str(data_dir()),
        "MEMSYS_CONFIG_DIR": str(wt / "configs"),
        "HOME": str(out),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "MPLBACKEND": "Agg",
        **{k: os.environ[k] for k in ("MEMSYS_MODELS_DIR",) if k in os.environ},
        **req.extra_env,
    }
    readonly = [wt / p for p in READONLY_IN_WORKTREE if (wt / p).exists()]
    readonly += [wt, Path(sys.prefix), data_dir()]
    return SandboxSpec(
        argv=argv, workdir=wt, writable=[out, cache], readonly=readonly, env=env, network=req.network,
        wall_timeout_s=req.wall_timeout_s, memory_bytes=req.memory_bytes, max_file_bytes=2 << 30,
        max_open_files=4096,
    )


def evaluate(sandbox: Any, req: EvalRequest, *, parent_metrics: dict[str, Any] | None = None,
             code_changed: bool = False, edited_paths: Sequence[str] = ()) -> EvalOutcome:
    spec = build_spec(req)
    res = sandbox.run(spec)
    status, data = read_result(req.out_dir / "result.json")
    metrics = None
    if data is not None:
        metrics = {k: v for k, v in data["metrics"].items()
                   if v is not None and not isinstance(v, str)}  # names like "objective" are not values
    failure = classify_result(
        res, result_status=status, metrics=metrics, parent_metrics=parent_metrics,
        code_changed=code_changed, edited_paths=list(edited_paths),
    )
    if failure is None and status != "ok":
        from research.failures import FailureClass, _failure  # noqa: PLC2701 - same package helper

        failure = _failure(FailureClass.FORMAT_MISMATCH, f"result file {status}", code_changed=code_changed)
    return EvalOutcome(failure is None, data, failure, res, status)
