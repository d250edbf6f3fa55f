"""The two-half evaluation through a real sandbox: the same numbers as in-process and as the loop,
answers from the sandbox, scores and results only from the trusted side, verified caches.

Real pieces: bwrap (skipped with the reason when it cannot run here), LoCoMo tiny, reader=none.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.config import load_eval_setup
from research.evaluation.caches import SharedCache
from research.evaluation.fixed import evaluate_config, run_in_process
from research.loop.research_loop import ResearchLoop
from sandbox.bwrap import BwrapSandbox
from tests.support.loop import IMPROVE, scripted_opener, scripted_setup
from tests.support.openai_server import OpenAITestServer, Reply

pytestmark = pytest.mark.slow

_OK, _WHY = BwrapSandbox().available()
needs_bwrap = pytest.mark.skipif(not _OK, reason=f"bwrap unavailable: {_WHY}")
BASE = ["benchmark=locomo", "split=dev", "sample=tiny", "memory=naive", "reader=none", "mlflow=false", "workers=1"]
VOLATILE = {"wall_s"}


def _stable(m: dict) -> dict:
    return {k: v for k, v in m.items() if k not in VOLATILE}


@needs_bwrap
def test_sandboxed_eval_equals_in_process_and_the_loop(repo: Path, runs: Path, locomo_path) -> None:
    inproc = run_in_process(load_eval_setup([*BASE, "run_id=same-inproc"]), BASE)
    out = evaluate_config(load_eval_setup([*BASE, "run_id=same-bwrap", "sandbox=bwrap"]), BASE, progress=False)
    assert out.ok and out.sandbox is not None and out.sandbox.backend == "bwrap"
    assert _stable(out.result["metrics"]) == _stable(inproc.metrics)

    with OpenAITestServer() as server:
        server.enqueue(Reply.of_json(IMPROVE))
        setup = scripted_setup(repo, 1, "research.sandbox.backend=bwrap", "research.sandbox.allow_weak=false")
        loop = ResearchLoop(setup, "same-loop", llm_opener=scripted_opener(server))
        st = loop.run()
    base = loop.records[0]
    assert st.sandbox["backend"] == "bwrap" and not st.sandbox["weak"] and base.sandbox == st.sandbox
    assert _stable(base.metrics) == _stable(inproc.metrics)
    assert all(r.sandbox["backend"] == "bwrap" for r in loop.records)

    # the trusted files are outside everything the sandbox could write
    run_dir = runs / "same-bwrap"
    assert json.loads((run_dir / "result.json").read_text())["objective_value"] == inproc.objective_value
    assert sorted(p.name for p in (run_dir / "untrusted" / "out").iterdir()) == ["answers.jsonl"]


@needs_bwrap
def test_caches_are_shared_only_by_identical_code_and_after_verification(repo: Path, runs: Path, tmp_path: Path,
                                                                          monkeypatch, locomo_path) -> None:
    cache_root = tmp_path / "cache"
    monkeypatch.setenv("MEMSYS_CACHE_DIR", str(cache_root))
    first = evaluate_config(load_eval_setup([*BASE, "run_id=c1", "sandbox=bwrap"]), BASE, progress=False)
    assert first.ok and first.cache.stores_merged >= 1 and first.cache.embeddings_merged > 0
    assert first.cache.embeddings_refused == 0
    shared = SharedCache(cache_root)
    namespaces = [p.name for p in (shared.root / "stores").iterdir()]
    assert len(namespaces) == 1
    # the same code again: the sandbox reads the shared store instead of building one
    second = evaluate_config(load_eval_setup([*BASE, "run_id=c2", "sandbox=bwrap"]), BASE, progress=False)
    assert second.ok and second.cache.stores_merged == 0
    assert not (runs / "c2" / "untrusted" / "cache" / "stores").exists() or not any(
        (runs / "c2" / "untrusted" / "cache" / "stores").iterdir())
    assert _stable(second.result["metrics"]) == _stable(first.result["metrics"])
    # other code (one byte in memsys/) gets its own namespace: nothing built by other code is offered
    import shutil

    from research.evaluation.caches import code_namespace

    tree = tmp_path / "tree"
    root = Path(__file__).resolve().parents[3]
    for name in ("memsys", "configs/memory"):
        shutil.copytree(root / name, tree / name, ignore=shutil.ignore_patterns("__pycache__"))
    assert code_namespace(tree) == namespaces[0]
    (tree / "configs" / "memory" / "naive.yaml").write_text("name: naive\n")  # a preset is data, not code
    assert code_namespace(tree) == namespaces[0]
    with open(tree / "memsys" / "predict.py", "a") as fh:
        fh.write("\n")
    assert code_namespace(tree) != namespaces[0]


def test_the_sandbox_sees_only_the_code_it_runs(tmp_path: Path) -> None:
    """Not the checkout's runs/ (earlier runs' scored rows hold gold answers), tests or scorer."""
    from research.evaluation.two_half import EvalJob, sandbox_spec

    root = Path(__file__).resolve().parents[3]
    setup = load_eval_setup(BASE)
    job = EvalJob(setup, root, "naive", tmp_path / "untrusted")
    (tmp_path / "untrusted" / "out").mkdir(parents=True)
    spec = sandbox_spec(job, tmp_path / "untrusted" / "public" / "request.json", gateway=None, shared=None,
                        namespace="x")
    mounted = {*spec.readonly, *spec.writable}
    assert {root / "memsys", root / "harness", root / "configs"} <= mounted
    for hidden in (root, root / "runs", root / "benchmarks", root / "research", root / "tests"):
        assert hidden not in mounted and not any(m in hidden.parents for m in mounted)
    assert spec.network == "none" and "MEMSYS_DATA_DIR" not in spec.env
    assert not any("KEY" in k.upper() for k in spec.env)
