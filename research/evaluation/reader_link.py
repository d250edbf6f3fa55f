"""The sandboxed reader's only link to its LLM: a gateway on a Unix socket in a private folder, opened on
the trusted side, and the reader config the sandbox is given to reach it (no key, no cache of its own).

Why: the sandbox has no network. The key, the budget, the reply cache and the usage count stay in the
trusted process, so a candidate can neither read the key nor under-report what its reader cost.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

#: the base URL the sandboxed reader is configured with; the gateway's client maps it onto the socket
GATEWAY_BASE_URL = "http://gateway/v1"


def reader_config_for_sandbox(cfg: Any) -> dict[str, Any]:
    """The reader's LLMConfig as the sandbox sees it: the gateway, no key, no cache of its own."""
    from dataclasses import asdict

    d = asdict(cfg)
    d.update(backend="openai", base_url=GATEWAY_BASE_URL, cache=False, api_key_env="MEMSYS_GATEWAY_NO_KEY")
    return d


def open_gateway(cfg: Any, llm: Any, socket_dir: Path, budget: Any = None, prompt_cap: int | None = None) -> Any:
    """A host-side gateway to the reader's endpoint (the key stays in this process); ``prompt_cap``: the
    run's reader budget in prompt tokens (benchmarks.config.reader_prompt_cap), None for none."""
    from research.gateway.service import LLMGateway

    key = None if cfg.backend == "local" else os.environ.get(cfg.api_key_env) or None
    cache = getattr(llm, "cache", None)
    if cache is None and cfg.cache:  # the reader's replies are cached as the run's config says
        from harness.reply_cache import ResponseCache

        cache = ResponseCache()
    embedded = None
    if cfg.backend == "local":  # a Ray node may serve it itself (research.execution.node_llm)
        from research.execution.node_llm import EmbeddedModel

        embedded = EmbeddedModel.of(cfg)
    return LLMGateway(str(llm.base_url), socket_path=socket_dir / "llm.sock", api_key=key, model=cfg.model,
                      budget=budget, price_input_per_1m=cfg.price_input_per_1m,
                      price_output_per_1m=cfg.price_output_per_1m, cache=cache,
                      cache_tag=getattr(llm, "cache_tag", None), embedded=embedded, prompt_cap=prompt_cap,
                      **upstream_traits(cfg))


def upstream_traits(cfg: Any) -> dict[str, Any]:
    """How a gateway speaks to the endpoint an ``llm`` config names: the embedded llama.cpp server takes its own
    JSON form, and, started without per-token logits (``llm.local.logprobs``), no request for log-probabilities."""
    local = cfg.backend == "local"
    return {"upstream_dialect": "llama_cpp" if local else "openai", "upstream_logprobs": not local or bool(cfg.local.logprobs)}


def short_socket_dir() -> Path:
    """A private folder for the gateway's socket (Unix socket paths are limited to 107 bytes)."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix="memsys-gw-"))
