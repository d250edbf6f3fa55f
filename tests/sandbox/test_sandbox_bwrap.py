"""Bubblewrap backend with real sandboxed processes (skipped when bwrap cannot run here)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import tempfile
import textwrap
import threading
from pathlib import Path

import pytest

from sandbox import SandboxError, SandboxSpec
from sandbox.base import G_HIDDEN, G_NETWORK, G_PROC_ISOLATION, G_READONLY
from sandbox.bwrap import BwrapSandbox, python_paths
from sandbox.cgroups import CgroupLimits

PY = sys.executable
BOX = BwrapSandbox()
AVAILABLE, REASON = BOX.available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=f"bwrap unavailable: {REASON}")


@pytest.fixture
def root():
    path = Path(tempfile.mkdtemp(prefix="sbx-bwrap-", dir="/tmp"))
    (path / "work").mkdir()
    (path / "ro").mkdir()
    (path / "ro" / "data.txt").write_text("readonly data\n")
    (path / "hidden").mkdir()
    (path / "hidden" / "secret.txt").write_text("secret\n")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def spec(root: Path, code: str, **kw) -> SandboxSpec:
    kw.setdefault("wall_timeout_s", 20)
    kw.setdefault("writable", [root / "work"])
    kw.setdefault("readonly", [root / "ro"])
    return SandboxSpec(argv=[PY, "-c", textwrap.dedent(code)], workdir=root / "work", **kw)


def test_guarantees_and_basic_run(root):
    assert {G_NETWORK, G_READONLY, G_HIDDEN, G_PROC_ISOLATION} <= BOX.guarantees()
    result = BOX.run(spec(root, """
        import os, sys
        print(os.getcwd()); print(open('../ro/data.txt').read().strip()); sys.exit(4)
    """, env={"X": "1"}))
    assert result.exit_code == 4 and result.backend == "bwrap"
    assert result.stdout.splitlines() == [str(root / "work"), "readonly data"]


def test_env_is_exactly_the_spec_env(root, monkeypatch):
    monkeypatch.setenv("PARENT_SECRET", "must-not-leak")
    result = BOX.run(spec(root, "import os; print(sorted(k for k in os.environ if k != 'PWD'))", env={"A": "b"}))
    assert result.stdout.strip() == str(["A", "HOME", "LANG", "PATH"])


def test_filesystem_view(root):
    result = BOX.run(spec(root, f"""
        import os
        def attempt(fn):
            try:
                fn(); return "ok"
            except OSError as exc:
                return type(exc).__name__ + ":" + str(exc.errno)
        print(attempt(lambda: open('{root}/ro/data.txt', 'a').write('x')))
        print(attempt(lambda: open('{root}/ro/new.txt', 'w')))
        print(attempt(lambda: open('{root}/hidden/secret.txt').read()))
        print(attempt(lambda: open('/etc/shadow').read()))
        print(attempt(lambda: os.listdir('/root/.ssh')))
        print(attempt(lambda: open('/tmp/t', 'w').write('x')))
        print(attempt(lambda: open('out.txt', 'w').write('x')))
        print(attempt(lambda: os.listdir('/sys/fs/cgroup')))
    """))
    erofs, enoent = "OSError:30", "FileNotFoundError:2"
    assert result.stdout.split() == [erofs, erofs, enoent, enoent, enoent, "ok", "ok", enoent], result.stderr
    assert (root / "ro" / "data.txt").read_text() == "readonly data\n"
    assert (root / "work" / "out.txt").read_text() == "x"
    assert not Path("/tmp/t").exists() or Path("/tmp/t").read_text() != "x"  # the child's /tmp is private


def test_readonly_dir_nested_in_writable_stays_readonly(root):
    (root / "work" / "scorer").mkdir()
    (root / "work" / "scorer" / "score.py").write_text("S = 0\n")
    result = BOX.run(spec(root, """
        open('free.txt', 'w').write('ok')
        open('scorer/score.py', 'w').write('S = 1')
    """, readonly=[root / "work" / "scorer"]))
    assert "Read-only file system" in result.stderr
    assert (root / "work" / "scorer" / "score.py").read_text() == "S = 0\n"
    assert (root / "work" / "free.txt").exists()


def test_capabilities_dropped_and_sysctl_readonly(root):
    if os.geteuid() != 0:
        pytest.skip("capability dropping only matters when bwrap runs as root")
    result = BOX.run(spec(root, """
        status = open('/proc/self/status').read()
        print([l.split()[1] for l in status.splitlines() if l.startswith('CapEff')][0])
        value = open('/proc/sys/vm/swappiness').read()  # writing back the same value is harmless
        try:
            open('/proc/sys/vm/swappiness', 'w').write(value); print('sysctl writable')
        except OSError as exc:
            print('sysctl', exc.errno)
    """))
    assert result.stdout.split() == ["0000000000000000", "sysctl", "30"]


def test_pid_namespace_hides_host_processes(root):
    result = BOX.run(spec(root, f"""
        import os
        print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))
        try:
            os.kill({os.getpid()}, 0); print('host pid visible')
        except ProcessLookupError:
            print('host pid invisible')
    """))
    pids = eval(result.stdout.splitlines()[0])
    assert len(pids) <= 4 and "host pid invisible" in result.stdout


def test_loopback_is_up_and_private_in_both_none_and_loopback(root):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.settimeout(0.2)
    code = f"""
        import socket
        server = socket.create_server(("127.0.0.1", 0))
        socket.create_connection(server.getsockname(), timeout=3); print("own lo up")
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=2); print("host reached")
        except OSError:
            print("host unreachable")
    """
    try:
        for network in ("none", "loopback"):
            lines = BOX.run(spec(root, code, network=network)).stdout.splitlines()
            assert lines == ["own lo up", "host unreachable"]
        accepted = []
        thread = threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True)
        listener.settimeout(10)
        thread.start()
        assert "host reached" in BOX.run(spec(root, code, network="host")).stdout
        thread.join(10)
        assert len(accepted) == 1
    finally:
        listener.close()


def test_signal_from_bwrap_exit_status(root):
    result = BOX.run(spec(root, "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"))
    assert result.exit_code is None and result.signal == signal.SIGSEGV


@pytest.mark.skipif(not CgroupLimits.usable()[0], reason="cgroup v1 memory/pids not writable here")
def test_cgroup_oom_inside_bwrap(root):
    box = BwrapSandbox(limit_address_space=False)
    result = box.run(spec(root, """
        blocks = [bytearray(32 << 20) for _ in range(40)]
    """, memory_bytes=128 << 20))
    assert result.oom_killed and result.signal == signal.SIGKILL and not result.timed_out


def test_build_argv_shape(root):
    s = spec(root, "pass", network="host", writable=[root / "work"], readonly=[root / "work" / "sub", root / "ro"])
    argv = BOX.build_argv(s)
    assert argv[1] == "--unshare-all" and "--share-net" in argv and "--die-with-parent" in argv
    assert argv[argv.index("--chdir") + 1] == str(root / "work")
    assert argv[-3:] == [PY, "-c", "pass"]
    # parents are bound before children: the nested readonly comes after the writable parent
    assert argv.index(str(root / "work" / "sub")) > argv.index(str(root / "work"))
    assert "--share-net" not in BOX.build_argv(spec(root, "pass", network="loopback"))
    for path in python_paths():
        assert path in argv or any(path.startswith(p + "/") for p in ("/usr",))


def test_interpreter_under_tmp_is_bound_over_the_private_tmp(root, monkeypatch):
    # a newcomer's `git clone . /tmp/x` puts the venv under /tmp: the private /tmp must not hide it
    venv_dir = Path(tempfile.mkdtemp(prefix="venv-", dir="/tmp"))
    venv = str(venv_dir)
    monkeypatch.setattr("sandbox.bwrap.python_paths", lambda: [venv])
    argv = BwrapSandbox().build_argv(spec(root, "pass"))
    tmpfs = argv.index("--tmpfs")
    assert argv[tmpfs + 1] == "/tmp"
    assert argv[argv.index(venv) - 1] == "--ro-bind" and argv.index(venv) > tmpfs
    venv_dir.rmdir()


def test_spec_errors(root):
    with pytest.raises(SandboxError, match="not inside a writable or readonly path"):
        BOX.run(SandboxSpec(argv=["true"], workdir=root / "hidden"))
    with pytest.raises(SandboxError, match="does not exist"):
        BOX.run(SandboxSpec(argv=["true"], workdir=root / "work", writable=[root / "work"], readonly=[root / "nope"]))


def test_setup_failure_is_a_sandbox_error(root, monkeypatch):
    box = BwrapSandbox()
    assert box.available()[0]  # probe with the real command line first
    good_argv = box.build_argv

    def broken_argv(spec):  # an invalid bwrap option sequence: setup fails before exec
        argv = good_argv(spec)
        at = argv.index("--chdir")
        return argv[:at] + ["--remount-ro", "/nonexistent-mount"] + argv[at:]

    monkeypatch.setattr(box, "build_argv", broken_argv)
    with pytest.raises(SandboxError, match=r"\[bwrap\] sandbox setup failed: bwrap: "):
        box.run(SandboxSpec(argv=["true"], workdir=root / "work", writable=[root / "work"]))
    with pytest.raises(SandboxError, match="does not exist"):
        BOX.run(SandboxSpec(argv=["true"], workdir=root / "work" / "missing", writable=[root / "work"]))


def test_unavailable_binary_gives_a_reason():
    missing = BwrapSandbox(bwrap_path="/nonexistent/bwrap")
    ok, reason = missing.available()
    assert not ok and reason
