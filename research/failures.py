"""Classify a failed or suspicious evaluation run, so the healer can apply a targeted fix.

Pure: no I/O. Inputs are what the sandbox reports (exit code, signal, timeout/OOM
flags, stderr), what the loop read from the result file, and which files the
experiment edited. The evaluation subprocess prints a last line
`MEMSYS_ERROR kind=<kind> message=<msg>` for typed errors (kinds are the `kind`
attributes of memsys/errors.py); tracebacks and HTTP texts are recognised otherwise.

Severity: low = record and move on; medium = one targeted repair or retry;
high = the same action fails again (switch approach or backend); fatal = stop the loop.
"""

from __future__ import annotations

import errno
import math
import re
import signal as _signal
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any, Literal

from harness.errors import MemsysError

Severity = Literal["low", "medium", "high", "fatal"]
ResultStatus = Literal["ok", "missing", "invalid"]

ERROR_LINE_PREFIX = "MEMSYS_ERROR"
MAX_MESSAGE_CHARS = 300
#: how many trailing stderr lines are searched for HTTP texts when there is no traceback
STDERR_TAIL_LINES = 40
#: metrics closer than this to the parent's count as identical
IDENTICAL_TOLERANCE = 1e-12
#: metrics that measure time or money, not the memory system: left out of "identical to the
#: parent" (every run's wall_s differs, so with them the check could never fire)
VOLATILE_METRICS = frozenset({"wall_s", "seconds_per_question", "cost_usd"})


class FailureClass(StrEnum):
    AUTH = "auth"
    RATE_LIMIT = "rate_limit"
    API_ERROR = "api_error"
    TIMEOUT = "timeout"
    DEPENDENCY = "dependency"
    RUNTIME_ERROR = "runtime_error"
    SYNTAX_ERROR = "syntax_error"
    OOM_KILLED = "oom_killed"
    FORMAT_MISMATCH = "format_mismatch"
    INVALID_METRIC = "invalid_metric"
    FORBIDDEN_EDIT = "forbidden_edit"
    IDENTICAL_CONDITIONS = "identical_conditions"
    NO_EFFECT = "no_effect"
    LEAKAGE = "leakage"
    INFRASTRUCTURE = "infrastructure"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class FailurePolicy:
    severity: Severity
    is_infrastructure: bool  # our side (keys, endpoint, sandbox, data) vs the agent's code
    suggested_fix: str


_REPAIR = "Send the traceback and the diff to the researcher for a repair edit (at most 3 repair cycles)."
POLICIES: dict[FailureClass, FailurePolicy] = {
    FailureClass.AUTH: FailurePolicy(
        "high", True, "Credentials rejected (401/403): do not retry; switch to the local backend "
        "(embedded LLM / local sentence-transformer) and re-run."),
    FailureClass.RATE_LIMIT: FailurePolicy(
        "medium", True, "Back off exponentially and run fewer parallel workers, then retry the same run."),
    FailureClass.API_ERROR: FailurePolicy(
        "medium", True, "Retry with backoff; if the endpoint keeps failing, switch to the local backend."),
    FailureClass.TIMEOUT: FailurePolicy(
        "medium", False, "Retry once on a smaller sample; if it times out again, mark the experiment failed."),
    FailureClass.DEPENDENCY: FailurePolicy(
        "high", False, "Revert the edit that introduced the import (no packages can be added); "
        "ask for an implementation using installed libraries."),
    FailureClass.RUNTIME_ERROR: FailurePolicy("medium", False, _REPAIR),
    FailureClass.SYNTAX_ERROR: FailurePolicy("medium", False, _REPAIR),
    FailureClass.OOM_KILLED: FailurePolicy(
        "medium", False, "Retry once on a smaller sample; if it is killed again, mark the experiment failed."),
    FailureClass.FORMAT_MISMATCH: FailurePolicy(
        "medium", False, "Re-ask with the JSON schema / strict JSON (response_format); if the result file "
        "is missing or malformed, send the stderr tail and the diff for a repair edit."),
    FailureClass.INVALID_METRIC: FailurePolicy(
        "medium", False, "Do not accept the result: send the metrics and the diff to the researcher "
        "(NaN/zero usually means empty or unparsed answers)."),
    FailureClass.FORBIDDEN_EDIT: FailurePolicy(
        "high", False, "Revert the edit: only the mutable surface may change; the scorer, data and "
        "results are read-only."),
    FailureClass.IDENTICAL_CONDITIONS: FailurePolicy(
        "low", False, "The proposal repeats a change already evaluated from the same commit: re-ask for a "
        "different one (at a higher temperature); if it repeats again, skip it without evaluating."),
    FailureClass.NO_EFFECT: FailurePolicy(
        "low", False, "The reader-free screen found the change leaves every scored input unchanged: it was "
        "rejected without evaluating; propose a change that reaches the retrieved context or the answer."),
    FailureClass.LEAKAGE: FailurePolicy(
        "high", False, "The committed change carries benchmark data (question text, gold answers, evidence or "
        "question ids, a data table or file): it is refused before evaluation; propose a change that works on "
        "any conversation, not one that remembers this benchmark's questions."),
    FailureClass.INFRASTRUCTURE: FailurePolicy(
        "fatal", True, "Our side (sandbox, disk, dataset, budget): do not charge the experiment; fix the "
        "environment, then resume."),
    FailureClass.UNKNOWN: FailurePolicy(
        "medium", False, "Send the stderr tail and the diff to the researcher once; stop if it repeats."),
}

