"""Image encoders for the vision novelty gate.

Two implementations of one small interface (``encode(images) -> float32 [n, dim]``,
unit-norm rows, so a dot product is a cosine):

* :class:`PerceptualImageEncoder` (default, offline): a deterministic descriptor made
  of a mean-centred grayscale thumbnail, a centred colour histogram and a DCT
  perceptual hash. It is NOT semantic: two photos of different dogs are as far
  apart as a dog and a car. It answers "is this the same picture / the same
  scene as before?", which is all the novelty gate asks; retrieval never uses it
  (image MAUs are searched through the text embedding of their caption).
* :class:`ClipImageEncoder`: the paper's frozen CLIP ViT-B/32 through ``open_clip``
  from a user-supplied checkpoint file. No PyPI package ships CLIP weights, so it
  fails with :class:`MissingDependencyError` (no open_clip) or :class:`ModelError`
  (no/bad checkpoint) instead of trying to download anything.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

import numpy as np

from memsys.errors import ConfigError, MissingDependencyError, ModelError

if TYPE_CHECKING:  # PIL is imported lazily: text-only users need not install it
    from PIL.Image import Image

    from memsys.config import MediaConfig


class ImageEncoder(ABC):
    name: str
    dim: int
    #: True when cosine between vectors reflects meaning (CLIP), False for pixel descriptors
    semantic: bool = False

    @abstractmethod
    def encode(self, images: Sequence["Image"]) -> np.ndarray:
        """Unit-norm float32 rows, one per image."""

    def encode_one(self, image: "Image") -> np.ndarray:
        return self.encode([image])[0]


def _unit(x: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(x))
    return (x / n).astype(np.float32) if n > 1e-12 else np.zeros_like(x, dtype=np.float32)


@lru_cache(maxsize=4)
def _dct_matrix(n: int) -> np.ndarray:
    """Orthonormal DCT-II basis (rows = frequencies); avoids a scipy dependency."""
    k = np.arange(n)[:, None]
    i = np.arange(n)[None, :]
    m = np.cos(np.pi * (2 * i + 1) * k / (2 * n)) * np.sqrt(2.0 / n)
    m[0] /= np.sqrt(2.0)
    return m


class PerceptualImageEncoder(ImageEncoder):
    """Deterministic pixel descriptor for novelty gating. NOT a semantic embedding.

    Blocks (each unit-normalised, then weighted so the overall cosine is the
    weighted mean of the block cosines):

    * thumbnail: ``thumb x thumb`` grayscale, mean-centred (normalised cross-correlation);
    * histogram: ``bins^3`` RGB histogram minus the uniform histogram;
    * phash: signs of the ``hash x hash`` low-frequency DCT coefficients of a
      32x32 grayscale image (DC dropped) around their median, as +-1.

    Mean-centring makes unrelated pictures score near 0 and the same picture
    (re-encoded, resized, slightly shifted) score above 0.9, so the CLIP thresholds
    of docs/design.md section 2 (0.9 / 0.7) keep their meaning. A flat (constant) image has no
    texture: its thumbnail and hash blocks are zero and only the colour counts.
    """

    semantic = False

    def __init__(self, thumb: int = 16, bins: int = 4, hash_size: int = 8,
                 weights: tuple[float, float, float] = (0.45, 0.2, 0.35)):
        self.thumb, self.bins, self.hash_size = thumb, bins, hash_size
        self.weights = weights
        self.dim = thumb * thumb + bins ** 3 + hash_size * hash_size - 1
        self.name = f"perceptual-t{thumb}-h{bins}-p{hash_size}"

    def _describe(self, image: "Image") -> np.ndarray:
        from PIL import Image as PILImage

        rgb = image.convert("RGB")
        gray = rgb.convert("L")
        thumb = np.asarray(gray.resize((self.thumb, self.thumb), PILImage.Resampling.BOX), np.float32).ravel()
        thumb = _unit(thumb - thumb.mean()) if thumb.std() > 1.0 else np.zeros_like(thumb)

        hist = _unit(self._soft_histogram(np.asarray(rgb.resize((64, 64), PILImage.Resampling.BOX), np.float64)))

        g32 = np.asarray(gray.resize((32, 32), PILImage.Resampling.LANCZOS), np.float64)
        d = _dct_matrix(32)
        coeffs = (d @ g32 @ d.T)[: self.hash_size, : self.hash_size].ravel()[1:]  # drop DC
        if np.abs(coeffs).max() < 1e-6:  # flat image: no structure to hash
            phash = np.zeros(coeffs.shape, np.float32)
        else:
            phash = _unit(np.where(coeffs > np.median(coeffs), 1.0, -1.0).astype(np.float32))

        wt, wh, wp = (np.sqrt(w) for w in self.weights)
        return _unit(np.concatenate([wt * thumb, wh * hist, wp * phash]))

    def _soft_histogram(self, rgb: np.ndarray) -> np.ndarray:
        """RGB histogram with trilinear soft binning, minus the uniform histogram.

        Hard bins make a flat region jump between bins under a small brightness
        change; soft bins move its mass gradually.
        """
        b = self.bins
        pos = rgb.reshape(-1, 3) / 255.0 * (b - 1)
        lo = np.clip(np.floor(pos).astype(np.int64), 0, b - 2)
        frac = pos - lo
        hist = np.zeros(b ** 3)
        for dr in (0, 1):
            for dg in (0, 1):
                for db in (0, 1):
                    w = (np.where(dr, frac[:, 0], 1 - frac[:, 0]) * np.where(dg, frac[:, 1], 1 - frac[:, 1])
                         * np.where(db, frac[:, 2], 1 - frac[:, 2]))
                    code = ((lo[:, 0] + dr) * b + lo[:, 1] + dg) * b + lo[:, 2] + db
                    hist += np.bincount(code, weights=w, minlength=b ** 3)
        return (hist / hist.sum() - 1.0 / b ** 3).astype(np.float32)

    def encode(self, images: Sequence["Image"]) -> np.ndarray:
        if not images:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self._describe(im) for im in images]).astype(np.float32)


class ClipImageEncoder(ImageEncoder):
    """Frozen CLIP image tower via open_clip, from a checkpoint file you provide.

    ``ClipImageEncoder("ViT-B-32", "/models/clip-vit-b-32.pt")``. open_clip is
    imported lazily on construction; nothing is downloaded.
    """

    semantic = True

    def __init__(self, model: str = "ViT-B-32", checkpoint: str | Path | None = None, device: str = "cpu"):
        try:
            import open_clip  # type: ignore[import-not-found]
        except ImportError as exc:
            raise MissingDependencyError(
                "open_clip is not installed: pip install 'omni-memsys[clip]' (open-clip-torch), "
                "or use media.image_encoder=perceptual"
            ) from exc
        if not checkpoint:
            raise ModelError(
                "CLIP image encoder needs a checkpoint file (media.clip_checkpoint): no PyPI package ships "
                "CLIP weights; download e.g. ViT-B-32 'openai' weights and point the config at the file, "
                "or use media.image_encoder=perceptual"
            )
        path = Path(checkpoint).expanduser()
        if not path.is_file():
            raise ModelError(f"CLIP checkpoint not found: {path} (media.clip_checkpoint)")
        try:
            clip_model, _, preprocess = open_clip.create_model_and_transforms(
                model, pretrained=str(path), device=device)
        except Exception as exc:  # open_clip raises RuntimeError/KeyError/... for bad files
            raise ModelError(f"cannot load CLIP {model} from {path}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from exc
        clip_model.eval()
        self._model, self._preprocess, self._device = clip_model, preprocess, device
        self._lock = threading.Lock()
        self.name = f"clip-{model}-{path.name}"
        self.dim = int(getattr(getattr(clip_model, "visual", None), "output_dim", 0)) or self._probe_dim()

    def _probe_dim(self) -> int:
        from PIL import Image as PILImage

        return int(self.encode([PILImage.new("RGB", (32, 32))]).shape[1])

    def encode(self, images: Sequence["Image"]) -> np.ndarray:
        import torch

        if not images:
            return np.zeros((0, getattr(self, "dim", 0)), np.float32)
        batch = torch.stack([self._preprocess(im.convert("RGB")) for im in images]).to(self._device)
        with self._lock, torch.no_grad():
            feats = self._model.encode_image(batch)
        x = feats.float().cpu().numpy()
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return (x / norms).astype(np.float32)


_ENCODERS: dict[tuple, ImageEncoder] = {}
_ENCODERS_LOCK = threading.Lock()


def make_image_encoder(cfg: "MediaConfig") -> ImageEncoder:
    """The configured encoder, built once per process and configuration."""
    key = (cfg.image_encoder, cfg.clip_model, cfg.clip_checkpoint, cfg.clip_device)
    with _ENCODERS_LOCK:
        if key not in _ENCODERS:
            if cfg.image_encoder == "perceptual":
                _ENCODERS[key] = PerceptualImageEncoder()
            elif cfg.image_encoder == "clip":
                _ENCODERS[key] = ClipImageEncoder(cfg.clip_model, cfg.clip_checkpoint, cfg.clip_device)
            else:
                raise ConfigError(f"unknown media.image_encoder '{cfg.image_encoder}' (perceptual | clip)")
        return _ENCODERS[key]
