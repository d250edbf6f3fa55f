"""What the researcher sees at each step, built from the run's state and the repo at the best commit.

The goal metric and its history, the current memory config, a sample of questions the best
system got wrong, where the last experiment differed from the best, and a rotation of source
files within a token budget (a 1.5B local model has a 4k context, a hosted one far more).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from research.proposers.base import ResearchContext

#: files offered to the researcher, one rotation per step (the answer prompt always first)
CONTEXT_FILES = ("memsys/answer/prompts/default/constraints.txt", "memsys/retrieve/merge.py",
                 "memsys/retrieve/pyramid.py", "memsys/ingest/text_gate.py")


def build_context(state: Any, records: list, setup: Any, preset: str, run_dir: Path) -> ResearchContext:
    import git
    from omegaconf import OmegaConf

    from harness.tokens import count_tokens
    from memsys.config import MemoryConfig

    repo = git.Repo(state.repo)

    def show(path: str) -> str | None:
        try:
            return repo.git.show(f"{state.best_commit}:{path}")
        except git.GitCommandError:
            return None

    preset_cfg = OmegaConf.create(show(f"configs/memory/{preset}.yaml") or "{}")
    preset_cfg.pop("defaults", None)  # Hydra's defaults list, not a memory setting
    knobs = OmegaConf.to_yaml(OmegaConf.merge(OmegaConf.structured(MemoryConfig), preset_cfg))
    budget = setup.research.loop.context_budget_tokens
    files: dict[str, str] = {}
    used = count_tokens(knobs)
    rotation = list(CONTEXT_FILES)
    random.Random(state.next_index).shuffle(rotation[1:])
    for p in rotation:
        text = show(p)
        if text is None:
            continue
        n = count_tokens(text)
        if used + n <= budget:
            files[p] = text
            used += n
    return ResearchContext(setup.eval.objective, state.best_value or 0.0, records, state.mode,
                           state.current_hypothesis,
                           failed_questions(state, setup.research.loop.failed_questions_shown), files, knobs,
                           preset, diagnosis_text(state, records, run_dir))


def diagnosis_text(state: Any, records: list, run_dir: Path) -> str:
    """Where the last evaluated experiment differed from the best (when it did not win)."""
    from research.diagnosis import diagnose, read_rows

    last = next((r for r in reversed(records) if r.eval_run_id and r.index > 0), None)
    if last is None or last.decision == "proceed":
        return ""
    new_dir = Path(run_dir) / "evals" / last.experiment_id / last.eval_run_id
    return diagnose(read_rows(state.best_eval_dir), read_rows(new_dir)).render()


def failed_questions(state: Any, n: int) -> list[dict[str, Any]]:
    """A reproducible sample of the best evaluation's wrong answers (token F1 < 0.5)."""
    if not state.best_eval_dir:
        return []
    path = Path(state.best_eval_dir) / "predictions.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        score = (r.get("scores") or {}).get("f1")
        if score is not None and score < 0.5:
            rows.append(r)
    random.Random(state.next_index).shuffle(rows)
    return rows[:n]
