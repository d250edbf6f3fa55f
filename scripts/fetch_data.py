#!/usr/bin/env python3
"""Fetch the benchmark data (LoCoMo, Mem-Gallery) into a data folder, verified by sha256.

    python scripts/fetch_data.py [locomo|memgallery|all] [--from DIR] [--dest DIR] [--images]

Layout written under DEST (the folder MEMSYS_DATA_DIR points at):

    locomo/locomo10.json, locomo/LICENSE.txt
    mem-gallery/benchmark/data/dialog/<Topic>.json (20 files), mem-gallery/LICENSE
    mem-gallery/benchmark/data/image/<Topic>/<file>   (only with --images)

Sources: LoCoMo from its official GitHub repository (snap-research/locomo, the commit
of our snapshot, then ``main``); Mem-Gallery from its official Hugging Face dataset
(Ethan-Bei/Mem-Gallery, "dialog" and "image" folders as its README describes), then
the GitHub snapshot named in the data's SOURCE.txt. Every data file must match the
sha256 pinned below, whichever source it came from; images are checked against
``mem-gallery/benchmark/data/image_manifest.tsv`` (path, sha256, size).

``--from DIR`` copies from a local folder with the same layout instead of the network.
Writes are atomic (temporary file + rename); a hash mismatch deletes the temporary
file and stops with a one-line error. Files already present with the right hash are
left alone. Standard library only, so it runs before the project is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import os
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

LOCOMO_COMMIT = "3eb6f2c585f5e1699204e3c3bdf7adc5c28cb376"
LOCOMO_RAW = "https://raw.githubusercontent.com/snap-research/locomo/{ref}/{path}"
MEMGALLERY_HF = "https://huggingface.co/datasets/Ethan-Bei/Mem-Gallery/resolve/main/{path}"
MEMGALLERY_COMMIT = "c0a045454850be4db8ded067105c81f998b9d457"
MEMGALLERY_GH_RAW = "https://raw.githubusercontent.com/ma-xueqian/Mem-Gallery/{commit}/{path}"
MEMGALLERY_GH_LFS = "https://media.githubusercontent.com/media/ma-xueqian/Mem-Gallery/{commit}/{path}"
MEMGALLERY_DATA = "mem-gallery/benchmark/data"
IMAGE_MANIFEST = f"{MEMGALLERY_DATA}/image_manifest.tsv"
IMAGE_MANIFEST_SHA256: str | None = "247bae4566bc23aba0c6ea6a7be3722e566f7f9e4eceb53f3baa78f4f9c09d49"
CHUNK = 1 << 20
TIMEOUT_S = 60

MEMGALLERY_DIALOG_SHA256 = {
    "AI_Robotics_Automation_Future_Tech": "fb51fad8a80b3610d90eaced0bf01bb2250a7f486a8dc67e8e9eee88a4e55b8e",
    "Academic_Animal_Pet_Research_Life": "9289425b20c81b25a217ad1a76009c88ddf02a784881b719f8b7e5b25911b948",
    "Architecture_Art_Culture_Exhibition_Technology": "1d1c336cb1412ef866d3d6b7efddeb5dadc1f6ef1fd2678b79239722ae285bd4",
    "Astronomy_Physics_Scientific_Experiments_Cosmology": "38e1820504b88845f001c2820fdb53e0db8d0a4b9dc59083e5e60f376b864b97",
    "Baking_Dessert_Daily_Life_Skill": "7b0169375ef20cfa9ddf67433ca78139f82ce30449e7813bb748ea29610ea859",
    "Dog_Behavior_Research_Academic_Life": "d825f7e3798514144230bb9edc9c8811604c92f8ad16584ad24d1fc18029898b",
    "Education_Career_Research_Lifestyle": "6e8c712397dc41ae0da623250c36250f5b71a85a4f86199159d729337136cc8b",
    "Entrepreneurship_Blockchain_Economics_Logistics_Nature": "c869195883d786b12c1ec984ca12a2b061c0aea2b5feb7f1d19cc0070392bf5b",
    "Fashion_Personal_Care_Lifestyle_Shopping": "7c4d3a48758429280a9e0b55fce2ae1af1f1d7e05b27800240f15e2a45a2751a",
    "Global_Travel_Cultural_Sightseeing": "775871b984df79969ac9e50d0497642d49eaa203ab09937127d6358dc7a17037",
    "Global_Travel_Sustainable_Fashion_Design": "e8c5e8c36d559a25172204af98a1a012db580115061f5b1609e9d4b7b850b5d8",
    "Home_Health_Lifestyle_Product": "bcc786c056738d5163ad0a132ba67caae2df82303ac7b99065471721484caf1b",
    "Home_Repair_Maintenance_Cleaning": "6c10293e51b5a9fa567eb8fd56bd9af52429b19a9aa945abd26f5cea6ed9f91c",
    "Landscape_Travel_Architecture_Nature": "883d8fc1ea325fa7abf3bad5213e2f192323c71dc4209b6b24dfd0edcc66615a",
    "Music_Dance_Theater_Performance_Learning": "c536c4091c463a7cb0a71db9628f1fbf744389b049b74945b505b6f73f91569f",
    "Nature_Economics_Programming_Student_Life": "3978b59ff7beeb1d64c50c8393127b70504130139cd90c198c2bb9e1533dc6b0",
    "Parenting_Commuting_Hobbies_Travel_Gear": "88824a01e9a25ef49a7af63436651ec323910a81f3139be3796d398d101a892e",
    "Python_Botany_AI_Student_Life": "d5bd84226e1dd48ade2d37683f91ed3a55d7f230d89bb6414ef68782b5103a7b",
    "Real_Estate_Home_Decor_DIY_Lifestyle": "ace411b22e74f80f9e25e5bf12279133b9895e2f38c9347581ae45541b740fcd",
    "Technology_Ethics_Future_Society": "11d931289ddd6bd9bd59a5564ccf6494d4ef59a10cdc5f320fbcf4a863c27fa2",
}


class FetchError(Exception):
    """One-line, user-facing failure."""


@dataclass(frozen=True)
class Asset:
    rel: str  # path under DEST, "/"-separated
    sha256: str | None  # None: documentation, copied unverified
    urls: tuple[str, ...]  # network sources, tried in order
    required: bool = True
    size: int | None = None


def locomo_assets() -> list[Asset]:
    def urls(path: str) -> tuple[str, ...]:
        return tuple(LOCOMO_RAW.format(ref=ref, path=path) for ref in (LOCOMO_COMMIT, "main"))

    return [
        Asset("locomo/locomo10.json", "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4",
              urls("data/locomo10.json")),
        Asset("locomo/LICENSE.txt", "41003d4a74749c0220e33dd415042164b5a1093ed401f36277234f772d22d3d0",
              urls("LICENSE.txt"), required=False),
    ]


def memgallery_assets() -> list[Asset]:
    assets = [
        Asset(
            f"{MEMGALLERY_DATA}/dialog/{topic}.json",
            sha,
            (
                MEMGALLERY_HF.format(path=f"dialog/{topic}.json"),
                MEMGALLERY_GH_RAW.format(commit=MEMGALLERY_COMMIT, path=f"benchmark/data/dialog/{topic}.json"),
            ),
        )
        for topic, sha in sorted(MEMGALLERY_DIALOG_SHA256.items())
    ]
    assets.append(
        Asset("mem-gallery/LICENSE", "5eed718d439765459548f0d515b953d037e1947c2e4a7da3e520e3c6045de634",
              (MEMGALLERY_GH_RAW.format(commit=MEMGALLERY_COMMIT, path="LICENSE"),), required=False)
    )
    # the image manifest is part of our snapshot (SOURCE.txt), not of the upstream repo
    assets.append(
        Asset(IMAGE_MANIFEST, IMAGE_MANIFEST_SHA256, (), required=False)
    )
    return assets


def image_assets(manifest: Path) -> list[Asset]:
    """Images listed in the manifest (``path<TAB>lfs_sha256<TAB>size_bytes``, header line)."""
    assets = []
    with open(manifest, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            fields = line.rstrip("\n").split("\t")
            if lineno == 1 and fields[0] == "path":
                continue
            if len(fields) != 3 or len(fields[1]) != 64 or not fields[2].isdigit():
                raise FetchError(f"{manifest.name}: line {lineno}: expected 'path<TAB>sha256<TAB>size'")
            path, sha, size = fields
            inner = path.removeprefix("benchmark/data/")  # HF layout: image/<Topic>/<file>
            assets.append(
                Asset(
                    f"mem-gallery/{path}",
                    sha,
                    (
                        MEMGALLERY_HF.format(path=inner),
                        MEMGALLERY_GH_LFS.format(commit=MEMGALLERY_COMMIT, path=path),
                    ),
                    size=int(size),
                )
            )
    return assets


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def write_verified(stream: BinaryIO, dest: Path, asset: Asset, origin: str) -> None:
    """Stream into a temporary file next to ``dest``, check the hash, then rename into place."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.part-{os.getpid()}")
    digest = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for block in iter(lambda: stream.read(CHUNK), b""):
                digest.update(block)
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        got = digest.hexdigest()
        if asset.sha256 is not None and got != asset.sha256:
            raise FetchError(
                f"{asset.rel}: sha256 mismatch from {origin} (expected {asset.sha256[:16]}..., got {got[:16]}...)"
            )
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def is_lfs_pointer(path: Path) -> bool:
    if path.stat().st_size >= 1024:
        return False
    with open(path, "rb") as fh:
        return fh.read(24).startswith(b"version https://git-lfs")


