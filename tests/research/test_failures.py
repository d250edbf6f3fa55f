"""research.failures: one test per failure class, stderr produced by real subprocesses where cheap."""

from __future__ import annotations

import http.server
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from memsys import errors as memsys_errors
from research.failures import (
    KIND_TO_CLASS,
    POLICIES,
    Failure,
    FailureClass,
    classify_exception,
    classify_failure,
    classify_result,
    edited_location,
    format_error_line,
    infeasible_config,
    parse_traceback,
)

REPO = Path(__file__).resolve().parents[2]


def run_python(code: str, cwd: Path | None = None, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(cwd or REPO), str(REPO)])
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": path}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def classify(proc: subprocess.CompletedProcess[str] | None = None, **overrides) -> Failure | None:
    args = dict(exit_code=None, signal=None, timed_out=False, oom_killed=False, stderr="", result_status=None,
                metrics=None, parent_metrics=None, code_changed=True, edited_paths=[])
    if proc is not None:
        code = proc.returncode
        args.update(exit_code=code if code >= 0 else None, signal=-code if code < 0 else None, stderr=proc.stderr)
    args.update(overrides)
    return classify_failure(**args)


@pytest.fixture
def edited_pkg(tmp_path: Path) -> Path:
    pkg = tmp_path / "pkgx"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    return tmp_path


class _StatusHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server API)
        status = int(self.path.strip("/"))
        self.send_response(status)
        self.end_headers()
        self.wfile.write(b'{"error": "nope"}')

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def http_status_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _StatusHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def fetch_code(url: str) -> str:
    return f"import urllib.request; urllib.request.urlopen({url!r}, timeout=5)"


# -- one test per class ------------------------------------------------------------
def test_auth_from_real_http_401(http_status_server):
    proc = run_python(fetch_code(http_status_server + "/401"))
    failure = classify(proc)
    assert failure.cls is FailureClass.AUTH and failure.is_infrastructure
    assert "local backend" in failure.suggested_fix and failure.severity == "high"
    assert "401" in failure.message


def test_auth_from_real_http_403(http_status_server):
    assert classify(run_python(fetch_code(http_status_server + "/403"))).cls is FailureClass.AUTH


def test_rate_limit_from_real_http_429(http_status_server):
    failure = classify(run_python(fetch_code(http_status_server + "/429")))
    assert failure.cls is FailureClass.RATE_LIMIT
    assert "fewer parallel workers" in failure.suggested_fix


def test_api_error_from_real_http_503_and_refused_connection(http_status_server):
    assert classify(run_python(fetch_code(http_status_server + "/503"))).cls is FailureClass.API_ERROR
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = run_python(f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)")
    assert classify(proc).cls is FailureClass.API_ERROR


def test_timeout_from_flag_and_from_typed_error():
    failure = classify(exit_code=None, signal=signal.SIGKILL, timed_out=True)
    assert failure.cls is FailureClass.TIMEOUT and not failure.is_infrastructure
    assert "smaller sample" in failure.suggested_fix
    typed = classify(exit_code=1, stderr=format_error_line("timeout", "LLM call exceeded 60 s"))
    assert typed.cls is FailureClass.TIMEOUT and typed.is_infrastructure  # the endpoint's fault


def test_timeout_from_cpu_limit_signal():
    assert classify(exit_code=None, signal=signal.SIGXCPU).cls is FailureClass.TIMEOUT


def test_dependency_from_real_import_error():
    proc = run_python("import nonexistent_mod_for_test")
    failure = classify(proc)
    assert failure.cls is FailureClass.DEPENDENCY
    assert "Revert the edit that introduced the import" in failure.suggested_fix
    assert "nonexistent_mod_for_test" in failure.message


def test_dependency_on_unchanged_code_is_infrastructure():
    failure = classify(run_python("import nonexistent_mod_for_test"), code_changed=False)
    assert failure.cls is FailureClass.DEPENDENCY and failure.is_infrastructure


