"""J on the trusted side of an evaluation: once the answers are scored, the LLM judge grades them, through a gateway
under the run's budget, with the judge the trusted config names.

Why here, after scoring: the untrusted half has exited by then, and everything the judge is told (the protocol's
prompt from ``benchmarks.judge``, the gold, the model, the endpoint, the number of runs) comes from the composed
config of this process (``EvalSetup.judge``), never from the evaluated tree or anything the sandbox was given.

Why a gateway of its own: the judge is asked through an LLM gateway (research.gateway) like the reader, so its
calls are reserved and booked on the run's token and USD budget and replayed from the run's reply cache; but on a
private socket, never mounted in a sandbox, and with its own cache namespace, so no candidate's reader can hit, or
time, a reply the judge was given. When the judge runs on the reader's embedded model, ``open_llm`` shares the
server already running in this process. The verdicts themselves are cached per evaluation by
``benchmarks.judge.ask`` (``judge.jsonl`` in the run folder): a killed judging step resumes without asking again.
"""

from __future__ import annotations

import logging
import os
import shutil
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import openai

from benchmarks.judge.config import JudgeConfig
from benchmarks.judge.run import JUDGE_FILE, JudgedEval, judge_metrics, judge_scored_run
from harness.errors import MemsysError
from research.evaluation.reader_link import GATEWAY_BASE_URL, short_socket_dir, upstream_traits

log = logging.getLogger(__name__)

#: what a failed judging step raises: typed errors (an unreadable verdict, the budget), the SDK's, the file system's
JUDGE_ERRORS: tuple[type[BaseException], ...] = (MemsysError, openai.OpenAIError, OSError)
#: joins the gateway's cache namespace: judge replies never share keys with the reader's
JUDGE_CACHE_TAG = "judge"
#: the judge's gateway socket, in a private folder of its own
JUDGE_SOCKET = "judge.sock"
#: the client's key over the socket: the gateway sets the real one upstream
SOCKET_API_KEY = "memsys-gateway"


def judge_llm_config(cfg: JudgeConfig) -> Any:
    """The judge's endpoint: this checkout's ``configs/llm/<endpoint>.yaml`` with the judge's model. A ``base_url``
    names any OpenAI-compatible server (backend openai), whatever the group's backend."""
    from memsys.config import LLMConfig, compose, validate

    llm = validate(LLMConfig, compose("eval", [f"llm={cfg.endpoint}"]).llm, where=f"judge endpoint llm={cfg.endpoint}")
    llm = replace(llm, model=cfg.model)
    return replace(llm, backend="openai", base_url=cfg.base_url) if cfg.base_url else llm


def socket_client(socket_path: Path, timeout_s: float, max_retries: int) -> Any:
    """An OpenAI SDK client whose every request goes over the gateway's Unix socket (the host in the URL is ignored)."""
    from research.gateway.upstream import load_httpx

    httpx = load_httpx()
    http = httpx.Client(transport=httpx.HTTPTransport(uds=str(socket_path)), timeout=timeout_s)
    return openai.OpenAI(base_url=GATEWAY_BASE_URL, api_key=SOCKET_API_KEY, http_client=http, timeout=timeout_s,
                         max_retries=max_retries)


@contextmanager
def judge_gateway(judge_llm: Any, run_gateway: Any = None, *, reply_cache: bool = True) -> Iterator[Any]:
    """A gateway to the judge's endpoint (``judge_llm``: its LLMConfig) on a private socket, under the run gateway's
    budget and reply cache, closed on exit. A run without a gateway (in-process): no budget, and the judge
    endpoint's reply cache when ``reply_cache`` (the run's ``llm.cache``) is on."""
    from memsys.llm.client import open_llm
    from research.gateway.service import LLMGateway

    with ExitStack() as stack:
        llm = stack.enter_context(open_llm(judge_llm))
        sock = short_socket_dir()
        stack.callback(shutil.rmtree, sock, True)
        key = None if judge_llm.backend == "local" else os.environ.get(judge_llm.api_key_env) or None
        cache = run_gateway.cache if run_gateway is not None else getattr(llm, "cache", None) if reply_cache else None
        tag = JUDGE_CACHE_TAG + (f":{llm.cache_tag}" if getattr(llm, "cache_tag", None) else "")
        gateway = LLMGateway(str(llm.base_url), socket_path=sock / JUDGE_SOCKET, api_key=key, model=judge_llm.model,
                             budget=getattr(run_gateway, "budget", None), price_input_per_1m=judge_llm.price_input_per_1m,
                             price_output_per_1m=judge_llm.price_output_per_1m, cache=cache, cache_tag=tag,
                             **upstream_traits(judge_llm))
        yield stack.enter_context(gateway)


