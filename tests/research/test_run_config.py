"""configs/run.yaml and the research schema agree: every field can be overridden from the command line."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from harness.paths import config_dir
from research.config import ResearchConfig, load_run_setup


def _fields(cls: type) -> dict[str, type | None]:
    return {f.name: f.type for f in dataclasses.fields(cls)}


def test_every_research_field_is_in_run_yaml() -> None:
    raw = yaml.safe_load((config_dir() / "run.yaml").read_text())["research"]
    for f in dataclasses.fields(ResearchConfig):
        assert f.name in raw, f"research.{f.name} missing from configs/run.yaml"
        default = getattr(ResearchConfig(), f.name)
        if dataclasses.is_dataclass(default):
            missing = sorted(set(_fields(type(default))) - set(raw[f.name]))
            assert not missing, f"research.{f.name}: {missing} missing from configs/run.yaml (cannot be overridden)"


@pytest.mark.parametrize("override", ["research.loop.duplicate_reasks=0", "research.loop.check=false",
                                      "research.researcher.mode=menu", "research.loop.alpha=0.1"])
def test_loop_fields_override(override: str) -> None:
    setup = load_run_setup([override])
    section, key, value = override.split(".")[1], override.split("=")[0].split(".")[2], override.split("=")[1]
    got = getattr(getattr(setup.research, section), key)
    assert str(got).lower() == value


def test_bad_alpha_and_proposer_are_one_line_errors() -> None:
    from harness.errors import ConfigError

    with pytest.raises(ConfigError, match="alpha"):
        load_run_setup(["research.loop.alpha=1.5"])
    with pytest.raises(ConfigError, match="research.proposer"):
        load_run_setup(["research.proposer=genius"])
    with pytest.raises(ConfigError, match="research.fixed_levers: 'pyramid.budget' is neither a lever nor a memory key"):
        load_run_setup(["research.fixed_levers=[retrieval.top_k,pyramid.budget]"])


def test_a_resume_may_change_how_long_and_where_a_run_goes_on_but_not_what_it_measures() -> None:
    from dataclasses import asdict

    from harness.errors import ConfigError
    from research.config import resume_overrides, run_setup_from_dict

    setup = load_run_setup(["research.budget.experiments=2"])
    raw = setup.eval.raw | {"research": asdict(setup.research)}
    more = resume_overrides(raw, ["research.budget.experiments=10", "research.sandbox.wall_timeout_s=7200", "workers=1"])
    again = run_setup_from_dict(more)
    assert (again.research.budget.experiments, again.research.sandbox.wall_timeout_s) == (10, 7200)
    assert again.eval.options.workers == 1 and raw["research"]["budget"]["experiments"] == 2  # the saved one is untouched
    held = run_setup_from_dict(resume_overrides(raw, ["research.fixed_levers=[pyramid.budget_tokens]"]))
    assert held.research.fixed_levers == ["pyramid.budget_tokens"]  # where the search goes next, not what it measures
    warm = run_setup_from_dict(resume_overrides(raw, ["research.study.warm_start=[omni]"]))
    assert warm.research.study.warm_start == ["omni"]
    for item in ("memory.retrieval.top_k=9", "sample=full", "research.proposer=optuna", "objective=f1", "workers"):
        with pytest.raises(ConfigError, match="would change what the run measures"):
            resume_overrides(raw, [item])