def test_runtime_error_points_at_innermost_edited_frame(edited_pkg: Path):
    (edited_pkg / "pkgx" / "mod.py").write_text(textwrap.dedent("""\
        def inner(x):
            return helper(x)

        def helper(x):
            return 1 / x
    """))
    proc = run_python("import json, pkgx.mod; pkgx.mod.inner(0)", cwd=edited_pkg)
    failure = classify(proc, edited_paths=["pkgx/mod.py"])
    assert failure.cls is FailureClass.RUNTIME_ERROR
    assert (failure.file, failure.line) == ("pkgx/mod.py", 5)
    assert failure.message.startswith("ZeroDivisionError: division by zero")
    assert "traceback and the diff" in failure.suggested_fix
    # a directory given as edited path matches too; outside the edit: no location
    assert classify(proc, edited_paths=["pkgx/"]).file == "pkgx/mod.py"
    assert classify(proc, edited_paths=["other/"]).file is None


def test_syntax_error_from_real_import(edited_pkg: Path):
    (edited_pkg / "pkgx" / "broken.py").write_text("def f(:\n    return 1\n")
    proc = run_python("import pkgx.broken", cwd=edited_pkg)
    failure = classify(proc, edited_paths=["pkgx/broken.py"])
    assert failure.cls is FailureClass.SYNTAX_ERROR
    assert (failure.file, failure.line) == ("pkgx/broken.py", 1)


def test_indentation_error_is_syntax_error(edited_pkg: Path):
    (edited_pkg / "pkgx" / "indent.py").write_text("def f():\nreturn 1\n")
    proc = run_python("import pkgx.indent", cwd=edited_pkg)
    assert classify(proc, edited_paths=["pkgx"]).cls is FailureClass.SYNTAX_ERROR


def test_oom_from_real_memory_error_and_flag():
    proc = run_python("x = bytearray(1 << 50)")  # 1 PiB: refused immediately
    failure = classify(proc)
    assert failure.cls is FailureClass.OOM_KILLED
    assert classify(exit_code=None, signal=signal.SIGKILL, oom_killed=True).cls is FailureClass.OOM_KILLED


def test_format_mismatch_from_missing_result_and_typed_format_error():
    failure = classify(exit_code=0, result_status="missing")
    assert failure.cls is FailureClass.FORMAT_MISMATCH
    assert classify(exit_code=0, result_status="invalid").cls is FailureClass.FORMAT_MISMATCH
    proc = run_python(
        "import sys\nfrom harness.errors import LLMResponseFormatError\n"
        "from research.failures import format_error_line\n"
        "try:\n    raise LLMResponseFormatError('reply is not JSON: \"The answer is\"')\n"
        "except LLMResponseFormatError as e:\n    print(format_error_line(e.kind, str(e)), file=sys.stderr)\n"
        "    sys.exit(1)\n"
    )
    typed = classify(proc)
    assert typed.cls is FailureClass.FORMAT_MISMATCH and "strict JSON" in typed.suggested_fix


def test_format_mismatch_from_json_decode_error():
    proc = run_python("import json; json.loads('The answer is Paris')")
    assert classify(proc).cls is FailureClass.FORMAT_MISMATCH


@pytest.mark.parametrize(
    "metrics, parent, severity",
    [
        ({"f1": math.nan, "recall": 0.5}, None, "medium"),
        ({"f1": 0.0, "recall": 0}, None, "medium"),
        ({"f1": 0.41, "recall": 0.7}, {"f1": 0.41, "recall": 0.7}, "low"),
        ({}, None, "medium"),
        ({"f1": None}, None, "medium"),
    ],
)
def test_invalid_metric(metrics, parent, severity):
    failure = classify(exit_code=0, result_status="ok", metrics=metrics, parent_metrics=parent)
    assert failure.cls is FailureClass.INVALID_METRIC and failure.severity == severity