def judging_applies(setup: Any) -> bool:
    """J is measured when the trusted config names a judge and a reader answered (the screen has no answers)."""
    return setup.judge is not None and setup.options.reader == "llm"


def judge_evaluation(setup: Any, bench: Any, result: Any, run_gateway: Any = None) -> JudgedEval | None:
    """Judge a scored evaluation (``result``: benchmarks.result.EvalResult) and fold J into it: metrics, table,
    objective value, run folder and MLflow run. None when no judge applies; a JUDGE_ERRORS exception when judging
    failed (the scored files stay, and the same evaluation run again resumes the judging)."""
    if not judging_applies(setup):
        return None
    cfg = setup.judge
    judge_llm = judge_llm_config(cfg)
    with judge_gateway(judge_llm, run_gateway, reply_cache=setup.llm.cache) as gateway:
        client = socket_client(gateway.socket_path, judge_llm.timeout_s, judge_llm.max_retries)
        try:
            judged = judge_scored_run(client, cfg, bench, Path(result.run_dir), result.metrics, result.table)
        finally:
            client.close()
    result.metrics, result.table = judged.metrics, judged.table
    result.objective_value = judged.metrics.get("objective_value")
    if result.mlflow_run_id:
        log_judge_to_mlflow(result.mlflow_run_id, Path(result.run_dir), judged)
    return judged


def log_judge_to_mlflow(mlflow_run_id: str, run_dir: Path, judged: JudgedEval) -> None:
    """J's figures and files on the evaluation's MLflow run (logged before J existed); never fails the evaluation."""
    try:
        import time

        from mlflow.entities import Metric
        from mlflow.tracking import MlflowClient

        from benchmarks.tracking import tracking_uri

        client = MlflowClient(tracking_uri())
        figures = {**judge_metrics(judged.run), "objective_value": judged.metrics.get("objective_value")}
        now = int(time.time() * 1000)
        client.log_batch(mlflow_run_id, metrics=[Metric(k, float(v), now, 0) for k, v in figures.items()
                                                 if isinstance(v, (int, float)) and not isinstance(v, bool)])
        client.set_tag(mlflow_run_id, "judge_warnings", figures["judge_warnings"] or "none")
        for name in ("table.txt", "metrics.json", JUDGE_FILE):
            if (run_dir / name).exists():
                client.log_artifact(mlflow_run_id, str(run_dir / name))
    except Exception as exc:  # noqa: BLE001 - tracking never stops an evaluation
        log.warning("J not logged to MLflow run %s: %s", mlflow_run_id, " ".join(str(exc).split())[:300])


#: the overall F1 the scorer reports, per benchmark (LoCoMo: categories 1-4, as J)
_OVERALL_F1 = ("f1_cat1_4", "f1")


def judge_columns(metrics: dict[str, Any]) -> dict[str, Any]:
    """J beside F1 for a comparison table (a sweep's frame): F1, J, the stress test's false-accept rates and the
    answers' length ratio; empty when the evaluation had no judge."""
    if "judge_protocol" not in metrics:
        return {}
    f1 = next((metrics[k] for k in _OVERALL_F1 if metrics.get(k) is not None), None)
    return {"F1": f1, "J": metrics.get("j"), "J false-accept vague": metrics.get("judge_false_accept_vague"),
            "J false-accept specific": metrics.get("judge_false_accept_specific"),
            "length ratio": metrics.get("length_ratio")}
