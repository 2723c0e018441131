"""Fixtures for the image tests: the packer-qemu build, and read-only mounts of the built
roots (chroot builder and packer-qemu builder) for testinfra."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from image_build import build, containerd_dir, kube_dir, require_build_host


def root_partition_offset(raw: Path) -> int:
    table = json.loads(
        subprocess.run(
            ["sfdisk", "--json", str(raw)], check=True, capture_output=True, text=True
        ).stdout
    )
    parts = table["partitiontable"]["partitions"]
    return int(parts[-1]["start"]) * 512


@contextmanager
def mounted_root(raw: Path, mnt: Path) -> Iterator[Path]:
    """The ext4 root of a raw disk, mounted read-only (loop) for the hygiene checks."""
    subprocess.run(
        ["mount", "-o", f"ro,loop,offset={root_partition_offset(raw)}", str(raw), str(mnt)],
        check=True,
        capture_output=True,
    )
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False, capture_output=True)


@pytest.fixture(scope="session")
def built_root(built_image: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The chroot builder's root."""
    with mounted_root(built_image / "image.raw", tmp_path_factory.mktemp("root")) as mnt:
        yield mnt


@pytest.fixture(scope="session")
def packer_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Output dir of ``--builder packer-qemu --oci-runtime crun`` (qcow2 + raw) with containerd
    2.x (Debian unstable's .deb as a ``dir:`` source, config version 3): Packer's qemu builder
    boots the base disk under TCG and the roles run over SSH. ``build-output.txt``
    beside it holds what the command printed. ``NODESMITH_TEST_PACKER_IMAGE=dir`` reuses an
    earlier build."""
    reuse = os.environ.get("NODESMITH_TEST_PACKER_IMAGE")
    if reuse:
        return Path(reuse)
    require_build_host()
    if not shutil.which("packer") or not shutil.which("qemu-system-x86_64"):
        pytest.skip("packer and qemu are needed (scripts/setup installs them)")
    base = Path(tmp_path_factory.mktemp("packer", numbered=True))
    (base / "cwd").mkdir()
    proc = build(base / "out", kube_dir(base / "k8s"), "--builder", "packer-qemu",
                 "--oci-runtime", "crun", "--format", "qcow2,raw", "--datasources", "NoCloud",
                 "--containerd-source", f"dir:{containerd_dir()}", cwd=base / "cwd")  # fmt: skip
    (base / "build-output.txt").write_text(proc.stdout + proc.stderr, encoding="utf-8")
    return base / "out"


@pytest.fixture(scope="session")
def packer_root(packer_image: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The packer-qemu builder's root."""
    with mounted_root(packer_image / "image.raw", tmp_path_factory.mktemp("proot")) as mnt:
        yield mnt