def test_sound_metrics_are_not_a_failure():
    assert classify(exit_code=0, result_status="ok", metrics={"f1": 0.42}, parent_metrics={"f1": 0.40}) is None
    # identical metrics are fine when nothing changed (a repeated baseline)
    assert classify(exit_code=0, result_status="ok", metrics={"f1": 0.4}, parent_metrics={"f1": 0.4},
                    code_changed=False) is None


def test_forbidden_edit_from_paths_and_from_read_only_write():
    failure = classify(exit_code=0, forbidden_paths_touched=["benchmarks/metrics/f1.py"])
    assert failure.cls is FailureClass.FORBIDDEN_EDIT and "benchmarks/metrics/f1.py" in failure.message
    stderr = textwrap.dedent("""\
        Traceback (most recent call last):
          File "/work/wt/memsys/answer/run.py", line 12, in <module>
            open("/work/scorer/result.json", "w")
        OSError: [Errno 30] Read-only file system: '/work/scorer/result.json'
    """)
    ro = classify(exit_code=1, stderr=stderr, edited_paths=["memsys/answer/run.py"])
    assert ro.cls is FailureClass.FORBIDDEN_EDIT and (ro.file, ro.line) == ("memsys/answer/run.py", 12)


def test_infrastructure_from_typed_budget_and_dataset_and_external_kill():
    budget = classify(exit_code=1, stderr="log line\n" + format_error_line("budget", "USD cap 5.00 reached"))
    assert budget.cls is FailureClass.INFRASTRUCTURE and budget.severity == "fatal" and budget.is_infrastructure
    dataset = classify(exit_code=2, stderr=format_error_line("dataset", "locomo10.json not found"))
    assert dataset.cls is FailureClass.INFRASTRUCTURE
    killed = classify(exit_code=None, signal=signal.SIGKILL)
    assert killed.cls is FailureClass.INFRASTRUCTURE


def test_unknown_from_silent_nonzero_exit():
    failure = classify(run_python("import sys; print('something odd', file=sys.stderr); sys.exit(3)"))
    assert failure.cls is FailureClass.UNKNOWN and "something odd" in failure.message


