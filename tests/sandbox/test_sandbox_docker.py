"""Docker backend: command line by construction; real containers when an engine answers (else skip)."""

from __future__ import annotations

import io
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from sandbox import SandboxError, SandboxSpec, SandboxUnavailableError, make_sandbox
from sandbox.base import G_HIDDEN, G_MEMORY_CGROUP, G_NETWORK, G_PIDS, G_PROC_ISOLATION, G_READONLY, G_TREE_KILL
from sandbox.bwrap import python_paths
from sandbox.docker import OWNER_LABEL, DockerSandbox, rootfs_tag, rootfs_tar

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
BOX = DockerSandbox()
AVAILABLE, REASON = BOX.available()
live = pytest.mark.skipif(not AVAILABLE, reason=f"docker unavailable: {REASON}")


def make_spec(tmp: Path, **kw) -> SandboxSpec:
    return SandboxSpec(
        argv=[PY, "-c", "print('hi')"],
        workdir=tmp / "work",
        writable=[tmp / "work"],
        readonly=[tmp / "work" / "scorer", tmp / "data"],
        env={"OPENAI_API_KEY": "sk-secret-value", "PYTHONPATH": str(tmp / "work")},
        **kw,
    )


def flag_values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


# -- by construction (no engine needed) ------------------------------------------------
def test_argv_limits_and_isolation(tmp_path):
    argv = BOX.build_argv(
        make_spec(tmp_path, memory_bytes=2 << 30, max_pids=128, cpu_seconds=60, max_file_bytes=50 << 20,
                  max_open_files=256),
        "sandbox-test-1",
    )
    assert argv[1] == "create" and flag_values(argv, "--name") == ["sandbox-test-1"]
    assert flag_values(argv, "--network") == ["none"] and flag_values(argv, "--log-driver") == ["none"]
    assert flag_values(argv, "--memory") == [str(2 << 30)]
    assert flag_values(argv, "--pids-limit") == ["128"]
    assert flag_values(argv, "--user") == [f"{os.getuid()}:{os.getgid()}"]
    assert set(flag_values(argv, "--ulimit")) >= {"cpu=60:61", f"fsize={50 << 20}:{50 << 20}", "nofile=256:256"}
    assert "--read-only" in argv and flag_values(argv, "--cap-drop") == ["ALL"]
    assert flag_values(argv, "--security-opt") == ["no-new-privileges"]
    assert flag_values(argv, "--tmpfs")[0].startswith("/tmp:")
    assert flag_values(argv, "--workdir") == [str(tmp_path / "work")]
    assert any(v.startswith(OWNER_LABEL + "=") for v in flag_values(argv, "--label"))
    mounts = flag_values(argv, "--mount")
    assert f"type=bind,source={tmp_path / 'work'},target={tmp_path / 'work'}" in mounts
    assert f"type=bind,source={tmp_path / 'work' / 'scorer'},target={tmp_path / 'work' / 'scorer'},readonly" in mounts
    # host-rootfs mode: system dirs and the running Python bound read-only, same paths
    assert "type=bind,source=/usr,target=/usr,readonly" in mounts
    for path in python_paths():
        if not path.startswith("/usr/"):
            assert f"type=bind,source={path},target={path},readonly" in mounts
    assert not any("/etc/hosts" in m or "/etc/resolv.conf" in m for m in mounts)  # docker writes those
    targets = [m.split("target=")[1].split(",")[0] for m in mounts]
    assert len(targets) == len(set(targets))
    # the interpreter is the host's (bound), after an init and `env -u HOSTNAME`
    assert argv[-3:] == [PY, "-c", "print('hi')"] and argv[-7:-3] == ["/usr/bin/env", "-u", "HOSTNAME", "--"]


def test_argv_network_modes(tmp_path):
    assert flag_values(BOX.build_argv(make_spec(tmp_path, network="host"), "n"), "--network") == ["host"]
    # docker's "none" network keeps a private lo: that is the loopback mode
    assert flag_values(BOX.build_argv(make_spec(tmp_path, network="loopback"), "n"), "--network") == ["none"]


def test_env_values_never_on_the_command_line(tmp_path):
    spec = make_spec(tmp_path)
    argv = BOX.build_argv(spec, "n")
    assert "sk-secret-value" not in " ".join(argv)
    assert set(flag_values(argv, "-e")) == set(spec.child_env())
    cli_env = BOX._cli_env(spec.child_env())
    assert cli_env["OPENAI_API_KEY"] == "sk-secret-value"  # forwarded by name through the CLI's env