#: rejected before any evaluation: the proposal was screened out, nothing broke (reports name them, the
#: failure tables leave them out)
PRE_EVALUATION_REJECTIONS = frozenset({FailureClass.IDENTICAL_CONDITIONS, FailureClass.NO_EFFECT})

#: what a change to the config alone can cause by itself: such a failure marks the config infeasible (the Optuna
#: study draws its region less), where an infrastructure failure or a refused proposal says nothing of the config
CONFIG_FAILURES = frozenset({FailureClass.RUNTIME_ERROR, FailureClass.TIMEOUT, FailureClass.OOM_KILLED,
                             FailureClass.FORMAT_MISMATCH, FailureClass.INVALID_METRIC})


def infeasible_config(failure: Mapping[str, Any] | None, edited_paths: Sequence[str]) -> bool:
    """Whether an experiment's final failure (``Failure.to_dict()``) is its config's own: the candidate's
    (not our side's) failure, of a kind in ``CONFIG_FAILURES``, after a change that edited nothing but
    ``configs/memory/`` (a code edit's NameError says nothing about the config it ran with)."""
    if not failure or failure.get("is_infrastructure"):
        return False
    code_edited = any(not _norm(p).startswith("configs/memory/") for p in edited_paths)
    return not code_edited and failure.get("cls") in CONFIG_FAILURES  # StrEnum: a class equals its value


#: `kind` of memsys.errors classes -> failure class (a test checks every kind is mapped)
KIND_TO_CLASS: dict[str, FailureClass] = {
    "auth": FailureClass.AUTH,
    "rate_limit": FailureClass.RATE_LIMIT,
    "api_error": FailureClass.API_ERROR,
    "llm": FailureClass.API_ERROR,
    "timeout": FailureClass.TIMEOUT,
    "format": FailureClass.FORMAT_MISMATCH,
    "prediction_format": FailureClass.FORMAT_MISMATCH,
    "budget": FailureClass.INFRASTRUCTURE,
    "judge_format": FailureClass.INFRASTRUCTURE,  # the trusted judge's reply: never the candidate's fault
    "dependency": FailureClass.DEPENDENCY,
    "model": FailureClass.DEPENDENCY,
    "dataset": FailureClass.INFRASTRUCTURE,
    "cache": FailureClass.INFRASTRUCTURE,
    "config": FailureClass.RUNTIME_ERROR,
    "input": FailureClass.RUNTIME_ERROR,
    "duplicate_id": FailureClass.RUNTIME_ERROR,
    "store": FailureClass.RUNTIME_ERROR,
    "store_corrupt": FailureClass.RUNTIME_ERROR,
    "store_version": FailureClass.RUNTIME_ERROR,
    "store_readonly": FailureClass.RUNTIME_ERROR,
    "memsys": FailureClass.RUNTIME_ERROR,
    "run_folder": FailureClass.INFRASTRUCTURE,
    "media_input": FailureClass.RUNTIME_ERROR,
    # the research loop's own errors
    "edit_apply": FailureClass.FORMAT_MISMATCH,
    "forbidden_edit": FailureClass.FORBIDDEN_EDIT,
    "research": FailureClass.INFRASTRUCTURE,
    "trajectory": FailureClass.INFRASTRUCTURE,
    "workspace": FailureClass.INFRASTRUCTURE,
    "run_state": FailureClass.INFRASTRUCTURE,
    "evaluation": FailureClass.INFRASTRUCTURE,
    "executor": FailureClass.INFRASTRUCTURE,
    "weak_sandbox": FailureClass.INFRASTRUCTURE,
    "preset": FailureClass.FORBIDDEN_EDIT,
}
#: per-kind overrides of the class policy
_KIND_FIXES: dict[str, tuple[Severity, str]] = {
    "budget": ("fatal", "Token/USD budget spent: stop the loop and report the best result so far."),
    "dataset": ("fatal", "Dataset missing or unreadable: re-run the dataset preparation, then resume."),
    "model": ("high", "Model not loadable offline: revert the edit that changed the model, "
              "or use the bundled all-MiniLM-L6-v2."),
}
#: typed kinds that only say "the endpoint failed": their message may name the HTTP status
_GENERIC_ENDPOINT_KINDS = ("api_error", "llm")
_TYPED_TIMEOUT_IS_INFRA = True  # an LLM/endpoint timeout is the endpoint's, not the edit's

