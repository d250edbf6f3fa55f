"""scripts/fetch_data.py: local copies verified by sha256, atomic writes, no network."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.datasets.locomo import load_locomo
from benchmarks.datasets.memgallery import load_memgallery
from harness.paths import REPO_ROOT, data_dir

SCRIPT = REPO_ROOT / "scripts" / "fetch_data.py"
SHARED = data_dir()
needs_data = pytest.mark.skipif(
    not (SHARED / "locomo" / "locomo10.json").is_file(), reason=f"benchmark data not under {SHARED}"
)
DIALOG = "mem-gallery/benchmark/data/dialog"


def _load_script():
    spec = importlib.util.spec_from_file_location("fetch_data", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["fetch_data"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


fetch_data = _load_script()


def _no_network(url):
    raise AssertionError(f"tests must not touch the network ({url})")


def _run(args, capsys, opener=_no_network):
    code = fetch_data.main([str(a) for a in args], opener=opener)
    out, err = capsys.readouterr()
    return code, out, err


def _leftovers(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if ".part-" in p.name]


@needs_data
def test_copy_from_local_folder_verifies_and_loads(tmp_path, capsys):
    dest = tmp_path / "data"
    code, out, err = _run(["all", "--from", SHARED, "--dest", dest], capsys)
    assert code == 0, err
    assert "locomo/locomo10.json: copied" in out
    assert fetch_data.sha256_of(dest / "locomo" / "locomo10.json") == fetch_data.locomo_assets()[0].sha256
    assert len(list((dest / DIALOG).glob("*.json"))) == 20
    assert load_locomo(dest / "locomo" / "locomo10.json").stats()["questions"] == 1986
    assert load_memgallery(dest / "mem-gallery").stats()["questions"] == 1711
    assert not _leftovers(dest)
    # a second run leaves verified files alone
    code, out, _ = _run(["locomo", "--from", SHARED, "--dest", dest], capsys)
    assert code == 0 and "locomo/locomo10.json: present" in out


@needs_data
def test_hash_mismatch_deletes_temp_and_fails_in_one_line(tmp_path, capsys):
    source = tmp_path / "src"
    (source / "locomo").mkdir(parents=True)
    tampered = (SHARED / "locomo" / "locomo10.json").read_bytes().replace(b"Caroline", b"Karoline", 1)
    (source / "locomo" / "locomo10.json").write_bytes(tampered)
    dest = tmp_path / "data"
    code, out, err = _run(["locomo", "--from", source, "--dest", dest], capsys)
    assert code == 1
    assert err.count("\n") == 1 and "locomo/locomo10.json: sha256 mismatch" in err
    assert not (dest / "locomo" / "locomo10.json").exists()
    assert not _leftovers(tmp_path)


def test_missing_source_folder_and_file(tmp_path, capsys):
    code, _, err = _run(["locomo", "--from", tmp_path / "nope", "--dest", tmp_path / "d"], capsys)
    assert code == 1 and "not a folder" in err
    (tmp_path / "empty").mkdir()
    code, _, err = _run(["locomo", "--from", tmp_path / "empty", "--dest", tmp_path / "d"], capsys)
    assert code == 1 and "locomo/locomo10.json: not found under" in err


@needs_data
def test_download_tries_mirrors_and_verifies(tmp_path, capsys):
    good = (SHARED / "locomo" / "locomo10.json").read_bytes()
    license_text = (SHARED / "locomo" / "LICENSE.txt").read_bytes()
    calls = []

    def opener(url):
        calls.append(url)
        if url.endswith("LICENSE.txt"):
            return io.BytesIO(license_text)
        if fetch_data.LOCOMO_COMMIT in url:
            return io.BytesIO(b"corrupted")  # the pinned commit serves a bad copy...
        return io.BytesIO(good)  # ...the second mirror the right one

    code, out, err = _run(["locomo", "--dest", tmp_path], capsys, opener)
    assert code == 0, err
    assert "downloaded from https://raw.githubusercontent.com/snap-research/locomo/main/data/locomo10.json" in out
    assert calls[0].startswith("https://raw.githubusercontent.com/snap-research/locomo/")
    assert (tmp_path / "locomo" / "locomo10.json").read_bytes() == good

    code, _, err = _run(["locomo", "--dest", tmp_path / "bad"], capsys, lambda url: io.BytesIO(b"x"))
    assert code == 1 and "every source failed" in err and err.count("\n") == 1
    assert not (tmp_path / "bad" / "locomo" / "locomo10.json").exists() and not _leftovers(tmp_path)


@pytest.fixture
def own_manifest(monkeypatch):
    """Tests write their own small manifest instead of the snapshot's pinned one."""
    monkeypatch.setattr(fetch_data, "IMAGE_MANIFEST_SHA256", None)