def test_spec_paths_override_system_mounts(tmp_path):
    spec = SandboxSpec(argv=["true"], workdir=Path("/usr"), readonly=[Path("/usr")], writable=[Path("/usr/local")])
    mounts = flag_values(BOX.build_argv(spec, "n"), "--mount")
    assert mounts.count("type=bind,source=/usr,target=/usr,readonly") == 1
    assert "type=bind,source=/usr/local,target=/usr/local" in mounts
    with pytest.raises(SandboxError, match="cannot mount"):
        BOX.build_argv(SandboxSpec(argv=["true"], workdir=Path("/"), readonly=[Path("/tmp/a,b")]), "n")


def test_full_image_mode_options(tmp_path):
    box = DockerSandbox(image="custom:1", user="1000:1000", cpus=1.5)
    argv = box.build_argv(make_spec(tmp_path), "n")
    assert flag_values(argv, "--user") == ["1000:1000"] and flag_values(argv, "--cpus") == ["1.5"]
    assert "--init" in argv and not any("target=/usr," in m for m in flag_values(argv, "--mount"))
    assert argv[-8:] == ["custom:1", "env", "-u", "HOSTNAME", "--", "python", "-c", "print('hi')"]
    assert DockerSandbox(user=65534).build_argv(make_spec(tmp_path), "n").count("65534:65534") == 1


def test_rootfs_image_is_tiny_deterministic_and_content_named():
    tar = rootfs_tar()
    assert tar == rootfs_tar() and len(tar) < 64 << 10
    assert re.fullmatch(r"omni-memsys-sandbox:rootfs-[0-9a-f]{12}", rootfs_tag(tar))
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        members = archive.getmembers()
    assert all(m.isdir() or m.issym() or m.name == ".omni-memsys-sandbox" for m in members)
    links = {m.name: m.linkname for m in members if m.issym()}
    for name in ("bin", "lib", "sbin"):
        if os.path.islink("/" + name):
            assert links[name] == os.readlink("/" + name)


def test_unavailable_gives_one_line_reason(tmp_path):
    missing = DockerSandbox(docker_bin="/nonexistent/docker")
    ok, reason = missing.available()
    assert not ok and reason and "\n" not in reason
    assert missing.guarantees() == frozenset()
    with pytest.raises(SandboxUnavailableError, match="docker"):
        missing.run(make_spec(tmp_path))
    if not AVAILABLE:
        assert REASON and "\n" not in REASON


def test_dockerfile_is_the_registry_path():
    text = (REPO / "sandbox" / "Dockerfile").read_text()
    instructions = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert instructions[0] == "FROM python:3.11-slim"
    assert "docker import" in text or "ensure_image" in text  # the comment names the offline path
    torch = text.index("torch==2.13.0")
    assert "--index-url https://download.pytorch.org/whl/cpu" in text[text.rfind("RUN", 0, torch) : torch]
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and users[-1] != "root" and not users[-1].startswith("0")
    assert (REPO / "sandbox" / "Dockerfile.dockerignore").read_text().count(".venv") == 1


# -- live (real containers) -------------------------------------------------------------
@pytest.fixture
def root():
    path = Path(tempfile.mkdtemp(prefix="sbx-docker-", dir="/tmp"))
    path.chmod(0o755)
    for name in ("work", "ro", "hidden"):
        (path / name).mkdir()
    (path / "work").chmod(0o777)
    (path / "ro" / "data.txt").write_text("readonly data\n")
    (path / "hidden" / "secret.txt").write_text("secret\n")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def spec(root: Path, code: str, **kw) -> SandboxSpec:
    kw.setdefault("wall_timeout_s", 20)
    kw.setdefault("writable", [root / "work"])
    kw.setdefault("readonly", [root / "ro"])
    return SandboxSpec(argv=[PY, "-c", textwrap.dedent(code)], workdir=root / "work", **kw)


def our_containers() -> list[str]:
    label = f"label={OWNER_LABEL}={socket.gethostname()}:{os.getpid()}"
    out = subprocess.run(["docker", "ps", "-aq", "--filter", label], capture_output=True, text=True, timeout=20)
    return out.stdout.split()


@live
def test_live_guarantees_and_auto_prefers_docker():
    assert BOX.guarantees() >= {G_NETWORK, G_READONLY, G_HIDDEN, G_PROC_ISOLATION, G_TREE_KILL}
    assert {G_MEMORY_CGROUP, G_PIDS} <= BOX.guarantees()  # this daemon has memory and pids cgroups
    assert make_sandbox("auto").name == "docker"
    started = time.monotonic()
    assert DockerSandbox().available() == (True, "")  # cached: no second probe
    assert time.monotonic() - started < 0.05