def local_source(asset: Asset, source: Path) -> Path | None:
    """The asset in a local folder: same relative path, or (data files only) its name at the top."""
    candidates = [source / asset.rel]
    if asset.required:
        candidates.append(source / Path(asset.rel).name)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    return None


def fetch_local(asset: Asset, dest: Path, source: Path) -> str:
    found = local_source(asset, source)
    if found is None:
        if asset.required:
            raise FetchError(f"{asset.rel}: not found under {source}")
        return "skipped (not in source)"
    if asset.size is not None and is_lfs_pointer(found):
        raise FetchError(f"{asset.rel}: {found} is a Git LFS pointer, not the file (run 'git lfs pull' there)")
    with open(found, "rb") as fh:
        write_verified(fh, dest, asset, str(found))
    return "copied"


def fetch_remote(asset: Asset, dest: Path, opener: Callable[[str], BinaryIO]) -> str:
    if not asset.urls:
        if asset.required:
            raise FetchError(f"{asset.rel}: no network source; use --from DIR")
        return "skipped (no network source)"
    failures = []
    for url in asset.urls:
        try:
            with opener(url) as response:
                write_verified(response, dest, asset, url)
            return f"downloaded from {url}"
        except (urllib.error.URLError, OSError, http.client.HTTPException, FetchError) as exc:
            reason = getattr(exc, "reason", None) or exc
            failures.append(f"{url}: {reason}")
    if asset.required:
        raise FetchError(f"{asset.rel}: every source failed: " + "; ".join(failures))
    return "skipped (" + "; ".join(failures) + ")"