# exception class names (any module) -> class; checked along the MRO, most specific first
_EXCEPTION_NAMES: dict[str, FailureClass] = {
    **{n: FailureClass.SYNTAX_ERROR for n in ("SyntaxError", "IndentationError", "TabError")},
    **{n: FailureClass.DEPENDENCY for n in ("ModuleNotFoundError", "ImportError")},
    **{n: FailureClass.OOM_KILLED for n in ("MemoryError", "OutOfMemoryError")},
    **{n: FailureClass.AUTH for n in ("AuthenticationError", "PermissionDeniedError")},
    "RateLimitError": FailureClass.RATE_LIMIT,
    **{n: FailureClass.TIMEOUT for n in (
        "TimeoutError", "APITimeoutError", "ReadTimeout", "ConnectTimeout", "TimeoutExpired", "timeout")},
    **{n: FailureClass.API_ERROR for n in (
        "APIConnectionError", "InternalServerError", "ServiceUnavailableError", "APIStatusError",
        "ConnectionRefusedError", "ConnectionResetError", "RemoteDisconnected", "ConnectError")},
    "JSONDecodeError": FailureClass.FORMAT_MISMATCH,
}
# class names that say little: their message decides (HTTP texts), else runtime_error
_HTTP_STATUS = r"\b(?:error code|status(?:[ _]code)?|http)\W{0,3}"
_HTTP_PATTERNS: tuple[tuple[FailureClass, re.Pattern[str]], ...] = (
    (FailureClass.AUTH, re.compile(
        _HTTP_STATUS + r"(?:401|403)\b|\b(?:401|403)\W{1,3}(?:unauthori[sz]ed|forbidden|client error)"
        r"|\bunauthori[sz]ed\b|invalid[ _-]?api[ _-]?key|incorrect api key|expired (?:api )?key", re.I)),
    (FailureClass.RATE_LIMIT, re.compile(
        _HTTP_STATUS + r"429\b|\b429\W{1,3}(?:too many|client error)|too many requests"
        r"|rate[ _-]?limit(?:ed)?\b", re.I)),
    (FailureClass.API_ERROR, re.compile(
        _HTTP_STATUS + r"5\d\d\b|\b5\d\d\W{1,3}(?:server error|bad gateway|service|gateway)"
        r"|internal server error|service unavailable|bad gateway|connection (?:refused|reset|error)", re.I)),
)

_TB_HEADER = "Traceback (most recent call last):"
_FRAME_RE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)')
_EXC_LINE_RE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<msg>.*))?$")
_ERROR_LINE_RE = re.compile(rf"^{ERROR_LINE_PREFIX} kind=(?P<kind>\S+)(?: message=(?P<msg>.*))?$")


