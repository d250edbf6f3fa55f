"""Image and keyframe captions from a caller's callable, so ingestion needs no LLM client.

A captioner is ``(image bytes, mime) -> caption``; :func:`llm_captioner` builds one
from any client with an OpenAI-style ``chat``. A captioner that fails becomes a note
on the item's report, never a lost image or scene.
"""

from __future__ import annotations

from typing import Any, Callable

from memsys.media.report import MediaItemReport

Captioner = Callable[[bytes, str], str]  # (image bytes, mime) -> caption


def caption_line(text: str | None) -> str | None:
    """A caller's caption with its whitespace collapsed; None when it is blank."""
    return " ".join(text.split()) if text and text.strip() else None


def call_captioner(captioner: Captioner, data: bytes, mime: str, item: MediaItemReport, what: str) -> str | None:
    try:
        text = captioner(data, mime)
    except Exception as exc:  # an LLM failure must not lose the image
        item.notes.append(f"captioner failed for {what}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return None
    text = " ".join(str(text or "").split())
    return text or None


def llm_captioner(client: Any, prompt: str = "Describe this image in one or two factual sentences: "
                  "the objects, people, text and setting you see.", max_tokens: int = 120) -> Captioner:
    """A captioner from any client with an OpenAI-style ``chat(messages, max_tokens=)``
    returning an object with ``.text`` (memsys.llm.client.LLMClient does); the model must
    accept images (``LLMConfig.supports_vision``)."""
    import base64

    def caption(data: bytes, mime: str) -> str:
        url = f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
        reply = client.chat([{"role": "user", "content": [
            {"type": "text", "text": prompt}, {"type": "image_url", "image_url": {"url": url}}]}],
            max_tokens=max_tokens)
        return str(getattr(reply, "text", reply))

    return caption
