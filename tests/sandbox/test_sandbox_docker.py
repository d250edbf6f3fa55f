"""Docker backend: command line and Dockerfile by construction; live runs skip without a daemon."""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import pytest

from sandbox import SandboxSpec, SandboxUnavailableError
from sandbox.docker import DEFAULT_IMAGE, DockerSandbox

REPO = Path(__file__).resolve().parents[2]
BOX = DockerSandbox()
AVAILABLE, REASON = BOX.available()


def make_spec(tmp: Path, **kw) -> SandboxSpec:
    return SandboxSpec(
        argv=[sys.executable, "-c", "print('hi')"],
        workdir=tmp / "work",
        writable=[tmp / "work"],
        readonly=[tmp / "work" / "scorer", tmp / "data"],
        env={"OPENAI_API_KEY": "sk-secret-value", "PYTHONPATH": str(tmp / "work")},
        **kw,
    )


def flag_values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_argv_limits_and_isolation(tmp_path):
    argv = BOX.build_argv(
        make_spec(tmp_path, memory_bytes=2 << 30, max_pids=128, cpu_seconds=60, max_file_bytes=50 << 20,
                  max_open_files=256),
        "sandbox-test-1",
    )
    assert argv[1:3] == ["run", "--rm"] and flag_values(argv, "--name") == ["sandbox-test-1"]
    assert flag_values(argv, "--network") == ["none"]
    assert flag_values(argv, "--memory") == [str(2 << 30)] and flag_values(argv, "--memory-swap") == [str(2 << 30)]
    assert flag_values(argv, "--pids-limit") == ["128"] and flag_values(argv, "--user") == ["1000:1000"]
    assert set(flag_values(argv, "--ulimit")) >= {"cpu=60:61", f"fsize={50 << 20}:{50 << 20}", "nofile=256:256"}
    assert "--read-only" in argv and flag_values(argv, "--cap-drop") == ["ALL"]
    assert flag_values(argv, "--workdir") == [str(tmp_path / "work")]
    mounts = flag_values(argv, "--mount")
    assert f"type=bind,source={tmp_path / 'work'},target={tmp_path / 'work'}" in mounts
    assert f"type=bind,source={tmp_path / 'work' / 'scorer'},target={tmp_path / 'work' / 'scorer'},readonly" in mounts
    # the image and the host interpreter mapped to the image's python
    assert argv[-4:] == [DEFAULT_IMAGE, "python", "-c", "print('hi')"]


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


def test_options(tmp_path):
    box = DockerSandbox(image="custom:1", user=None, cpus=1.5, translate_python=False)
    argv = box.build_argv(make_spec(tmp_path), "n")
    assert "--user" not in argv and flag_values(argv, "--cpus") == ["1.5"]
    assert argv[-4:] == ["custom:1", sys.executable, "-c", "print('hi')"]


def test_unavailable_gives_one_line_reason_and_run_refuses(tmp_path):
    if AVAILABLE:
        pytest.skip("a docker daemon answers here")
    assert REASON and "\n" not in REASON
    with pytest.raises(SandboxUnavailableError, match="docker"):
        BOX.run(make_spec(tmp_path))
    missing = DockerSandbox(docker_bin="/nonexistent/docker")
    ok, reason = missing.available()
    assert not ok and reason


def test_dockerfile_by_construction():
    text = (REPO / "sandbox" / "Dockerfile").read_text()
    instructions = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert instructions[0] == "FROM python:3.11-slim"
    torch = text.index("torch==2.13.0")
    assert "--index-url https://download.pytorch.org/whl/cpu" in text[text.rfind("RUN", 0, torch) : torch]
    assert torch < text.index('pip install -e ".[media]"')
    users = re.findall(r"^USER (\S+)", text, re.M)
    assert users and users[-1] != "root" and not users[-1].startswith("0")
    assert (REPO / "sandbox" / "Dockerfile.dockerignore").read_text().count(".venv") == 1


@pytest.mark.skipif(not AVAILABLE, reason=f"docker unavailable: {REASON}")
def test_live_run():
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        work = Path(tmp)
        work.chmod(0o777)
        result = BOX.run(SandboxSpec(argv=["python", "-c", "import os; print(os.getuid())"], workdir=work,
                                     writable=[work], wall_timeout_s=120))
    assert result.exit_code == 0 and result.stdout.strip() == "1000"