@dataclass(frozen=True)
class Failure:
    cls: FailureClass
    severity: Severity
    is_infrastructure: bool
    message: str
    file: str | None = None
    line: int | None = None
    suggested_fix: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["cls"] = self.cls.value
        return data


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def format_error_line(kind: str, message: str) -> str:
    """The last stderr line an evaluation process prints for a typed error."""
    return f"{ERROR_LINE_PREFIX} kind={kind} message={one_line(message)}"


def _failure(cls: FailureClass, message: str, *, code_changed: bool, file: str | None = None,
             line: int | None = None, severity: Severity | None = None,
             infrastructure: bool | None = None, fix: str | None = None) -> Failure:
    policy = POLICIES[cls]
    failure = Failure(
        cls=cls,
        severity=severity or policy.severity,
        is_infrastructure=policy.is_infrastructure if infrastructure is None else infrastructure,
        message=one_line(message),
        file=file,
        line=line,
        suggested_fix=fix or policy.suggested_fix,
    )
    if (not code_changed and not failure.is_infrastructure and cls is not FailureClass.FORBIDDEN_EDIT
            and cls not in PRE_EVALUATION_REJECTIONS):
        # the unchanged code fails too: nothing for the researcher to repair (a screened-out proposal
        # never ran, so it says nothing about the base code)
        failure = replace(failure, is_infrastructure=True, severity="high",
                          suggested_fix="The unchanged code fails as well: fix the base code or the "
                          "environment before running experiments.")
    return failure


# -- locating the edited frame ---------------------------------------------------
def _norm(path: str) -> str:
    return path.replace("\\", "/").rstrip("/")


def edited_location(path: str, edited_paths: Sequence[str]) -> str | None:
    """`path` as the edit names it (repo-relative when the edit is) if it lies in an edited path."""
    path = _norm(path)
    for edited in edited_paths:
        target = _norm(edited)
        if not target:
            continue
        if target.startswith("/"):
            if path == target or path.startswith(target + "/"):
                return path
            continue
        target = target.removeprefix("./")
        if path == target or path.startswith(target + "/"):
            return path
        for candidate in ("/" + target, "/" + target + "/"):
            index = path.rfind(candidate)
            if index >= 0 and (path.endswith("/" + target) or candidate.endswith("/")):
                return path[index + 1 :]
    return None


def _pick_frame(frames: Sequence[tuple[str, int]], edited_paths: Sequence[str]) -> tuple[str | None, int | None]:
    for file, line in reversed(frames):  # innermost first
        location = edited_location(file, edited_paths)
        if location is not None:
            return location, line
    return None, None


# -- parsing stderr ----------------------------------------------------------------
@dataclass(frozen=True)
class ParsedTraceback:
    exc_type: str  # as printed, possibly qualified (memsys.errors.LLMAuthError)
    message: str
    frames: tuple[tuple[str, int], ...]

    @property
    def short_type(self) -> str:
        return self.exc_type.rsplit(".", 1)[-1]


def parse_traceback(stderr: str) -> ParsedTraceback | None:
    """The last Python traceback in `stderr`: final exception and (file, line) frames."""
    lines = stderr.splitlines()
    starts = [i for i, text in enumerate(lines) if text.strip() == _TB_HEADER]
    if not starts:
        return None
    frames: list[tuple[str, int]] = []
    for text in lines[starts[-1] + 1 :]:
        match = _FRAME_RE.match(text)
        if match:
            frames.append((match["file"], int(match["line"])))
            continue
        if text[:1].isspace() or not text.strip():
            continue  # source lines, carets, blank lines
        exc = _EXC_LINE_RE.match(text.strip())
        if exc:
            return ParsedTraceback(exc["type"], exc["msg"] or "", tuple(frames))
        break
    return None


def parse_error_line(stderr: str) -> tuple[str, str] | None:
    """(kind, message) of the last `MEMSYS_ERROR kind=... message=...` line, if any."""
    for text in reversed(stderr.splitlines()):
        match = _ERROR_LINE_RE.match(text.strip())
        if match:
            return match["kind"], (match["msg"] or "").strip()
    return None


def _http_class(text: str) -> FailureClass | None:
    for cls, pattern in _HTTP_PATTERNS:
        if pattern.search(text):
            return cls
    return None