def test_native_crash_is_runtime_error():
    proc = run_python("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert proc.returncode == -signal.SIGSEGV
    assert classify(proc).cls is FailureClass.RUNTIME_ERROR


# -- typed kinds, exceptions, parsing ---------------------------------------------------
def _all_memsys_error_classes() -> list[type]:
    found, pending = [], [memsys_errors.MemsysError]
    while pending:
        cls = pending.pop()
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def test_every_memsys_error_kind_is_mapped():
    missing = {c.kind for c in _all_memsys_error_classes()} - set(KIND_TO_CLASS)
    assert not missing, f"kinds without a failure class: {missing}"
    assert set(POLICIES) == set(FailureClass)


@pytest.mark.parametrize(
    "exc, expected",
    [
        (memsys_errors.LLMAuthError("403 key expired"), FailureClass.AUTH),
        (memsys_errors.LLMRateLimitError("429"), FailureClass.RATE_LIMIT),
        (memsys_errors.LLMServerError("502 after 3 retries"), FailureClass.API_ERROR),
        (memsys_errors.MissingDependencyError("faiss not installed"), FailureClass.DEPENDENCY),
        (memsys_errors.BudgetExceededError("cap"), FailureClass.INFRASTRUCTURE),
        (ModuleNotFoundError("No module named 'x'"), FailureClass.DEPENDENCY),
        (MemoryError(), FailureClass.OOM_KILLED),
        (TimeoutError("read timed out"), FailureClass.TIMEOUT),
        (KeyError("question"), FailureClass.RUNTIME_ERROR),
        (RuntimeError("HTTP 401 Unauthorized"), FailureClass.AUTH),
        (OSError(30, "Read-only file system"), FailureClass.FORBIDDEN_EDIT),
    ],
)
def test_classify_exception(exc, expected):
    assert classify_exception(exc).cls is expected


def test_classify_exception_locates_edited_frame_and_syntax_error(edited_pkg: Path):
    path = edited_pkg / "pkgx" / "boom.py"
    path.write_text("def boom():\n    raise ValueError('bad k')\n")
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    with pytest.raises(ValueError) as info:
        namespace["boom"]()
    failure = classify_exception(info.value, edited_paths=["pkgx/boom.py"])
    assert (failure.cls, failure.file, failure.line) == (FailureClass.RUNTIME_ERROR, "pkgx/boom.py", 2)
    with pytest.raises(SyntaxError) as info:
        compile("x = (\n", str(path), "exec")
    failure = classify_exception(info.value, edited_paths=[str(path)])
    assert failure.cls is FailureClass.SYNTAX_ERROR and failure.file == str(path)


def test_chained_traceback_uses_the_last_exception():
    proc = run_python("try:\n    {}['k']\nexcept KeyError:\n    import nonexistent_mod_for_test\n")
    parsed = parse_traceback(proc.stderr)
    assert parsed.short_type == "ModuleNotFoundError"
    assert classify(proc).cls is FailureClass.DEPENDENCY


def test_messages_are_one_line_and_serialisable():
    stderr = "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nValueError: a\n" + "b" * 900
    failure = classify(exit_code=1, stderr=stderr)
    assert "\n" not in failure.message and len(failure.message) <= 300
    assert failure.to_dict()["cls"] == "runtime_error"


def test_classify_result_duck_types_a_sandbox_result():
    class Result:
        exit_code, signal, timed_out, oom_killed, stderr = None, 9, True, False, ""

    failure = classify_result(Result(), result_status=None, metrics=None, parent_metrics=None,
                              code_changed=True, edited_paths=[])
    assert failure.cls is FailureClass.TIMEOUT


def test_edited_location_forms():
    assert edited_location("/wt/3/memsys/a/b.py", ["memsys/a/b.py"]) == "memsys/a/b.py"
    assert edited_location("/wt/3/memsys/a/b.py", ["memsys/a"]) == "memsys/a/b.py"
    assert edited_location("/wt/3/memsys/a/bb.py", ["memsys/a/b.py"]) is None
    assert edited_location("/wt/3/xmemsys/a/b.py", ["memsys/a/b.py"]) is None
    assert edited_location("/wt/3/memsys/a/b.py", ["/wt/3/memsys"]) == "/wt/3/memsys/a/b.py"


def test_typed_error_traceback_without_error_line():
    proc = run_python("from harness.errors import BudgetExceededError\nraise BudgetExceededError('USD cap reached')")
    failure = classify(proc)
    assert failure.cls is FailureClass.INFRASTRUCTURE and failure.severity == "fatal"
    proc = run_python("from harness.errors import LLMAuthError\nraise LLMAuthError('403 from embeddings endpoint')")
    assert classify(proc).cls is FailureClass.AUTH


def test_only_a_config_only_change_that_failed_on_its_own_account_is_an_infeasible_config() -> None:
    own = classify_exception(memsys_errors.ConfigError("answer.abstain=confidence needs llm.local.logprobs=true"),
                             code_changed=True).to_dict()
    assert own["cls"] == "runtime_error" and not own["is_infrastructure"]
    assert infeasible_config(own, [])  # TPE's draw: config overrides alone
    assert infeasible_config(own, ["configs/memory/naive.yaml"])  # the researcher edited the preset
    assert not infeasible_config(own, ["memsys/retrieve/merge.py"])  # a code edit: the code is at fault
    ours = classify_exception(memsys_errors.DatasetError("no such file"), code_changed=True).to_dict()
    assert ours["is_infrastructure"] and not infeasible_config(ours, [])
    refused = {"cls": FailureClass.LEAKAGE.value, "is_infrastructure": False}
    assert not infeasible_config(refused, []) and not infeasible_config(None, [])
