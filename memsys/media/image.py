"""Image decoding and validation, keyframe encoding, Mem-Gallery image lookup."""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from memsys.media import MediaInputError

#: PIL format name -> (mime, file extension in cold storage)
_FORMATS = {
    "JPEG": ("image/jpeg", "jpg"), "PNG": ("image/png", "png"), "GIF": ("image/gif", "gif"),
    "WEBP": ("image/webp", "webp"), "BMP": ("image/bmp", "bmp"), "TIFF": ("image/tiff", "tif"),
}
#: refuse images with more pixels than this (decompression bombs)
MAX_PIXELS = 64_000_000


@dataclass
class DecodedImage:
    data: bytes  # the bytes as given (what cold storage keeps)
    image: Any  # PIL.Image.Image, RGB
    mime: str
    ext: str
    width: int
    height: int


def read_media_bytes(source: str | Path | bytes, max_bytes: int, what: str) -> tuple[bytes, str]:
    """(bytes, name) of a path or bytes, refusing empty or oversized input with one line."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data, name = bytes(source), f"<{len(source)} bytes>"
        if len(data) > max_bytes:
            raise MediaInputError(f"{what} {name}: {len(data)} bytes over the {max_bytes}-byte cap")
    else:
        path = Path(source)
        name = str(path)
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise MediaInputError(f"{what} {name}: cannot read ({exc.strerror or exc})") from exc
        if not path.is_file():
            raise MediaInputError(f"{what} {name}: not a file")
        if size > max_bytes:
            raise MediaInputError(f"{what} {name}: {size} bytes over the {max_bytes}-byte cap")
        data = path.read_bytes()
    if not data:
        raise MediaInputError(f"{what} {name}: empty (0 bytes)")
    return data, name


def decode_image(data: bytes, name: str = "<bytes>") -> DecodedImage:
    """Fully decode an image (a truncated file fails here, not later) to RGB."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as probe:
                fmt = probe.format or ""
                if probe.width * probe.height > MAX_PIXELS:
                    raise MediaInputError(f"image {name}: {probe.width}x{probe.height} over {MAX_PIXELS} pixels")
                probe.verify()  # structure and checksums
            img = Image.open(io.BytesIO(data))
            img.load()  # pixel data (catches truncation verify() misses)
    except MediaInputError:
        raise
    except UnidentifiedImageError as exc:
        raise MediaInputError(f"image {name}: not a recognised image format") from exc
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise MediaInputError(f"image {name}: corrupt or truncated ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from exc
    mime, ext = _FORMATS.get(fmt, (Image.MIME.get(fmt, "application/octet-stream"), fmt.lower() or "img"))
    if img.mode in ("RGBA", "LA", "P"):  # flatten transparency on white, as viewers show it
        rgba = img.convert("RGBA")
        flat = Image.new("RGB", rgba.size, (255, 255, 255))
        flat.paste(rgba, mask=rgba.split()[-1])
        rgb = flat
    else:
        rgb = img.convert("RGB")
    return DecodedImage(data, rgb, mime, ext, rgb.width, rgb.height)


def encode_jpeg(image: Any, max_side: int, quality: int) -> bytes:
    """A downscaled JPEG (keyframes): bounded size whatever the source resolution."""
    from PIL import Image

    im = image.convert("RGB")
    scale = max_side / max(im.size)
    if scale < 1:
        im = im.resize((max(1, round(im.width * scale)), max(1, round(im.height * scale))), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=quality, optimize=True)
    return buf.getvalue()


def _first(value: Any) -> Any:
    """Mem-Gallery stores one-element lists (``["D1:IMG_001"]``)."""
    if isinstance(value, (list, tuple)):
        return value[0] if value else None
    return value


def memgallery_image_path(round_: Mapping[str, Any] | Any, data_dir: str | Path) -> Path | None:
    """The image file of a Mem-Gallery round if it is really on disk, else None.

    ``round_`` is a raw round dict (``image_id``, ``input_image`` like
    ``["../image/<Topic>/D1_IMG_001.jpg"]``, ``image_caption``) or any object with
    ``input_image``/``image_path`` attributes. ``data_dir`` is the shared data
    folder (holding ``mem-gallery/``), the ``mem-gallery`` folder, or its
    ``benchmark/data`` folder. Images live at
    ``<data>/mem-gallery/benchmark/data/image/<Topic>/<D1_IMG_001>.jpg``; they are Git
    LFS objects, so offline they are missing or LFS pointer stubs and this returns
    None: callers then use the caption (caption mode) and should say so.
    """
    get = round_.get if isinstance(round_, Mapping) else (lambda k, d=None: getattr(round_, k, d))
    ref = _first(get("input_image")) or _first(get("image_path"))
    if not ref:
        return None
    base = Path(data_dir)
    roots = [base / "mem-gallery" / "benchmark" / "data", base / "benchmark" / "data", base]
    rel = Path(str(ref))
    parts = rel.parts
    if ".." in parts:  # "../image/<Topic>/x.jpg" is relative to the dialog folder
        parts = parts[parts.index("..") + 1:]
    candidates = [rel] if rel.is_absolute() else [root / Path(*parts) for root in roots]
    for path in candidates:
        try:
            if not path.is_file():
                continue
            if path.stat().st_size < 1024:
                with open(path, "rb") as fh:
                    if fh.read(24).startswith(b"version https://git-lfs"):
                        continue  # an LFS pointer, not the picture
            return path
        except OSError:
            continue
    return None


# ----------------------------------------------------------------------------- reader content parts
def _data_url(data: bytes, mime: str) -> str:
    import base64

    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def _image_for_reader(path: str, mime: str, max_side: int) -> tuple[bytes, str]:
    """The image bytes a reader gets: as stored, or a JPEG no larger than ``max_side``."""
    data = Path(path).read_bytes()
    if mime in ("image/jpeg", "image/png", "image/gif", "image/webp"):
        from PIL import Image

        try:
            with Image.open(io.BytesIO(data)) as im:
                if max(im.size) <= max_side:
                    return data, mime
                return encode_jpeg(im, max_side, 85), "image/jpeg"
        except Exception:
            return data, mime
    decoded = decode_image(data, path)  # bmp/tiff: readers want jpeg/png
    return encode_jpeg(decoded.image, max_side, 85), "image/jpeg"


def image_part(path: str | Path, max_side: int = 2048) -> dict[str, Any]:
    """One OpenAI ``image_url`` content part for an image file (e.g. a question's image)."""
    import mimetypes

    mime = mimetypes.guess_type(str(path))[0] or "image/jpeg"
    data, mime = _image_for_reader(str(path), mime, max_side)
    return {"type": "image_url", "image_url": {"url": _data_url(data, mime)}}


def context_to_content_parts(context: Any, vision: bool, *, audio: bool = False, include_metadata: bool = True,
                             include_graph: bool = True, max_side: int = 2048,
                             facts_style: str = "lines") -> list[dict[str, Any]]:
    """OpenAI chat content parts for a retrieved ``Context`` (memsys.retrieve.context).

    Each memory is a text part ("n. [date] speaker: text") in context order. With
    ``vision=True`` the level-3 media of an item follow it: images and video
    keyframes as ``{"type": "image_url", "image_url": {"url": "data:image/...;base64,..."}}``;
    with ``audio=True`` speech clips as ``{"type": "input_audio", ...}`` (for
    audio-capable models). A text-only reader (``vision=False``) gets the
    captions/transcripts only, which are already the items' text. Consecutive
    text parts are merged. A media file that cannot be read is replaced by a
    one-line note instead of failing the whole prompt.
    """
    from memsys.records import Modality

    parts: list[dict[str, Any]] = []

    def text(t: str) -> None:
        if parts and parts[-1]["type"] == "text":
            parts[-1]["text"] += "\n" + t
        else:
            parts.append({"type": "text", "text": t})

    for n, item in enumerate(context.items, start=1):
        head = item.header(include_metadata)
        body = item.text
        if include_metadata and item.mau.details.get("resolved_times"):
            body += " (" + "; ".join(item.mau.details["resolved_times"]) + ")"
        text(f"{n}. {head} {body}".replace("  ", " ").strip())
        for media in item.media:
            try:
                if vision and media.modality in (Modality.IMAGE, Modality.VIDEO) and media.mime.startswith("image/"):
                    data, mime = _image_for_reader(media.path, media.mime, max_side)
                    label = "keyframe of the video scene above" if media.modality == Modality.VIDEO else "image above"
                    text(f"   [{label}]")
                    parts.append({"type": "image_url", "image_url": {"url": _data_url(data, mime)}})
                elif audio and media.modality == Modality.AUDIO and media.mime in ("audio/wav", "audio/x-wav"):
                    import base64

                    parts.append({"type": "input_audio", "input_audio": {
                        "data": base64.b64encode(Path(media.path).read_bytes()).decode("ascii"), "format": "wav"}})
            except (OSError, MediaInputError) as exc:
                text(f"   [{media.modality.value} unavailable: {type(exc).__name__}]")
    if include_graph and getattr(context, "graph_facts", None):
        from memsys.retrieve.facts import render_facts

        text("\n" + "\n".join(render_facts(context.graph_facts, facts_style)))
    return parts
