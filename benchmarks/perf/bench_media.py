"""Media novelty gates, storage saved, cross-modal redundancy and level-3 budget adherence.

Measures, on generated media with known ground truth (and Mem-Gallery's dialog files):

- images: verdicts of the vision gate (perceptual encoder) on a burst stream of 20
  synthetic scenes x 5 shots (original, JPEG re-encode, resize, brightness, 10-px
  shift), in burst order and shuffled, with vision_window 1 (released) and 50;
  kept of total and cold bytes stored vs storing every image;
- video: PyAV-written clips with known cuts (hard cuts, and cross-fades), scenes
  found vs true, frames kept of sampled, bytes stored (file + keyframes) vs file +
  every sampled frame as a keyframe;
- audio (espeak-ng speech, skipped with a reason if absent): speech segments found
  vs true utterances, time precision/recall, silence/tone files rejected, cold bytes
  stored vs the whole file at 16 kHz, VAD speed;
- cross-modal: on Mem-Gallery image rounds, how often the caption is judged
  redundant (Jaccard > 0.8) / uncertain (> 0.5) against the text gate's recent
  window (the last 50 round texts, current round included), plus the Jaccard and
  word-containment distributions;
- level 3: every Mem-Gallery question against a per-topic memory in image mode
  (the real images are Git LFS objects absent offline, so each image round gets a
  deterministic SYNTHETIC stand-in picture with its real caption): context tokens
  vs the budget B, and how often media reach the context.

Usage: ``python benchmarks/perf/bench_media.py [--embedder minilm|hashing] [--topics N] [--budgets 1500,6000]``.
Writes ``runs/bench/media.json`` and prints the same JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import wave
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from harness.bench_output import write_json  # noqa: E402
from harness.paths import data_dir, runs_dir  # noqa: E402
from harness.tokens import count_tokens  # noqa: E402
from memsys.config import EmbedderConfig, MemoryConfig, load_memory_config  # noqa: E402
from memsys.ingest.text_gate import word_set  # noqa: E402
from memsys.media import MediaReport, context_to_content_parts, ingest_audio, ingest_image, ingest_video  # noqa: E402
from memsys.media.gates import CrossModalGate  # noqa: E402
from memsys.media.image import encode_jpeg  # noqa: E402
from memsys.media.video import sample_frames, write_test_video  # noqa: E402
from memsys.memory import Memory  # noqa: E402
from memsys.records import Turn  # noqa: E402
from tests.support.media import scene as synthetic_scene  # the same synthetic photos as the tests

SENTENCES = [
    "The meeting starts at nine tomorrow morning.",
    "Please bring the quarterly report and your laptop.",
    "I moved to Lisbon in the spring of last year.",
    "My sister adopted a grey kitten called Pepper.",
    "We should book the train tickets before Friday.",
    "The museum closes early on Sundays in winter.",
    "He finally fixed the leaking kitchen tap.",
    "Our flight was delayed by almost three hours.",
    "She is training for the city marathon in October.",
    "The new library opens next to the old fire station.",
    "Could you water the tomatoes while I am away?",
    "They painted the living room a pale shade of green.",
]




def _bytes(im, fmt="PNG", **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def _memory(root: Path, name: str, **media) -> Memory:
    cfg = MemoryConfig(embedder=EmbedderConfig(backend="hashing", cache=False))
    for k, v in media.items():
        setattr(cfg.ingest.media, k, v)
    return Memory.create(root / name, cfg)


def _quantiles(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {}
    a = np.asarray(xs)
    return {q: round(float(np.quantile(a, p)), 4) for q, p in
            (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))} | {"mean": round(float(a.mean()), 4)}


# ----------------------------------------------------------------------------- images
def bench_images(root: Path, n_scenes: int = 20) -> dict[str, Any]:
    from PIL import Image, ImageEnhance

    shots = []  # (kind, scene, bytes)
    for s in range(n_scenes):
        im = synthetic_scene(1000 + s)
        shots += [("original", s, _bytes(im)),
                  ("jpeg_q70", s, _bytes(im, "JPEG", quality=70)),
                  ("resize_80", s, _bytes(im.resize((256, 192)))),
                  ("brightness_1.08", s, _bytes(ImageEnhance.Brightness(im).enhance(1.08))),
                  ("shift_10px", s, _bytes(im.transform(im.size, Image.AFFINE, (1, 0, 10, 0, 1, 0))))]
    out: dict[str, Any] = {"images": len(shots), "distinct_scenes": n_scenes,
                           "bytes_all": sum(len(b) for _, _, b in shots)}
    shuffled = shots[:]
    random.Random(0).shuffle(shuffled)
    for order, stream in (("burst", shots), ("shuffled", shuffled)):
        for window in (1, 50):
            mem = _memory(root, f"img-{order}-{window}", vision_window=window)
            report = MediaReport()
            t0 = time.perf_counter()
            for kind, s, data in stream:
                ingest_image(mem, data, f"scene {s} shot {kind}", report=report)
            elapsed = time.perf_counter() - t0
            by_kind: dict[str, dict[str, int]] = {}
            for (kind, _, _), item in zip(stream, report.items):
                v = item.decision.verdict if item.decision else "error"
                by_kind.setdefault(kind, {}).setdefault(v, 0)
                by_kind[kind][v] += 1
            kept = sum(bool(i.mau_ids) for i in report.items)
            scenes_kept = len({s for (_, s, _), i in zip(stream, report.items) if i.mau_ids})
            stored = sum(i.bytes_stored for i in report.items)
            out[f"{order}_window{window}"] = {
                "kept": kept, "of": len(stream), "kept_rate": round(kept / len(stream), 3),
                "distinct_scenes_kept": scenes_kept, "verdicts_by_shot": by_kind,
                "bytes_stored": stored, "bytes_saved_rate": round(1 - stored / out["bytes_all"], 3),
                "ms_per_image": round(elapsed / len(stream) * 1e3, 2),
            }
            mem.close()
    return out


# ----------------------------------------------------------------------------- video
def _write_crossfade_video(path: Path, scenes: list[np.ndarray], hold_s: float, fade_s: float, fps: int) -> list[float]:
    """Scenes held ``hold_s`` with ``fade_s`` cross-fades; returns the true scene start times (fade midpoints)."""
    import av

    h, w = scenes[0].shape[:2]
    starts, t = [0.0], 0.0
    with av.open(str(path), "w") as out:
        stream = out.add_stream("mpeg4", rate=fps)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"

        def emit(arr: np.ndarray) -> None:
            for packet in stream.encode(av.VideoFrame.from_ndarray(arr.astype(np.uint8), format="rgb24")):
                out.mux(packet)

        for i, arr in enumerate(scenes):
            for _ in range(int(hold_s * fps)):
                emit(arr)
            t += hold_s
            if i + 1 < len(scenes):
                n = int(fade_s * fps)
                for k in range(n):
                    a = (k + 1) / (n + 1)
                    emit((1 - a) * arr.astype(np.float32) + a * scenes[i + 1].astype(np.float32))
                starts.append(t + fade_s / 2)
                t += fade_s
        for packet in stream.encode():
            out.mux(packet)
    return starts


def bench_video(root: Path) -> dict[str, Any]:
    rng = random.Random(1)
    cases = []
    seed = 2000
    for n_scenes in (1, 2, 3, 5):
        scenes = [np.asarray(synthetic_scene(seed + k)) for k in range(n_scenes)]
        seed += n_scenes
        hold = round(rng.uniform(2.0, 4.0), 1)
        path = write_test_video(root / f"cuts{n_scenes}.mp4", scenes, seconds_per_scene=hold, fps=10,
                                motion_px=rng.choice([2, 4, 6]))
        cases.append(("hard_cuts", path, [k * hold for k in range(n_scenes)]))
    scenes = [np.asarray(synthetic_scene(seed + k)) for k in range(3)]
    starts = _write_crossfade_video(root / "fades3.mp4", scenes, hold_s=3.0, fade_s=1.0, fps=10)
    cases.append(("crossfade_1s", root / "fades3.mp4", starts))
    out: dict[str, Any] = {}
    for fps in (1.0, 2.0):
        rows, total = [], {"true": 0, "found": 0, "sampled": 0, "stored": 0, "everything": 0}
        for kind, path, true_starts in cases:
            mem = _memory(root, f"vid-{path.stem}-{fps}")
            report = MediaReport()
            t0 = time.perf_counter()
            maus = ingest_video(mem, path, fps, report=report)
            elapsed = time.perf_counter() - t0
            item = report.items[0]
            found = [m.time_span[0] for m in maus]
            # storing everything: the file plus every sampled frame as a keyframe
            _, frames = sample_frames(path.read_bytes(), str(path), fps, 10_000)
            every = path.stat().st_size + sum(len(encode_jpeg(f.image, 512, 85)) for f in frames)
            err = [min(abs(f - t) for t in true_starts) for f in found]
            rows.append({"video": path.name, "kind": kind, "true_scenes": len(true_starts), "scenes_found": len(maus),
                         "frames_sampled": item.stats["frames_sampled"], "frames_static": item.stats["frames_static"],
                         "frames_uncertain": item.stats["frames_uncertain"],
                         "max_start_error_s": round(max(err), 2) if err else None,
                         "bytes_stored": item.bytes_stored, "bytes_everything": every,
                         "realtime_x": round(item.stats["duration_s"] / elapsed, 1)})
            total["true"] += len(true_starts)
            total["found"] += len(maus)
            total["sampled"] += int(item.stats["frames_sampled"])
            total["stored"] += item.bytes_stored
            total["everything"] += every
            mem.close()
        out[f"sample_fps_{fps:g}"] = {
            "videos": rows, "true_scenes": total["true"], "scenes_found": total["found"],
            "frames_kept": total["found"], "frames_sampled": total["sampled"],
            "kept_rate": round(total["found"] / total["sampled"], 3),
            "bytes_stored": total["stored"], "bytes_everything": total["everything"],
            "bytes_saved_rate": round(1 - total["stored"] / total["everything"], 3),
        }
    return out


# ----------------------------------------------------------------------------- audio
def _speak(espeak: str, text: str) -> tuple[np.ndarray, int]:
    raw = subprocess.run([espeak, "--stdout", text], check=True, capture_output=True, timeout=60).stdout
    with wave.open(io.BytesIO(raw)) as w:
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32) / 32768.0, w.getframerate()


def _write_wav(path: Path, x: np.ndarray, rate: int) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(rate)
        w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())
    return path


def _talk_file(espeak: str, path: Path, f: int, rng: random.Random, noise: np.random.Generator) -> tuple[Path, list]:
    """Three utterances with gaps of 0.6-2 s and light noise, and their true spans in seconds."""
    parts, spans, t, rate = [], [], 0.0, 22050
    for u in range(3):
        gap = rng.uniform(0.6, 2.0)
        filler = np.zeros(int(gap * rate), np.float32)
        if f == 3 and u == 1:  # a loud tone in the gap: energy, but not speech
            tt = np.arange(len(filler)) / rate
            filler = (0.25 * np.sin(2 * np.pi * 440 * tt)).astype(np.float32)
        parts.append(filler)
        t += gap
        speech, rate = _speak(espeak, SENTENCES[(3 * f + u) % len(SENTENCES)])
        spans.append((t, t + len(speech) / rate))
        parts.append(speech)
        t += len(speech) / rate
    parts.append(np.zeros(rate, np.float32))
    x = np.concatenate(parts) + noise.normal(0, 0.002, sum(len(p) for p in parts)).astype(np.float32)
    return _write_wav(path, x, rate), spans


def _audio_files(root: Path, espeak: str) -> list[tuple[Path, list, str]]:
    """(path, true spans, kind): four talks, then a noise-only and a tone file that must keep nothing."""
    rng = random.Random(2)
    noise = np.random.default_rng(2)
    files = [(*_talk_file(espeak, root / f"talk{f}.wav", f, rng, noise), "speech") for f in range(4)]
    sil = noise.normal(0, 0.002, 16000 * 5).astype(np.float32)
    files.append((_write_wav(root / "silence.wav", sil, 16000), [], "silence"))
    tt = np.arange(16000 * 5) / 16000
    files.append((_write_wav(root / "tone.wav", 0.3 * np.sin(2 * np.pi * 300 * tt), 16000), [], "tone"))
    return files


@dataclass
class _AudioTally:
    rows: list[dict[str, Any]] = field(default_factory=list)
    utter_true: int = 0
    utter_found: int = 0
    seg_found: int = 0
    seg_kept: int = 0
    tp_time: float = 0.0
    kept_time: float = 0.0
    true_time: float = 0.0
    stored: int = 0
    full16k: int = 0
    original: int = 0
    audio_s: float = 0.0
    wall: float = 0.0

    def add(self, path: Path, spans: list, kind: str, maus: list[Any], item: Any) -> None:
        """An utterance counts as found when kept segments cover at least half of it."""
        dur = item.stats["duration_s"]
        self.audio_s += dur
        kept_spans = [m.time_span for m in maus]
        inter = sum(max(0.0, min(b, e) - max(a, s)) for a, b in kept_spans for s, e in spans)
        covered = [sum(max(0.0, min(b, e) - max(a, s)) for a, b in kept_spans) / (e - s) for s, e in spans]
        self.utter_true += len(spans)
        self.utter_found += sum(c >= 0.5 for c in covered)
        self.seg_found += int(item.stats.get("segments_found", 0))
        self.seg_kept += len(maus)
        self.tp_time += inter
        self.kept_time += sum(b - a for a, b in kept_spans)
        self.true_time += sum(e - s for s, e in spans)
        self.stored += item.bytes_stored
        self.full16k += int(dur * 16000 * 2) + 44
        self.original += item.bytes_in
        self.rows.append({"file": path.name, "kind": kind, "true_utterances": len(spans),
                          "segments_found": int(item.stats.get("segments_found", 0)), "segments_kept": len(maus),
                          "verdict": item.decision.verdict if item.decision else item.error,
                          "uncertain": int(item.stats.get("verdict_uncertain", 0))})

    def summary(self) -> dict[str, Any]:
        rows, stored, full16k, original = self.rows, self.stored, self.full16k, self.original
        return {
            "files": rows, "true_utterances": self.utter_true, "utterances_found": self.utter_found,
            "vad_segments_found": self.seg_found, "segments_kept": self.seg_kept,
            "time_precision": round(self.tp_time / self.kept_time, 3) if self.kept_time else None,
            "time_recall": round(self.tp_time / self.true_time, 3) if self.true_time else None,
            "non_speech_files_rejected": sum(r["segments_kept"] == 0 for r in rows if r["kind"] != "speech"),
            "non_speech_files": sum(r["kind"] != "speech" for r in rows),
            "bytes_stored": stored, "bytes_full_16k": full16k, "bytes_original": original,
            "bytes_saved_rate_vs_16k": round(1 - stored / full16k, 3),
            "bytes_saved_rate_vs_original": round(1 - stored / original, 3),
            "vad_realtime_x": round(self.audio_s / self.wall, 1),
        }


def bench_audio(root: Path) -> dict[str, Any]:
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        return {"skipped": "espeak-ng not installed (apt-get install espeak-ng): no synthesized speech"}
    files = _audio_files(root, espeak)
    mem = _memory(root, "audio")
    tally = _AudioTally()
    for path, spans, kind in files:
        report = MediaReport()
        t0 = time.perf_counter()
        maus = ingest_audio(mem, path, report=report)
        tally.wall += time.perf_counter() - t0
        tally.add(path, spans, kind, maus, report.items[0])
    mem.close()
    return tally.summary()


# ----------------------------------------------------------------------------- Mem-Gallery
def _dialog_files(dialog_dir: Path) -> list[Path]:
    return sorted(dialog_dir.glob("*.json"))


def bench_crossmodal(dialog_dir: Path, window: int, reject_above: float, uncertain_above: float) -> dict[str, Any]:
    """Caption vs the last ``window`` round texts (the text gate's window), in dialogue order."""
    gate = CrossModalGate(reject_above, uncertain_above)
    results: dict[str, Any] = {}
    for variant in ("user_and_assistant", "user_only", "previous_captions"):
        verdicts = {"redundant": 0, "uncertain": 0, "novel": 0}
        jac, contain = [], []
        for f in _dialog_files(dialog_dir):
            data = json.loads(f.read_text(encoding="utf-8"))
            recent: list[tuple[str, frozenset[str]]] = []
            for s in data["multi_session_dialogues"]:
                for r in s["dialogues"]:
                    cap = r.get("image_caption")
                    cap = cap[0] if isinstance(cap, list) and cap else cap
                    text = r.get("user", "") if variant == "user_only" else f"{r.get('user', '')} {r.get('assistant', '')}"
                    if variant != "previous_captions":
                        recent = ([(r["round"], word_set(text))] + recent)[:window]
                    if cap:
                        d = gate.check(cap, recent)
                        verdicts[d.verdict] += 1
                        jac.append(d.score)
                        cw = word_set(cap)
                        contain.append(max((len(cw & ws) / len(cw) for _, ws in recent), default=0.0) if cw else 0.0)
                        if variant == "previous_captions":
                            recent = ([(r["round"], word_set(cap))] + recent)[:window]
        n = sum(verdicts.values())
        results[variant] = {
            "image_rounds": n, **verdicts,
            "redundant_rate": round(verdicts["redundant"] / n, 4) if n else None,
            "uncertain_rate": round(verdicts["uncertain"] / n, 4) if n else None,
            "best_jaccard": _quantiles(jac),
            "best_containment": _quantiles(contain),
            "containment_over_0.8": round(sum(c > 0.8 for c in contain) / n, 4) if n else None,
        }
    return {"window": window, "reject_above": reject_above, "uncertain_above": uncertain_above,
            "note": "user_and_assistant/user_only: caption vs the recent round texts incl. the current round; "
                    "previous_captions: caption vs earlier captions (image-to-image repetition)",
            **results}


@dataclass
class _BudgetStats:
    """Contexts retrieved at one budget B: how often they overran it, and what media they carried."""

    questions: int = 0
    over_budget: int = 0
    max_ratio: float = 0.0
    with_media: int = 0
    media_parts: int = 0
    media_tokens: list[int] = field(default_factory=list)
    total_tokens: list[int] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    prompt_over_budget: int = 0

    def record(self, ctx: Any, b: int) -> None:
        self.questions += 1
        total = ctx.total_tokens
        self.over_budget += total > b
        self.max_ratio = max(self.max_ratio, total / b)
        media = [p for i in ctx.items for p in i.media]
        self.with_media += bool(media)
        self.media_parts += len(media)
        self.media_tokens.append(sum(p.tokens for p in media))
        self.total_tokens.append(total)
        # what a vision reader is actually sent: rendered text (numbering, dates, speakers) + media
        parts = context_to_content_parts(ctx, vision=False)
        prompt = sum(count_tokens(p["text"]) for p in parts) + sum(p.tokens for p in media)
        self.prompt_tokens.append(prompt)
        self.prompt_over_budget += prompt > b

    def summary(self) -> dict[str, Any]:
        n = self.questions
        return {
            "questions": n, "over_budget": self.over_budget, "max_total_over_B": round(self.max_ratio, 3),
            "contexts_with_media": self.with_media, "with_media_rate": round(self.with_media / n, 3) if n else None,
            "media_parts_mean": round(self.media_parts / n, 2) if n else None,
            "media_tokens_mean": round(statistics.fmean(self.media_tokens), 1) if n else None,
            "total_tokens_mean": round(statistics.fmean(self.total_tokens), 1) if n else None,
            "rendered_prompt_tokens_mean": round(statistics.fmean(self.prompt_tokens), 1) if n else None,
            "rendered_prompt_over_budget": self.prompt_over_budget,
        }


@dataclass
class _TopicCounts:
    turns: int = 0
    images: int = 0
    image_maus: int = 0


def _level3_config(embedder_name: str) -> MemoryConfig:
    cfg = load_memory_config("omni", ["memory.pyramid.level3_media=true"])  # as for a multimodal reader
    if embedder_name == "hashing":
        cfg = replace(cfg, embedder=EmbedderConfig(backend="hashing", cache=False))
    return cfg


def _topic_memory(conv: Any, mem: Memory, counts: _TopicCounts) -> None:
    """A topic's turns as the runner adds them, then each image round as a stand-in picture."""
    from benchmarks.views import public_turn
    from memsys.predict import to_turn

    turns, images = [], []
    for s in conv.sessions:
        for t in s.turns:
            base = to_turn(public_turn(conv, t))
            turns.append(Turn(base.id, base.speaker, base.text, base.timestamp, base.session_id))
            if t.image_caption:
                images.append(t)
    mem.add(turns)
    counts.turns += len(turns)
    for t in images:
        seed = int(hashlib.sha256(f"{conv.id}/{t.id}".encode()).hexdigest()[:8], 16)  # one picture per round
        stand_in = _bytes(synthetic_scene(seed), "JPEG", quality=85)  # SYNTHETIC: real images are LFS-only
        if ingest_image(mem, stand_in, t.image_caption, timestamp=t.timestamp, session_id=t.session_id,
                        image_id=t.image_id, id=f"{t.id}:img", source_id=t.id, speaker=t.speaker):
            counts.image_maus += 1
        counts.images += 1


def _retrieve_at_budgets(conv: Any, mem: Memory, budgets: list[int], stats: dict[int, _BudgetStats]) -> None:
    qvecs = mem.embedder.embed([q.question for q in conv.questions])
    for q, qvec in zip(conv.questions, qvecs):
        for b in budgets:
            stats[b].record(mem.retriever.retrieve(q.question, budget_tokens=b, query_vec=qvec).context, b)


def bench_level3_budget(dialog_dir: Path, root: Path, embedder_name: str, budgets: list[int],
                        max_topics: int | None) -> dict[str, Any]:
    from benchmarks.datasets.memgallery import load_memgallery

    bench = load_memgallery(dialog_dir)
    convs = bench.conversations[:max_topics] if max_topics else bench.conversations
    cfg = _level3_config(embedder_name)
    stats = {b: _BudgetStats() for b in budgets}
    t0 = time.perf_counter()
    counts = _TopicCounts()
    for ci, conv in enumerate(convs):
        mem = Memory.create(root / f"mg-{ci}", cfg)
        _topic_memory(conv, mem, counts)
        _retrieve_at_budgets(conv, mem, budgets, stats)
        mem.close()
    out: dict[str, Any] = {"topics": len(convs), "turns": counts.turns, "image_rounds": counts.images,
                           "image_maus": counts.image_maus, "embedder": embedder_name,
                           "images": "SYNTHETIC stand-ins with the real captions (real images absent offline)",
                           "seconds": round(time.perf_counter() - t0, 1)}
    for b, st in stats.items():
        out[f"B={b}"] = st.summary()
    return out


# ----------------------------------------------------------------------------- main
def run_bench(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    report: dict[str, Any] = {"machine": {"python": platform.python_version(), "cpus": torch.get_num_threads(),
                                          "platform": platform.platform()},
                              "encoder": "perceptual (NOT semantic; CLIP weights unavailable offline)"}
    dialog = Path(args.data) if args.data else data_dir() / "mem-gallery" / "benchmark" / "data" / "dialog"
    with tempfile.TemporaryDirectory(prefix="bench-media-") as tmp:
        root = Path(tmp)
        timings = {}
        for name, fn in (("images", lambda: bench_images(root)), ("video", lambda: bench_video(root)),
                         ("audio", lambda: bench_audio(root))):
            t0 = time.perf_counter()
            report[name] = fn()
            timings[name] = round(time.perf_counter() - t0, 1)
        if any(dialog.glob("*.json")):
            text_cfg = MemoryConfig().ingest.text
            media_cfg = MemoryConfig().ingest.media
            report["crossmodal_memgallery"] = bench_crossmodal(dialog, text_cfg.window,
                                                               media_cfg.crossmodal_reject_above,
                                                               text_cfg.uncertain_above)
            if not args.skip_level3:
                t0 = time.perf_counter()
                report["level3_memgallery"] = bench_level3_budget(dialog, root, args.embedder, args.budgets,
                                                                  args.topics)
                timings["level3"] = round(time.perf_counter() - t0, 1)
        else:
            report["crossmodal_memgallery"] = {"skipped": f"no Mem-Gallery dialog files in {dialog}"}
        report["seconds"] = timings
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedder", choices=("minilm", "hashing"), default="minilm",
                        help="text embedder for the level-3 run (hashing: fast, not semantic)")
    parser.add_argument("--topics", type=int, default=None, help="Mem-Gallery topics for level 3 (default all 20)")
    parser.add_argument("--budgets", type=lambda s: [int(x) for x in s.split(",")], default=[1500, 6000])
    parser.add_argument("--skip-level3", action="store_true")
    parser.add_argument("--data", default=None, help="Mem-Gallery dialog folder")
    parser.add_argument("--out", type=Path, default=runs_dir() / "bench" / "media.json")
    args = parser.parse_args(argv)
    report = run_bench(args)
    write_json(args.out, report)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
