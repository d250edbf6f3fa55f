"""Synthetic media for tests and media benchmarks (PIL images, espeak-ng speech, PyAV soundtracks; no files on disk)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw


def scene(seed: int, size: tuple[int, int] = (320, 240)) -> Image.Image:
    """A synthetic 'photo': coloured background with random rectangles and ellipses."""
    rng = np.random.default_rng(seed)
    im = Image.new("RGB", size, tuple(int(x) for x in rng.integers(0, 256, 3)))
    draw = ImageDraw.Draw(im)
    for _ in range(12):
        x0, y0 = int(rng.integers(0, size[0])), int(rng.integers(0, size[1]))
        w, h = (int(v) for v in rng.integers(20, 140, 2))
        shape = draw.rectangle if rng.integers(0, 2) else draw.ellipse
        shape([x0, y0, x0 + w, y0 + h], fill=tuple(int(x) for x in rng.integers(0, 256, 3)))
    return im


def espeak(text: str) -> tuple[np.ndarray, int] | None:
    """espeak-ng speech as float32 mono at its native rate (22050 Hz); None without espeak-ng."""
    import io
    import shutil
    import subprocess
    import wave

    exe = shutil.which("espeak-ng")
    if exe is None:
        return None
    out = subprocess.run([exe, "--stdout", text], check=True, capture_output=True, timeout=60).stdout
    with wave.open(io.BytesIO(out)) as w:
        rate, raw = w.getframerate(), w.readframes(w.getnframes())
    return np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0, rate


def mux_audio(video: str | Path, out: str | Path, samples: np.ndarray | None, rate: int = 16000,
              codec: str = "aac", *, corrupt: bool = False) -> Path:
    """Copy ``video``'s video packets into ``out`` and add an audio track.

    The track is ``samples`` (float32 mono) encoded with ``codec``; with
    ``corrupt=True`` it is random bytes declared as ``codec`` instead, so the
    container opens but the audio decoder fails (a damaged soundtrack).
    """
    import av

    out = Path(out)
    with av.open(str(video)) as src, av.open(str(out), "w") as dst:
        vin = src.streams.video[0]
        vout = dst.add_stream_from_template(vin)
        aout = dst.add_stream(codec, rate=rate, layout="mono")
        for packet in src.demux(vin):
            if packet.dts is None:  # the demuxer's end-of-stream marker
                continue
            packet.stream = vout
            dst.mux(packet)
        if corrupt:
            rng = np.random.default_rng(0)
            for i in range(40):
                packet = av.Packet(rng.bytes(400))
                packet.stream, packet.time_base = aout, aout.time_base
                packet.pts = packet.dts = i * 1024
                dst.mux(packet)
            return out
        if samples is None:
            raise ValueError("mux_audio needs samples unless corrupt=True")
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(samples, np.float32)[None, :], format="flt",
                                           layout="mono")
        frame.sample_rate, frame.pts = rate, 0
        for packet in aout.encode(frame):
            dst.mux(packet)
        for packet in aout.encode(None):
            dst.mux(packet)
    return out
