"""Hostile evaluation code against every backend available here. Each attack is bounded to seconds.

Backends: process (as the caller: root here), process-nobody (child dropped to uid 65534),
bwrap, docker (skips with the reason from available()). An attack is asserted contained
only on backends that guarantee it (see sandbox/README.md); elsewhere the test skips
and names the missing guarantee, so the table in the README is what is tested.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import socket
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from research.failures import FailureClass, classify_result
from sandbox import Sandbox, SandboxSpec
from sandbox.base import G_HIDDEN, G_NETWORK, G_PIDS, G_PROC_ISOLATION, G_READONLY, G_TREE_KILL
from sandbox.bwrap import BwrapSandbox
from sandbox.docker import DockerSandbox
from sandbox.process import ProcessSandbox

NOBODY = 65534
SYSTEM_PY = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None)


def _backends():
    params = [pytest.param(("process", ProcessSandbox(), sys.executable), id="process")]
    if os.geteuid() == 0 and SYSTEM_PY:
        nobody = ProcessSandbox(user=NOBODY)
        params.append(pytest.param(("process-nobody", nobody, SYSTEM_PY), id="process-nobody"))
    bwrap = BwrapSandbox()
    ok, reason = bwrap.available()
    params.append(pytest.param(("bwrap", bwrap, sys.executable), id="bwrap",
                               marks=pytest.mark.skipif(not ok, reason=f"bwrap unavailable: {reason}")))
    docker = DockerSandbox()
    ok, reason = docker.available()
    # the host-rootfs image bind-mounts this interpreter (venv and base prefix) read-only
    params.append(pytest.param(("docker", docker, sys.executable), id="docker",
                               marks=pytest.mark.skipif(not ok, reason=f"docker unavailable: {reason}")))
    return params


#: containment that rests on file permissions (uid 65534), not on a guarantee of the backend
_PERMISSION_READONLY = {"process-nobody"}


@dataclass
class Env:
    name: str
    box: Sandbox
    python: str
    root: Path
    work: Path
    scorer: Path
    results: Path
    secret: Path

    def spec(self, code: str, **kw) -> SandboxSpec:
        kw.setdefault("wall_timeout_s", 15)
        return SandboxSpec(argv=[self.python, "-c", textwrap.dedent(code)], workdir=self.work,
                           writable=[self.work], readonly=[self.scorer], **kw)

    def require(self, guarantee: str, *, or_backends: set[str] = frozenset()) -> None:
        if guarantee not in self.box.guarantees() and self.name not in or_backends:
            pytest.skip(f"{self.name} does not guarantee {guarantee} (documented in sandbox/README.md)")


@pytest.fixture(params=_backends())
def env(request):
    name, box, python = request.param
    root = Path(tempfile.mkdtemp(prefix="sbx-attack-", dir="/tmp"))
    root.chmod(0o755)
    work, scorer, results, secret = (root / n for n in ("work", "scorer", "results", "secret"))
    for path in (work, scorer, results, secret):
        path.mkdir()
    work.chmod(0o777)
    secret.chmod(0o700)
    (scorer / "score.py").write_text("def score(pred, gold):\n    return float(pred == gold)\n")
    (secret / "token.txt").write_text("sk-host-secret\n")
    (secret / "token.txt").chmod(0o600)
    yield Env(name, box, python, root, work, scorer, results, secret)
    shutil.rmtree(root, ignore_errors=True)


def live_pids(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if marker.encode() not in Path(f"/proc/{entry}/cmdline").read_bytes():
                continue
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            found.append(int(entry))
    return found


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def marker() -> str:
    return str(10_000 + uuid.uuid4().int % 80_000)


# (a) ------------------------------------------------------------------------------------
def test_a_write_into_readonly_scorer(env: Env):
    env.require(G_READONLY, or_backends=_PERMISSION_READONLY)
    before = (env.scorer / "score.py").read_bytes()
    result = env.box.run(env.spec(f"""
        import os
        target = {str(env.scorer / 'score.py')!r}
        attempts = [
            lambda: open(target, "w").write("def score(p, g):\\n    return 1.0\\n"),
            lambda: os.chmod(target, 0o777),
            lambda: os.rename(target, target + ".bak"),
            lambda: os.unlink(target),
            lambda: open({str(env.scorer / 'evil.py')!r}, "w").write("x"),
        ]
        for attempt in attempts:
            try:
                attempt(); print("SUCCEEDED")
            except OSError as exc:
                print("blocked", exc.errno)
    """))
    assert "SUCCEEDED" not in result.stdout and result.stdout.count("blocked") == 5, result.stderr
    assert (env.scorer / "score.py").read_bytes() == before
    assert sorted(p.name for p in env.scorer.iterdir()) == ["score.py"]


# (b) ------------------------------------------------------------------------------------
def test_b_read_outside_allowed_dirs(env: Env):
    env.require(G_HIDDEN)  # the process backend cannot prevent this: it shares the host filesystem
    result = env.box.run(env.spec(f"""
        for path in ({str(env.secret / 'token.txt')!r}, "/etc/shadow", "/root/.bash_history", {str(env.results)!r}):
            try:
                print(open(path).read() if not path.endswith("results") else __import__("os").listdir(path))
            except OSError as exc:
                print("blocked", type(exc).__name__)
    """))
    assert "sk-host-secret" not in result.stdout and result.stdout.count("blocked") == 4, result.stdout


# (c) ------------------------------------------------------------------------------------
def test_c_tcp_to_host_listener_with_network_none(env: Env):
    env.require(G_NETWORK)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    port = listener.getsockname()[1]
    accepted: list = []
    done = threading.Event()

    def accept() -> None:
        while not done.is_set() and not accepted:
            try:
                accepted.append(listener.accept())
            except OSError:  # includes the accept timeout
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        result = env.box.run(env.spec(f"""
            import socket
            for host in ("127.0.0.1", "localhost", {socket.gethostname()!r}):
                try:
                    socket.create_connection((host, {port}), timeout=2); print("CONNECTED", host)
                except OSError as exc:
                    print("blocked", host, type(exc).__name__)
        """, network="none"))
    finally:
        done.set()
        thread.join(10)
        listener.close()
    assert "CONNECTED" not in result.stdout and result.stdout.count("blocked") == 3, result.stdout
    assert accepted == []


# (d) ------------------------------------------------------------------------------------
def test_d_fork_bomb_is_contained(env: Env):
    tag = marker()
    start = time.monotonic()
    result = env.box.run(env.spec(f"""
        import os, sys, time
        TAG = "{tag}"
        made = refused = 0
        for _ in range(300):  # bounded bomb: children sleep, so they pile up
            try:
                pid = os.fork()
            except OSError:
                refused += 1
                continue
            if pid == 0:
                time.sleep(60)
                os._exit(0)
            made += 1
        print(made, refused, flush=True)
        time.sleep(60)
    """, max_pids=40, wall_timeout_s=4))
    elapsed = time.monotonic() - start
    made, refused = map(int, result.stdout.split())
    survivors = live_pids(tag)
    kill_all(survivors)
    assert result.timed_out and elapsed < 15
    assert survivors == [], f"{len(survivors)} forked processes survived"
    if G_PIDS in env.box.guarantees():
        assert made < 40 and refused > 0


# (e) ------------------------------------------------------------------------------------
def test_e_fill_the_disk(env: Env):
    cap = 50 << 20
    start = time.monotonic()
    result = env.box.run(env.spec("""
        chunk = b"\\0" * (1 << 20)
        with open("fill.bin", "wb") as out:
            for _ in range(2048):  # 2 GiB
                out.write(chunk)
    """, max_file_bytes=cap, wall_timeout_s=30))
    assert time.monotonic() - start < 30 and not result.timed_out
    assert (env.work / "fill.bin").stat().st_size <= cap
    assert result.exit_code != 0 and "File too large" in result.stderr


# (f) ------------------------------------------------------------------------------------
def test_f_allocate_100_gb(env: Env):
    result = env.box.run(env.spec("x = bytearray(100 * (1 << 30)); x[::4096] = b'1' * len(x[::4096])",
                                  memory_bytes=512 << 20))
    assert result.exit_code != 0 and result.oom_killed and result.duration_s < 15
    failure = classify_result(result, result_status=None, metrics=None, parent_metrics=None,
                              code_changed=True, edited_paths=[])
    assert failure.cls is FailureClass.OOM_KILLED


def test_f2_touching_memory_past_the_cgroup_limit(env: Env):
    from sandbox.base import G_MEMORY_CGROUP

    env.require(G_MEMORY_CGROUP)
    box = type(env.box)(limit_address_space=False, **({"user": NOBODY} if env.name == "process-nobody" else {}))
    result = box.run(env.spec("blocks = [bytearray(32 << 20) for _ in range(64)]", memory_bytes=160 << 20))
    assert result.oom_killed and result.signal == signal.SIGKILL
    failure = classify_result(result, result_status=None, metrics=None, parent_metrics=None,
                              code_changed=True, edited_paths=[])
    assert failure.cls is FailureClass.OOM_KILLED


# (g) ------------------------------------------------------------------------------------
def test_g_sleep_forever_tree_is_killed_at_the_wall_timeout(env: Env):
    tag = marker()
    start = time.monotonic()
    result = env.box.run(env.spec(f"""
        import subprocess, time
        subprocess.Popen(["sleep", "1{tag}"])                            # same process group
        subprocess.Popen(["sleep", "2{tag}"], start_new_session=True)   # tries to escape it
        print("spawned", flush=True)
        time.sleep(10_000)
    """, wall_timeout_s=2))
    elapsed = time.monotonic() - start
    same_group, escaped = live_pids("1" + tag), live_pids("2" + tag)
    kill_all(same_group + escaped)
    assert result.timed_out and "spawned" in result.stdout and elapsed < 10
    assert same_group == [], "grandchild in the process group survived"
    if G_TREE_KILL in env.box.guarantees():
        assert escaped == [], "setsid() grandchild survived"


# (h) ------------------------------------------------------------------------------------
def test_h_print_1_gb(env: Env):
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    cap = 64 << 10
    result = env.box.run(env.spec("""
        import sys
        chunk = "y" * (1 << 20)
        for _ in range(1024):  # 1 GiB
            sys.stdout.write(chunk)
        sys.stdout.write("END")
    """, output_cap_bytes=cap, wall_timeout_s=20))
    peak_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    assert result.stdout_truncated and len(result.stdout) <= cap + 200
    assert result.timed_out or result.stdout.endswith("END")
    assert peak_after - peak_before < 100 * 1024, "the test process buffered the output"


# (i) ------------------------------------------------------------------------------------
def test_i_fake_perfect_result_outside_output_dir(env: Env):
    env.require(G_READONLY, or_backends=_PERMISSION_READONLY)
    fake = json.dumps({"f1": 1.0, "evidence_recall@20": 1.0})
    result = env.box.run(env.spec(f"""
        import os
        targets = [{str(env.results / 'result.json')!r}, "../results/result.json",
                   {str(env.scorer / 'result.json')!r}, {str(env.root / 'result.json')!r}]
        for target in targets:
            try:
                os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
                open(target, "w").write({fake!r}); print("WROTE", target)
            except OSError as exc:
                print("blocked", exc.errno)
        open("result.json", "w").write({fake!r})  # its own output dir: allowed, but not read as the score
    """))
    # bwrap: the paths outside the binds exist only in the child's private tmpfs, so a
    # "successful" write there never reaches the host; the host files must not exist
    for path in (env.results / "result.json", env.scorer / "result.json", env.root / "result.json"):
        assert not path.exists(), f"{path} written ({result.stdout})"
    assert (env.work / "result.json").exists()


# (j) ------------------------------------------------------------------------------------
def test_j_signal_a_host_process(env: Env):
    env.require(G_PROC_ISOLATION)  # the process backend shares the pid namespace (as root it could kill us)
    import subprocess

    victim = subprocess.Popen(["sleep", "30"])
    try:
        result = env.box.run(env.spec(f"""
            import os, signal
            try:
                os.kill({victim.pid}, signal.SIGKILL); print("KILLED")
            except OSError as exc:
                print("blocked", type(exc).__name__)
        """))
        assert "KILLED" not in result.stdout and victim.poll() is None
    finally:
        victim.kill()
        victim.wait()
