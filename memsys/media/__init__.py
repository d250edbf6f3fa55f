"""Images, audio and video as Multimodal Atomic Units (MAUs).

Every media item goes through a novelty gate before anything is stored
(docs/design.md section 2), then becomes MAUs whose *summary* (caption, transcript or
a "[speech segment 12.3-15.8 s]" placeholder) is embedded in the text space by
``Memory.add_maus``, so text queries find media; the raw bytes go to the cold
tier (content-addressed: the same bytes are stored once) and come back at
pyramid level 3.

    from memsys.media import ingest_image, ingest_audio, ingest_video, MediaReport
    report = MediaReport()
    mau = ingest_image(mem, "photo.jpg", caption="a red kite over the beach", report=report)
    segs = ingest_audio(mem, "meeting.wav", transcript_fn=my_asr, report=report)
    scenes = ingest_video(mem, "walk.mp4", sample_fps=1.0, report=report)
    print("\\n".join(report.lines()))

A video gives one MAU per visual scene and, when it has a soundtrack
(``media.video_audio``, on by default), one audio MAU per speech segment of that
track (ids ``<video>:speechNNN``), linked to the scene it falls in, so a question
about what was said in a clip can hop to what was on screen.

Without ``report=`` a bad item raises :class:`MediaInputError` (one line); with a
report the error is recorded for that item and the caller carries on
(``ingest_files`` / ``ingest_images`` do that for a batch).

Gates (thresholds in ``MemoryConfig.ingest.media``, a :class:`MediaConfig`):

* vision (images, video frames): cosine to the reference frame; > 0.9 static
  (rejected), < 0.7 novel (new reference), in between "uncertain": an image is
  kept and flagged, a video frame stays in the current scene; the reference
  does not move on "uncertain" (see ``memsys.media.gates``).
* audio: Silero VAD (silero-vad ships its model), speech if p > 0.5; RMS energy
  < 0.01 is silence; speech shorter than 500 ms is "uncertain" (kept, flagged).
* cross-modal: an image whose caption overlaps one of the text gate's recent
  texts (Jaccard of word sets) above 0.8 is "redundant".

Image encoders (``media.image_encoder``):

* ``perceptual`` (default, offline): :class:`PerceptualImageEncoder`, a
  deterministic pixel descriptor (thumbnail + colour histogram + DCT hash). NOT
  semantic; used only for novelty, never for retrieval.
* ``clip``: :class:`ClipImageEncoder`, the paper's frozen CLIP ViT-B/32 through
  open_clip. No PyPI package ships CLIP weights, so you provide them::

      pip install 'omni-memsys[clip]'          # open-clip-torch
      # download a ViT-B-32 checkpoint (e.g. open_clip's 'openai' weights) to a file, then
      cfg = load_memory_config("omni", ["+memory.ingest.media.image_encoder=clip",
                                        "+memory.ingest.media.clip_model=ViT-B-32",
                                        "+memory.ingest.media.clip_checkpoint=/models/vit-b-32.pt"])
      # ("+" because the YAML presets do not list media keys), or on a MemoryConfig:
      cfg.ingest.media.image_encoder, cfg.ingest.media.clip_checkpoint = "clip", "/models/vit-b-32.pt"

  Missing open_clip raises ``MissingDependencyError``; a missing or unreadable
  checkpoint raises ``ModelError``. Nothing is downloaded. Any object with
  ``name``, ``dim`` and ``encode(list_of_PIL_images) -> unit-norm float32 [n, dim]``
  can be passed as ``encoder=`` instead.

Captions and transcripts come from callables, so this package does not depend on
an LLM client: ``captioner(image_bytes, mime) -> str`` (``llm_captioner(client)``
wraps any object with an OpenAI-style ``chat(messages)``), and
``transcript_fn(samples_float32_mono, sample_rate) -> str``.

For readers: ``context_to_content_parts(context, vision=True)`` turns a
retrieved ``Context`` into OpenAI chat content parts (``image_url`` with a
base64 ``data:`` URL for images and video keyframes); ``vision=False`` gives text
parts with the captions only.
"""

from __future__ import annotations

from typing import Any

from memsys.errors import InputError


class MediaInputError(InputError):
    """A media item that cannot be ingested: corrupt, empty, too big, unsupported."""

    kind = "media_input"


_LAZY = {
    "ingest_image": "memsys.media.image_ingest",
    "ingest_images": "memsys.media.ingest",
    "ingest_audio": "memsys.media.audio_ingest",
    "ingest_video": "memsys.media.video_ingest",
    "ingest_files": "memsys.media.ingest",
    "ImageItem": "memsys.media.ingest",
    "MediaReport": "memsys.media.report",
    "MediaItemReport": "memsys.media.report",
    "llm_captioner": "memsys.media.captioning",
    "context_to_content_parts": "memsys.media.image",
    "ImageEncoder": "memsys.media.encoders",
    "PerceptualImageEncoder": "memsys.media.encoders",
    "ClipImageEncoder": "memsys.media.encoders",
    "make_image_encoder": "memsys.media.encoders",
    "VisionNoveltyGate": "memsys.media.gates",
    "AudioGate": "memsys.media.gates",
    "CrossModalGate": "memsys.media.gates",
    "memgallery_image_path": "memsys.media.image",
}

__all__ = ["MediaInputError", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(module), name)