def _image_source(tmp_path: Path, images: dict[str, bytes], manifest_sha: dict[str, str] | None = None) -> Path:
    """A local source with the real dialog files and a small image manifest."""
    source = tmp_path / "src"
    shutil.copytree(SHARED / DIALOG, source / DIALOG)
    lines = ["path\tlfs_sha256\tsize_bytes"]
    for rel, content in images.items():
        path = source / "mem-gallery" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        sha = (manifest_sha or {}).get(rel) or hashlib.sha256(content).hexdigest()
        lines.append(f"{rel}\t{sha}\t{len(content)}")
    (source / fetch_data.IMAGE_MANIFEST).write_text("\n".join(lines) + "\n")
    return source


@needs_data
def test_images_are_verified_against_the_manifest(tmp_path, capsys, own_manifest):
    images = {"benchmark/data/image/T/D1_IMG_001.jpg": b"\xff\xd8" + bytes(3000),
              "benchmark/data/image/T/QA_IMG_001.png": b"\x89PNG" + bytes(3000)}
    source = _image_source(tmp_path, images)
    dest = tmp_path / "data"
    code, out, err = _run(["memgallery", "--from", source, "--dest", dest, "--images"], capsys)
    assert code == 0, err
    assert "2 images verified" in out
    assert (dest / "mem-gallery/benchmark/data/image/T/D1_IMG_001.jpg").read_bytes() == images[
        "benchmark/data/image/T/D1_IMG_001.jpg"
    ]
    assert load_memgallery(dest / "mem-gallery").stats()["turns"] == 3962


@needs_data
def test_a_tampered_manifest_is_refused(tmp_path, capsys):
    source = _image_source(tmp_path, {"benchmark/data/image/T/D1_IMG_001.jpg": bytes(3000)})
    code, _, err = _run(["memgallery", "--from", source, "--dest", tmp_path / "d"], capsys)
    assert code == 1 and "image_manifest.tsv: sha256 mismatch" in err


@needs_data
def test_image_mismatch_and_lfs_pointer_fail(tmp_path, capsys, own_manifest):
    rel = "benchmark/data/image/T/D1_IMG_001.jpg"
    source = _image_source(tmp_path / "a", {rel: b"\xff\xd8" + bytes(3000)}, {rel: "0" * 64})
    code, _, err = _run(["memgallery", "--from", source, "--dest", tmp_path / "d1", "--images"], capsys)
    assert code == 1 and f"mem-gallery/{rel}: sha256 mismatch" in err and err.count("\n") == 1
    assert not (tmp_path / "d1" / "mem-gallery" / rel).exists() and not _leftovers(tmp_path)
    pointer = b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 3000\n"
    source = _image_source(tmp_path / "b", {rel: pointer})
    code, _, err = _run(["memgallery", "--from", source, "--dest", tmp_path / "d2", "--images"], capsys)
    assert code == 1 and "Git LFS pointer" in err


@needs_data
def test_images_need_a_manifest_and_all_files(tmp_path, capsys):
    source = tmp_path / "src"
    shutil.copytree(SHARED / DIALOG, source / DIALOG)
    code, _, err = _run(["memgallery", "--from", source, "--dest", tmp_path / "d", "--images"], capsys)
    assert code == 1 and "--images needs" in err
    # the shared snapshot has the manifest but not the (LFS) images themselves
    code, _, err = _run(["memgallery", "--from", SHARED, "--dest", tmp_path / "d", "--images"], capsys)
    assert code == 1 and "1490 of 1490 images not found" in err


@needs_data
def test_command_line(tmp_path):
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "locomo", "--from", str(SHARED), "--dest", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert f"export MEMSYS_DATA_DIR={tmp_path.resolve()}" in result.stdout
    bad = subprocess.run([sys.executable, str(SCRIPT), "squad"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