def default_opener(url: str) -> BinaryIO:
    request = urllib.request.Request(url, headers={"User-Agent": "omni-memsys-fetch/1"})
    return urllib.request.urlopen(request, timeout=TIMEOUT_S)  # noqa: S310 - fixed https URLs


def fetch(asset: Asset, dest_root: Path, source: Path | None, force: bool,
          opener: Callable[[str], BinaryIO] = default_opener) -> str:
    dest = dest_root / asset.rel
    if not force and dest.is_file() and asset.sha256 is not None and sha256_of(dest) == asset.sha256:
        return "present"
    if source is not None:
        return fetch_local(asset, dest, source)
    return fetch_remote(asset, dest, opener)


def _progress(items: list[Asset], label: str) -> Iterator[Asset]:
    try:
        from tqdm import tqdm
    except ImportError:  # optional
        yield from items
        return
    yield from tqdm(items, desc=label, unit="file", disable=not sys.stderr.isatty())


def run(datasets: list[str], dest: Path, source: Path | None, images: bool, force: bool,
        opener: Callable[[str], BinaryIO] = default_opener) -> None:
    for name in datasets:
        assets = locomo_assets() if name == "locomo" else memgallery_assets()
        for asset in assets:
            status = fetch(asset, dest, source, force, opener)
            print(f"{asset.rel}: {status}")
        if name == "memgallery" and images:
            manifest = dest / IMAGE_MANIFEST
            if not manifest.is_file():
                raise FetchError(f"--images needs {IMAGE_MANIFEST} (from the data snapshot, see SOURCE.txt); "
                                 "fetch with --from DIR or place it under DEST")
            listed = image_assets(manifest)
            if source is not None:
                missing = [a.rel for a in listed if local_source(a, source) is None and not (dest / a.rel).is_file()]
                if missing:
                    raise FetchError(f"{len(missing)} of {len(listed)} images not found under {source} "
                                     f"(first: {missing[0]})")
            counts: dict[str, int] = {}
            for asset in _progress(listed, "images"):
                status = fetch(asset, dest, source, force, opener)
                counts[status.split(" ")[0]] = counts.get(status.split(" ")[0], 0) + 1
            print(f"{MEMGALLERY_DATA}/image: {len(listed)} images verified ({counts})")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fetch_data.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", nargs="?", default="all", choices=["locomo", "memgallery", "all"])
    parser.add_argument("--from", dest="source", type=Path,
                        help="copy from this local data folder instead of the network")
    parser.add_argument("--dest", type=Path, default=None,
                        help="data folder to fill (default: $MEMSYS_DATA_DIR, else ./data)")
    parser.add_argument("--images", action="store_true",
                        help="also fetch Mem-Gallery images (517 MiB), verified by manifest")
    parser.add_argument("--force", action="store_true", help="fetch again even if a verified copy is present")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None, opener: Callable[[str], BinaryIO] = default_opener) -> int:
    args = parse_args(argv)
    dest = (args.dest or Path(os.environ.get("MEMSYS_DATA_DIR") or "data")).resolve()
    datasets = ["locomo", "memgallery"] if args.dataset == "all" else [args.dataset]
    try:
        if args.source is not None and not args.source.is_dir():
            raise FetchError(f"--from {args.source}: not a folder")
        run(datasets, dest, args.source.resolve() if args.source else None, args.images, args.force, opener)
    except FetchError as exc:
        print(f"fetch_data: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"fetch_data: error: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"data ready in {dest}; use it with: export MEMSYS_DATA_DIR={dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
