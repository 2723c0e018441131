"""Preloaded container images: image-builder's air-gapped path.

``--preload-images DIR`` names a directory of image archives (``docker save`` or OCI
tarballs) with a SHA256SUMS. Every archive is checked before anything is installed: a
wrong hash, a listed archive that is missing, or an archive nobody listed stops the build,
naming the file (and both hashes). The ``images`` role then imports them into containerd's
``k8s.io`` namespace inside the image and records what containerd holds in
``/var/lib/nodesmith/preloaded-images.json``, which the manifest copies.
"""

from __future__ import annotations

import json
from pathlib import Path

from bootstrap.checksums import read_sums, sha256_file
from bootstrap.errors import TerminalError
from bootstrap.manifest import PreloadedImage

RECORD = "var/lib/nodesmith/preloaded-images.json"  # relative to the image's root
ARCHIVE_SUFFIXES = (".tar", ".oci.tar")


def check_dir(directory: Path) -> dict[str, str]:
    """Every archive in ``directory`` checked against SHA256SUMS: name -> sha256."""
    sums_path = directory / "SHA256SUMS"
    if not directory.is_dir():
        raise TerminalError(
            "is not a directory",
            obj=str(directory),
            field="--preload-images",
            reason="PreloadDirMissing",
        )
    if not sums_path.is_file():
        raise TerminalError(
            "SHA256SUMS is missing",
            obj=str(directory),
            field="--preload-images",
            reason="ChecksumsMissing",
        )
    sums = read_sums(sums_path)
    present = {p.name for p in directory.iterdir() if p.name.endswith(ARCHIVE_SUFFIXES)}
    for name in sorted(present - set(sums)):
        raise TerminalError(
            f"{directory / name} has no line in {sums_path}",
            obj=str(directory / name),
            reason="ChecksumMissing",
        )
    for name, expected in sorted(sums.items()):
        path = directory / name
        if not path.is_file():
            raise TerminalError(
                f"{sums_path} names {name}, which is not in the directory",
                obj=str(path),
                reason="PreloadImageMissing",
            )
        actual = sha256_file(path)
        if actual != expected:
            raise TerminalError(
                f"sha256 mismatch for {path}: SHA256SUMS says {expected}, file has {actual}",
                obj=str(path),
                reason="ChecksumMismatch",
            )
    if not sums:
        raise TerminalError(
            "SHA256SUMS lists no image archive", obj=str(sums_path), reason="NoPreloadImages"
        )
    return dict(sorted(sums.items()))


def read_record(root: Path, archives: dict[str, str]) -> list[PreloadedImage]:
    """What the ``images`` role recorded inside ``root``, joined with the archives' hashes."""
    path = root / RECORD
    if not path.is_file():
        raise TerminalError(
            "the images role left no record of the imported images",
            obj=str(path),
            reason="PreloadFailed",
        )
    return parse_record(path.read_text(encoding="utf-8"), archives)


def parse_record(text: str, archives: dict[str, str]) -> list[PreloadedImage]:
    entries = json.loads(text)
    return [
        PreloadedImage(
            ref=e["ref"],
            digest=e["digest"],
            archive=e["archive"],
            archiveSha256=archives.get(e["archive"], ""),
        )
        for e in entries
    ]
