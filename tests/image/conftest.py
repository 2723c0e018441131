"""Fixtures for the image tests: a read-only mount of the built root for testinfra."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def root_partition_offset(raw: Path) -> int:
    table = json.loads(
        subprocess.run(
            ["sfdisk", "--json", str(raw)], check=True, capture_output=True, text=True
        ).stdout
    )
    parts = table["partitiontable"]["partitions"]
    return int(parts[-1]["start"]) * 512


@pytest.fixture(scope="session")
def built_root(built_image: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The built image's ext4 root, mounted read-only (loop) for the hygiene checks."""
    raw = built_image / "image.raw"
    mnt = Path(tmp_path_factory.mktemp("root"))
    subprocess.run(
        ["mount", "-o", f"ro,loop,offset={root_partition_offset(raw)}", str(raw), str(mnt)],
        check=True,
        capture_output=True,
    )
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False, capture_output=True)
