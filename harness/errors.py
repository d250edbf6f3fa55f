"""Typed errors of the memory system.

Every failure the system can report has its own class, so that callers (the CLI,
the benchmark runner, the research loop's healer) can react to the *kind* of
failure instead of parsing messages. Messages are one line and name the thing
that is wrong and where (file, record, key).
"""

from __future__ import annotations


class MemsysError(Exception):
    """Base of every error raised on purpose by this project."""

    #: short machine-readable kind, used by failure classification and logs
    kind: str = "memsys"

    def __str__(self) -> str:  # keep messages on one line
        return " ".join(super().__str__().split())


# --- configuration -----------------------------------------------------------
class ConfigError(MemsysError):
    kind = "config"


# --- input data ---------------------------------------------------------------
class InputError(MemsysError):
    """Bad user-provided input: text, turns, timestamps, dataset files."""

    kind = "input"


class DatasetError(InputError):
    kind = "dataset"


class DuplicateIdError(InputError):
    kind = "duplicate_id"


# --- storage ------------------------------------------------------------------
class StoreError(MemsysError):
    kind = "store"


class StoreCorruptError(StoreError):
    kind = "store_corrupt"


class StoreVersionError(StoreError):
    kind = "store_version"


class StoreReadOnlyError(StoreError):
    kind = "store_readonly"


# --- models -------------------------------------------------------------------
class ModelError(MemsysError):
    """An embedding / local model could not be loaded or verified."""

    kind = "model"


class MissingDependencyError(MemsysError):
    kind = "dependency"


# --- LLM ----------------------------------------------------------------------
class LLMError(MemsysError):
    kind = "llm"


class LLMAuthError(LLMError):
    """401/403: retrying cannot help; the healer may switch backends."""

    kind = "auth"


class LLMRateLimitError(LLMError):
    kind = "rate_limit"


class LLMServerError(LLMError):
    """5xx or connection failure after retries."""

    kind = "api_error"


class LLMTimeoutError(LLMError):
    kind = "timeout"


class LLMResponseFormatError(LLMError):
    """The reply did not parse as the JSON / schema we asked for."""

    kind = "format"


class BudgetExceededError(LLMError):
    """Refused before the call: it would exceed the run's token/USD cap."""

    kind = "budget"


class CacheError(LLMError):
    kind = "cache"