@live
def test_live_readonly_writable_and_hidden(root):
    result = BOX.run(spec(root, f"""
        import os
        def attempt(what, fn):
            try:
                fn(); print(what, "OK")
            except OSError as exc:
                print(what, "blocked", exc.errno)
        attempt("write-ro", lambda: open({str(root / 'ro' / 'data.txt')!r}, "a").write("x"))
        attempt("create-ro", lambda: open({str(root / 'ro' / 'new.txt')!r}, "w").write("x"))
        attempt("write-rw", lambda: open("out.txt", "w").write("result"))
        attempt("write-usr", lambda: open("/usr/evil", "w").write("x"))
        attempt("write-root", lambda: open("/evil", "w").write("x"))
        attempt("write-venv", lambda: open(os.path.join({sys.prefix!r}, "evil"), "w").write("x"))
        attempt("write-tmp", lambda: open("/tmp/scratch", "w").write("x"))
        print("ro-read", open({str(root / 'ro' / 'data.txt')!r}).read().strip())
        for path in ({str(root / 'hidden' / 'secret.txt')!r}, "/root/.bash_history", "/work/shared",
                     "/work/main/README.md", "/etc/shadow", "/var/log", "/home"):
            print("exists" if os.path.exists(path) else "absent", path)
        print("root-dir", sorted(os.listdir("/root")) if os.path.isdir("/root") else [])
    """))
    out = result.stdout
    assert result.exit_code == 0, result.stderr
    for what in ("write-ro", "create-ro", "write-usr", "write-root", "write-venv"):
        assert f"{what} blocked" in out, out
    assert "write-rw OK" in out and "write-tmp OK" in out and "ro-read readonly data" in out
    assert (root / "work" / "out.txt").read_text() == "result"
    assert "exists" not in out.replace("root-dir", ""), out
    assert (root / "ro" / "data.txt").read_text() == "readonly data\n" and not (root / "ro" / "new.txt").exists()
    # /root holds at most the mount point of the Python installation (pyenv lives there)
    listed = eval(out.split("root-dir ", 1)[1].splitlines()[0])
    assert set(listed) <= {p.split("/")[2] for p in python_paths() if p.startswith("/root/")}


@live
def test_live_network_none_blocks_host_tcp_but_loopback_is_private(root):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    try:
        result = BOX.run(spec(root, f"""
            import socket
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=2); print("CONNECTED")
            except OSError as exc:
                print("blocked", type(exc).__name__)
            server = socket.create_server(("127.0.0.1", 0))  # a private loopback of its own
            socket.create_connection(server.getsockname(), timeout=2); print("private-lo ok")
        """, network="loopback"))
    finally:
        listener.close()
    assert "blocked" in result.stdout and "CONNECTED" not in result.stdout, result.stdout + result.stderr
    assert "private-lo ok" in result.stdout


@live
def test_live_network_host_reaches_the_host(root):
    with socket.create_server(("127.0.0.1", 0)) as listener:
        code = f"import socket; socket.create_connection(('127.0.0.1', {listener.getsockname()[1]}), timeout=5)"
        assert BOX.run(spec(root, code, network="host")).exit_code == 0


@live
@pytest.mark.parametrize("where", ["writable", "readonly"])
def test_live_unix_socket_in_a_bound_dir_reaches_a_host_server(root, where):
    """The LLM gateway case: a host server on a unix socket in a bind-mounted dir, --network none."""
    sock_dir = root / "work" / "gw" if where == "writable" else root / "ro"
    sock_dir.mkdir(exist_ok=True)
    path = sock_dir / "gateway.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    server.settimeout(15)
    served: list[bytes] = []

    def serve() -> None:
        try:
            conn, _ = server.accept()
            with conn:
                served.append(conn.recv(100))
                conn.sendall(b"pong from host")
        except OSError:
            pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        result = BOX.run(spec(root, f"""
            import socket
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.settimeout(10)
            client.connect({str(path)!r})
            client.sendall(b"ping from sandbox")
            print(client.recv(100).decode())
        """, network="none"))
        thread.join(15)
    finally:
        server.close()
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "pong from host" and served == [b"ping from sandbox"]


@live
def test_live_timeout_kills_and_removes_the_container(root):
    start = time.monotonic()
    result = BOX.run(spec(root, """
        import subprocess, time
        subprocess.Popen(["sleep", "300"], start_new_session=True)
        print("started", flush=True)
        time.sleep(300)
    """, wall_timeout_s=2))
    assert result.timed_out and not result.ok and "started" in result.stdout
    assert time.monotonic() - start < 10
    assert our_containers() == []
    # a normal exit also ends every descendant, even one that left the session
    tag = str(40_000 + os.getpid() % 10_000)
    result = BOX.run(spec(root, f"import subprocess; subprocess.Popen(['sleep', '3{tag}'], start_new_session=True)"))
    assert result.exit_code == 0
    survivors = [p for p in os.listdir("/proc") if p.isdigit() and _cmdline_has(p, "3" + tag)]
    assert survivors == [] and our_containers() == []