def _class_for_names(names: Sequence[str], message: str) -> FailureClass:
    """Failure class for an exception given its class names (most specific first)."""
    for name in names:
        if name in _EXCEPTION_NAMES:
            return _EXCEPTION_NAMES[name]
    if "Read-only file system" in message:
        return FailureClass.FORBIDDEN_EDIT
    if "No space left on device" in message:
        return FailureClass.INFRASTRUCTURE
    return _http_class(message) or FailureClass.RUNTIME_ERROR


def memsys_kinds() -> dict[str, str]:
    """Class name -> `kind` for every MemsysError subclass defined so far (computed per call:
    subclasses may be defined by modules imported after this one)."""
    found: dict[str, str] = {}
    pending = [MemsysError]
    while pending:
        cls = pending.pop()
        found[cls.__name__] = cls.kind
        pending.extend(cls.__subclasses__())
    return found


def _typed(kind: str, message: str, *, code_changed: bool, file: str | None = None,
           line: int | None = None) -> Failure:
    cls = KIND_TO_CLASS.get(kind, FailureClass.UNKNOWN)
    if kind in _GENERIC_ENDPOINT_KINDS:
        # e.g. the runner's "all 12 reader calls failed; first: rate_limit: ... (HTTP 429)"
        cls = _http_class(message) or cls
    severity, fix = _KIND_FIXES.get(kind, (None, None))
    infrastructure = True if kind == "timeout" and _TYPED_TIMEOUT_IS_INFRA else None
    return _failure(cls, f"{kind}: {message}", code_changed=code_changed, file=file, line=line,
                    severity=severity, infrastructure=infrastructure, fix=fix)


# -- metrics -------------------------------------------------------------------------
def _metric_failure(metrics: Mapping[str, Any] | None, parent: Mapping[str, Any] | None,
                    code_changed: bool) -> Failure | None:
    if metrics is None:
        return None
    if not metrics:
        return _failure(FailureClass.INVALID_METRIC, "result has no metric values", code_changed=code_changed)
    values: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return _failure(FailureClass.INVALID_METRIC, f"metric {key} is not a number: {value!r}",
                            code_changed=code_changed)
        values[key] = float(value)
    bad = sorted(k for k, v in values.items() if not math.isfinite(v))
    if bad:
        return _failure(FailureClass.INVALID_METRIC, f"non-finite metrics: {', '.join(bad)}",
                        code_changed=code_changed)
    if all(v == 0.0 for v in values.values()):
        return _failure(FailureClass.INVALID_METRIC, f"all {len(values)} metrics are zero",
                        code_changed=code_changed)
    stable = {k: v for k, v in values.items() if k not in VOLATILE_METRICS}
    if code_changed and parent and stable and set(parent) - VOLATILE_METRICS == set(stable) and all(
        isinstance(parent[k], (int, float)) and abs(float(parent[k]) - v) <= IDENTICAL_TOLERANCE
        for k, v in stable.items()
    ):
        return _failure(FailureClass.INVALID_METRIC, "metrics identical to the parent although the code changed",
                        code_changed=code_changed, severity="low",
                        fix="The edit had no measurable effect: check that the changed code path runs "
                        "(config wired, function called) before iterating on it.")
    return None


