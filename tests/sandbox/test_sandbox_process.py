"""Process backend and the shared runner, with real child processes."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

from sandbox import BACKENDS, SandboxError, SandboxSpec, make_sandbox
from sandbox.base import G_NETWORK, G_PIDS, G_TREE_KILL
from sandbox.cgroups import GROUP_PREFIX, CgroupLimits, _own_group_dir
from sandbox.process import ProcessSandbox, network_namespace_available

PY = sys.executable
IS_ROOT = os.geteuid() == 0
NOBODY = 65534


@pytest.fixture
def workdir():
    path = Path(tempfile.mkdtemp(prefix="sbx-proc-", dir="/tmp"))
    path.chmod(0o777)  # also writable for the `nobody` variant
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def box() -> ProcessSandbox:
    return ProcessSandbox()


#: an interpreter `nobody` can execute (the venv's base Python may live under /root, mode 0700)
SYSTEM_PY = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None)


def spec(workdir: Path, code: str, python: str = PY, **kw) -> SandboxSpec:
    kw.setdefault("wall_timeout_s", 20)
    return SandboxSpec(argv=[python, "-c", textwrap.dedent(code)], workdir=workdir, writable=[workdir], **kw)


def pids_with_marker(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker.encode() in cmdline and state != "Z":
                found.append(int(entry))
    return found


def test_exit_code_output_cwd_and_exact_env(box, workdir, monkeypatch):
    monkeypatch.setenv("PARENT_SECRET", "must-not-leak")
    result = box.run(spec(workdir, """
        import os, sys
        print(os.getcwd()); print(sorted(os.environ)); print("to-err", file=sys.stderr); sys.exit(7)
    """, env={"MY_VAR": "1"}))
    assert result.exit_code == 7 and result.signal is None and not result.timed_out and not result.ok
    lines = result.stdout.splitlines()
    assert lines[0] == str(workdir)
    assert lines[1] == str(sorted(["HOME", "LANG", "MY_VAR", "PATH"]))
    assert result.stderr == "to-err\n" and result.backend == "process"
    assert not result.stdout_truncated and result.duration_s > 0


def test_spec_defaults_and_validation(workdir):
    s = SandboxSpec(argv=["true"], workdir=workdir, env={"HOME": "/x"})
    assert s.child_env()["HOME"] == "/x" and s.child_env()["LANG"] == "C.UTF-8"
    assert isinstance(s.argv, tuple)
    for bad in (
        dict(argv=[], workdir=workdir),
        dict(argv=["true"], workdir="relative"),
        dict(argv=["true"], workdir=workdir, network="internet"),
        dict(argv=["true"], workdir=workdir, wall_timeout_s=0),
        dict(argv=["true"], workdir=workdir, memory_bytes=-1),
        dict(argv=["true"], workdir=workdir, env={"A=B": "1"}),
    ):
        with pytest.raises(SandboxError):
            SandboxSpec(**bad)


def test_missing_program_is_a_sandbox_error(box, workdir):
    with pytest.raises(SandboxError, match="program not found"):
        box.run(SandboxSpec(argv=["/nonexistent/prog"], workdir=workdir))


def test_signal_is_reported(box, workdir):
    result = box.run(spec(workdir, "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"))
    assert result.exit_code is None and result.signal == signal.SIGSEGV and result.signal_name == "SIGSEGV"


def test_timeout_kills_the_whole_tree(box, workdir):
    marker = str(10_000 + uuid.uuid4().int % 80_000)
    result = box.run(spec(workdir, f"""
        import subprocess, time
        subprocess.Popen(["sleep", "1{marker}"])
        subprocess.Popen(["sleep", "2{marker}"], start_new_session=True)  # escapes the process group
        print("started", flush=True)
        time.sleep(1000)
    """, wall_timeout_s=1.5))
    assert result.timed_out and result.signal == signal.SIGKILL and "started" in result.stdout
    assert result.duration_s < 6
    survivors = pids_with_marker(marker)
    if G_TREE_KILL in box.guarantees():
        assert survivors == []
    else:  # without cgroups only the process group dies
        assert not pids_with_marker("1" + marker)
        for pid in survivors:
            os.kill(pid, signal.SIGKILL)


def test_background_leftovers_die_after_normal_exit(box, workdir):
    marker = str(10_000 + uuid.uuid4().int % 80_000)
    result = box.run(spec(workdir, f"""
        import subprocess, sys
        subprocess.Popen(["sleep", "3{marker}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        sys.exit(0)
    """))
    assert result.exit_code == 0 and not result.timed_out
    assert pids_with_marker(marker) == []


def test_output_cap_keeps_head_and_tail_and_drains(box, workdir):
    result = box.run(spec(workdir, """
        import sys
        sys.stdout.write("HEAD" + "x" * 5_000_000 + "TAIL")
        sys.stderr.write("e" * 100)
    """, output_cap_bytes=1000))
    assert result.exit_code == 0 and not result.timed_out  # never blocked on a full pipe
    assert result.stdout.startswith("HEAD") and result.stdout.endswith("TAIL")
    assert result.stdout_truncated and "bytes of output dropped" in result.stdout
    assert len(result.stdout) < 1200
    assert result.stderr == "e" * 100 and not result.stderr_truncated


def test_rlimits_file_size_open_files_cpu_memory(box, workdir):
    fsize = box.run(spec(workdir, "open('big', 'wb').write(b'x' * 5_000_000)", max_file_bytes=1_000_000))
    assert "File too large" in fsize.stderr and (workdir / "big").stat().st_size <= 1_000_000
    nofile = box.run(spec(workdir, "[open('/dev/null') for _ in range(100)]", max_open_files=20))
    assert "Too many open files" in nofile.stderr
    cpu = box.run(spec(workdir, "while True: pass", cpu_seconds=1, wall_timeout_s=15))
    assert cpu.signal in (signal.SIGXCPU, signal.SIGKILL) and not cpu.timed_out
    mem = box.run(spec(workdir, "x = bytearray(2 << 30)", memory_bytes=256 << 20))
    assert "MemoryError" in mem.stderr and mem.oom_killed


@pytest.mark.skipif(not CgroupLimits.usable()[0], reason="cgroup v1 memory/pids not writable here")
def test_cgroup_memory_kill_is_reported_as_oom(workdir):
    box = ProcessSandbox(limit_address_space=False)
    result = box.run(spec(workdir, """
        blocks = []
        for _ in range(40):
            blocks.append(bytearray(32 << 20))  # touched: zero-filled pages are resident
    """, memory_bytes=128 << 20))
    assert result.signal == signal.SIGKILL and result.oom_killed and not result.timed_out
    leftovers = list(_own_group_dir("memory").glob(f"{GROUP_PREFIX}{os.getpid()}-*"))
    assert leftovers == []  # groups are removed after each run


@pytest.mark.skipif(not CgroupLimits.usable()[0], reason="cgroup v1 memory/pids not writable here")
def test_cgroup_pids_limit_refuses_forks(box, workdir):
    assert G_PIDS in box.guarantees()
    result = box.run(spec(workdir, """
        import os, time
        ok = failed = 0
        for _ in range(60):
            try:
                pid = os.fork()
            except OSError:
                failed += 1
                continue
            if pid == 0:
                time.sleep(20)
                os._exit(0)
            ok += 1
        print(ok, failed)
    """, max_pids=10))
    ok, failed = map(int, result.stdout.split())
    assert ok < 10 and failed > 0


@pytest.mark.skipif(not network_namespace_available()[0], reason="needs root for a network namespace")
def test_network_modes(box, workdir):
    assert G_NETWORK in box.guarantees()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted = []
    thread = threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True)
    thread.start()
    connect = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('connected')"
    none = box.run(spec(workdir, connect, network="none"))
    assert "connected" not in none.stdout and none.exit_code != 0
    own_lo = """
        import socket
        server = socket.create_server(("127.0.0.1", 0))
        socket.create_connection(server.getsockname(), timeout=3); print("own loopback ok")
    """
    assert "own loopback ok" in box.run(spec(workdir, own_lo, network="loopback")).stdout
    assert "own loopback ok" not in box.run(spec(workdir, own_lo, network="none")).stdout
    assert "connected" not in box.run(spec(workdir, connect, network="loopback")).stdout
    host = box.run(spec(workdir, connect, network="host"))
    assert "connected" in host.stdout
    thread.join(5)
    listener.close()
    assert len(accepted) == 1  # only the host-network run got through


@pytest.mark.skipif(not IS_ROOT or not SYSTEM_PY, reason="needs root and a system python3")
def test_unprivileged_user_respects_permissions_and_nproc(workdir):
    locked = Path(tempfile.mkdtemp(prefix="sbx-locked-", dir="/tmp"))
    try:
        locked.chmod(0o755)
        (locked / "score.py").write_text("SCORE = 0\n")
        box = ProcessSandbox(user=NOBODY)
        result = box.run(spec(workdir, f"""
            import os
            print(os.getuid())
            try:
                open({str(locked / 'score.py')!r}, 'w').write('SCORE = 1')
            except PermissionError:
                print('denied')
            open('mine.txt', 'w').write('ok')
        """, python=SYSTEM_PY))
        assert result.stdout.split() == [str(NOBODY), "denied"]
        assert (locked / "score.py").read_text() == "SCORE = 0\n" and (workdir / "mine.txt").exists()
        # RLIMIT_NPROC applies to a non-root uid even without cgroups
        nproc = ProcessSandbox(user=NOBODY, use_cgroups=False).run(spec(workdir, """
            import os, time
            failed = 0
            for _ in range(20):
                try:
                    if os.fork() == 0:
                        time.sleep(10); os._exit(0)
                except OSError:
                    failed += 1
            print(failed)
        """, python=SYSTEM_PY, max_pids=5))
        assert int(nproc.stdout) > 0
    finally:
        shutil.rmtree(locked, ignore_errors=True)


def test_make_sandbox_factory():
    assert BACKENDS == ("auto", "docker", "bwrap", "process")
    assert make_sandbox("process").name == "process"
    assert make_sandbox("bwrap").name == "bwrap"
    assert make_sandbox("docker").name == "docker"
    chosen = make_sandbox("auto")
    assert chosen.name in ("docker", "bwrap", "process") and chosen.available()[0]
    with pytest.raises(SandboxError, match="unknown sandbox backend"):
        make_sandbox("vm")


def test_sandbox_package_imports_no_project_package():
    import ast

    root = Path(__file__).resolve().parents[2] / "sandbox"
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in ("memsys", "benchmarks", "research"), f"{path.name}: {name}"


def test_wall_time_is_respected_even_when_child_closes_its_pipes(box, workdir):
    start = time.monotonic()
    result = box.run(spec(workdir, "import os, time; os.close(1); os.close(2); time.sleep(100)", wall_timeout_s=1))
    assert result.timed_out and time.monotonic() - start < 5


def test_evaluation_dies_with_the_process_that_started_it(workdir):
    """A loop killed with kill -9 must not leave its evaluation running (it would write into the run
    folder while the run is resumed): the sandboxed child gets SIGKILL when its parent dies."""
    import subprocess

    marker = f"orphan-{uuid.uuid4().hex}"
    parent = textwrap.dedent(f"""
        import sys, textwrap
        from pathlib import Path
        from sandbox import SandboxSpec
        from sandbox.process import ProcessSandbox
        ProcessSandbox().run(SandboxSpec(argv=[sys.executable, "-c", "import time; time.sleep(60)  # {marker}"],
                                         workdir=Path({str(workdir)!r}), writable=[Path({str(workdir)!r})],
                                         wall_timeout_s=60))
    """)
    proc = subprocess.Popen([PY, "-c", parent], cwd=str(Path(__file__).resolve().parents[2]))

    def child() -> list[int]:
        """The exec'd sandboxed sleeper: not the parent, whose code names the marker too, nor a fork
        of it that has not exec'd yet (same command line)."""
        def execd(pid: int) -> bool:
            try:
                return b"SandboxSpec" not in Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                return False
        return [p for p in pids_with_marker(marker) if p != proc.pid and execd(p)]

    deadline = time.monotonic() + 30
    while not child() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert child(), "the sandboxed child never started"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while child() and time.monotonic() < deadline:
        time.sleep(0.1)
    left = child()
    for pid in left:  # do not leave it behind when the assertion fails
        os.kill(pid, signal.SIGKILL)
    assert left == []