@live
def test_live_owner_killed_with_sigkill_leaves_no_container_running(root):
    """kill -9 of the evaluation that started a container: its reaper removes the container, so
    nothing keeps writing into the run folder a resume is about to use."""
    owner = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, textwrap
            from pathlib import Path
            from sandbox import SandboxSpec
            from sandbox.docker import DockerSandbox
            root = Path({str(root)!r})
            code = "import time\\nopen('/proc/self/cwd/alive', 'w').write('x')\\ntime.sleep(300)"
            DockerSandbox().run(SandboxSpec(argv=[sys.executable, "-c", code], workdir=root / "work",
                                            writable=[root / "work"], wall_timeout_s=300))
        """)],
        cwd=Path(__file__).resolve().parents[2], stdin=subprocess.DEVNULL)
    label = f"label={OWNER_LABEL}={socket.gethostname()}:{owner.pid}"

    def running() -> list[str]:
        return subprocess.run(["docker", "ps", "-q", "--filter", label], capture_output=True, text=True,
                              timeout=20).stdout.split()

    try:
        deadline = time.monotonic() + 60
        while not (root / "work" / "alive").exists():
            assert time.monotonic() < deadline and owner.poll() is None, "the container never started"
            time.sleep(0.2)
        assert len(running()) == 1
        owner.kill()
        owner.wait()
        deadline = time.monotonic() + 20
        while running():
            assert time.monotonic() < deadline, "the container outlived its owner"
            time.sleep(0.5)
    finally:
        owner.kill()
        subprocess.run(["docker", "rm", "-f", *running()], capture_output=True, timeout=20) if running() else None


def _cmdline_has(pid: str, marker: str) -> bool:
    try:
        return marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


@live
def test_live_memory_limit_is_an_observed_oom_kill(root):
    result = BOX.run(spec(root, "blocks = [bytearray(32 << 20) for _ in range(64)]", memory_bytes=128 << 20))
    assert result.oom_killed and result.signal == signal.SIGKILL and not result.timed_out
    # a self-inflicted SIGKILL with a memory limit set is not mistaken for an OOM kill
    result = BOX.run(spec(root, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)", memory_bytes=128 << 20))
    assert result.signal == signal.SIGKILL and not result.oom_killed


@live
def test_live_env_is_exactly_the_spec_env(root, monkeypatch):
    monkeypatch.setenv("MEMSYS_PARENT_ONLY_SECRET", "must-not-leak")
    s = spec(root, "import os, json; print(json.dumps(dict(os.environ)))", env={"ONLY_THIS": "v=1 x"})
    result = BOX.run(s)
    import json

    env = json.loads(result.stdout)
    env.pop("LC_CTYPE", None)  # Python's own C-locale coercion, not inherited
    assert env == s.child_env()


@live
def test_live_exit_codes_signals_and_uid(root):
    assert BOX.run(spec(root, "raise SystemExit(3)")).exit_code == 3
    killed = BOX.run(spec(root, "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"))
    assert killed.exit_code is None and killed.signal == signal.SIGTERM
    segv = BOX.run(spec(root, "import ctypes; ctypes.string_at(0)"))
    assert segv.signal == signal.SIGSEGV
    assert BOX.run(spec(root, "import os; print(os.getuid())")).stdout.strip() == str(os.getuid())
    nobody = DockerSandbox(user=65534).run(spec(root, "import os; print(os.getuid(), os.getgid())"))
    assert nobody.stdout.strip() == "65534 65534"
    missing = BOX.run(SandboxSpec(argv=["/no/such/program"], workdir=root / "work", writable=[root / "work"]))
    assert missing.exit_code == 127


@live
def test_live_output_cap_and_limits(root):
    result = BOX.run(spec(root, """
        import sys
        sys.stdout.write("HEAD" + "x" * (4 << 20) + "TAIL")
        sys.stderr.write("E" * 100)
    """, output_cap_bytes=1000))
    assert result.exit_code == 0 and result.stdout_truncated and not result.stderr_truncated
    assert result.stdout.startswith("HEAD") and result.stdout.endswith("TAIL") and len(result.stdout) < 1200
    limits = BOX.run(spec(root, """
        import os, resource
        print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], resource.getrlimit(resource.RLIMIT_CPU)[0])
        pids = []
        for _ in range(50):
            try:
                pid = os.fork()
            except OSError:
                print("fork refused"); break
            if pid == 0:
                import time; time.sleep(5); os._exit(0)
            pids.append(pid)
    """, max_open_files=64, cpu_seconds=30, max_pids=20))
    assert limits.stdout.splitlines()[0] == "64 30" and "fork refused" in limits.stdout


@live
def test_live_bad_spec_is_a_sandbox_error(root):
    with pytest.raises(SandboxError, match="does not exist"):
        BOX.run(spec(root, "pass", readonly=[root / "missing"]))
    with pytest.raises(SandboxError, match="workdir"):
        BOX.run(SandboxSpec(argv=["true"], workdir=root / "hidden"))
    assert our_containers() == []