# -- public API ------------------------------------------------------------------------
def classify_failure(
    *,
    exit_code: int | None,
    signal: int | None,
    timed_out: bool,
    oom_killed: bool,
    stderr: str,
    result_status: ResultStatus | None,
    metrics: Mapping[str, Any] | None,
    parent_metrics: Mapping[str, Any] | None,
    code_changed: bool,
    edited_paths: Sequence[str],
    forbidden_paths_touched: Sequence[str] = (),
) -> Failure | None:
    """The failure of one evaluation run, or None when the run and its metrics look sound.

    Order: forbidden edits, timeout, OOM, the typed `MEMSYS_ERROR` line, the Python
    traceback, fatal signals, HTTP texts, non-zero exit; then for a clean exit the
    result file status and the metric values.
    """
    tb = parse_traceback(stderr)
    file, line = _pick_frame(tb.frames, edited_paths) if tb else (None, None)
    if forbidden_paths_touched:
        return _failure(FailureClass.FORBIDDEN_EDIT, "edit touches read-only paths: "
                        + ", ".join(forbidden_paths_touched), code_changed=True)
    if timed_out:
        return _failure(FailureClass.TIMEOUT, "killed at the wall-clock timeout", code_changed=code_changed)
    if oom_killed:
        return _failure(FailureClass.OOM_KILLED, "out of memory (MemoryError or killed at the memory limit)",
                        code_changed=code_changed, file=file, line=line)
    typed = parse_error_line(stderr)
    if typed is not None and exit_code != 0:
        return _typed(*typed, code_changed=code_changed, file=file, line=line)
    failed = exit_code != 0 or signal is not None
    if failed and tb is not None:
        kind = memsys_kinds().get(tb.short_type)
        if kind is not None:  # a typed error that did not print its MEMSYS_ERROR line
            return _typed(kind, tb.message, code_changed=code_changed, file=file, line=line)
        cls = _class_for_names([tb.short_type], tb.message)
        return _failure(cls, f"{tb.short_type}: {tb.message}".rstrip(": "), code_changed=code_changed,
                        file=file, line=line)
    if signal is not None:
        return _signal_failure(signal, code_changed)
    tail = "\n".join(stderr.splitlines()[-STDERR_TAIL_LINES:])
    if failed:
        http = _http_class(tail)
        last = next((t for t in reversed(stderr.splitlines()) if t.strip()), "")
        return _failure(http or FailureClass.UNKNOWN, f"exit {exit_code}: {last or 'no stderr output'}",
                        code_changed=code_changed)
    if result_status in ("missing", "invalid"):
        return _failure(FailureClass.FORMAT_MISMATCH, f"result file {result_status}", code_changed=code_changed)
    return _metric_failure(metrics, parent_metrics, code_changed)


def _signal_failure(sig: int, code_changed: bool) -> Failure:
    try:
        name = _signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    if sig == _signal.SIGXCPU:
        return _failure(FailureClass.TIMEOUT, "CPU-time limit exceeded (SIGXCPU)", code_changed=code_changed)
    if sig == _signal.SIGXFSZ:
        return _failure(FailureClass.RUNTIME_ERROR, "file-size limit exceeded (SIGXFSZ)", code_changed=code_changed)
    if sig in (_signal.SIGSEGV, _signal.SIGBUS, _signal.SIGILL, _signal.SIGFPE, _signal.SIGABRT):
        return _failure(FailureClass.RUNTIME_ERROR, f"native crash ({name})", code_changed=code_changed)
    if sig == _signal.SIGKILL:
        return _failure(FailureClass.INFRASTRUCTURE, "killed by SIGKILL (not at the timeout, no memory limit hit)",
                        code_changed=code_changed, severity="high",
                        fix="Killed from outside the run: check the host (OOM killer, operator); retry once.")
    return _failure(FailureClass.UNKNOWN, f"terminated by {name}", code_changed=code_changed)


def classify_result(result: Any, **kwargs: Any) -> Failure | None:
    """`classify_failure` fed from a sandbox result (anything with its attributes)."""
    return classify_failure(
        exit_code=result.exit_code, signal=result.signal, timed_out=result.timed_out,
        oom_killed=result.oom_killed, stderr=result.stderr, **kwargs,
    )


def classify_exception(exc: BaseException, *, edited_paths: Sequence[str] = (),
                       code_changed: bool = True) -> Failure:
    """Classify an exception caught in-process (typed memsys errors first, then by class names)."""
    frames: list[tuple[str, int]] = []
    tb = exc.__traceback__
    while tb is not None:  # no linecache: pure
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    if isinstance(exc, SyntaxError) and exc.filename:
        frames.append((exc.filename, exc.lineno or 0))
    file, line = _pick_frame(frames, edited_paths)
    message = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, MemsysError):
        return _typed(exc.kind, str(exc), code_changed=code_changed, file=file, line=line)
    if isinstance(exc, OSError) and exc.errno == errno.EROFS:
        cls = FailureClass.FORBIDDEN_EDIT
    elif isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        cls = FailureClass.INFRASTRUCTURE
    else:
        cls = _class_for_names([k.__name__ for k in type(exc).__mro__], str(exc))
    return _failure(cls, message, code_changed=code_changed, file=file, line=line)
