"""What the default build publishes: artifacts, their hashes, the manifest, the box."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

import pytest

from bootstrap.manifest import load_manifest

pytestmark = pytest.mark.image


def sha256(path: Path) -> str:
    """Computed by coreutils, independently of the builder's own hashing."""
    out = subprocess.run(["sha256sum", str(path)], capture_output=True, text=True, check=True)
    return out.stdout.split()[0]


def test_manifest_matches_artifacts(built_image: Path) -> None:
    m = load_manifest(built_image / "manifest.json")
    assert set(m.artifacts) == {"qcow2", "raw", "box"}
    for art in m.artifacts.values():
        path = built_image / art.path
        assert path.stat().st_size == art.size
        assert sha256(path) == art.sha256


def test_manifest_contents(built_image: Path) -> None:
    m = load_manifest(built_image / "manifest.json")
    assert m.os is not None and m.os.id == "debian" and m.os.version_id == "12"
    assert m.kernel and m.kernel.endswith("-amd64")
    assert m.runtime.name == "containerd" and m.runtime.version == m.packages["containerd"]
    assert m.runtime.version.startswith("1.6.")
    assert m.runtime.oci_runtime is not None and m.runtime.oci_runtime.name == "runc"
    assert m.runtime.oci_runtime.version == m.packages["runc"]
    assert m.kubernetes.source == "dir"
    assert m.kubernetes.kubectl and m.kubernetes.kubectl.startswith("v1.")
    assert m.kubernetes.kubelet is None and m.kubernetes.kubeadm is None
    assert len(m.packages) > 150 and "openssh-server" in m.packages
    assert m.inputs_hash and m.inputs_hash.startswith("sha256:") and len(m.inputs_hash) == 71
    for stage in ("rootfs", "roles", "disk", "qcow2", "box", "total"):
        assert m.timings[stage] > 0, stage
    raw = json.loads((built_image / "manifest.json").read_text())
    assert raw["schemaVersion"] == 1 and "ociRuntime" in raw["runtime"]


def test_qcow2_is_compressed_and_small(built_image: Path) -> None:
    info = json.loads(
        subprocess.run(
            ["qemu-img", "info", "--output=json", str(built_image / "image.qcow2")],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    assert info["format"] == "qcow2"
    assert info["format-specific"]["data"]["compression-type"] == "zstd"
    assert info["virtual-size"] == 4096 * 1024 * 1024
    assert (built_image / "image.qcow2").stat().st_size < 450 * 1024 * 1024


def test_raw_is_gpt_with_bios_esp_root(built_image: Path) -> None:
    table = json.loads(
        subprocess.run(
            ["sfdisk", "--json", str(built_image / "image.raw")],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    parts = table["partitiontable"]["partitions"]
    assert table["partitiontable"]["label"] == "gpt"
    assert [p["type"] for p in parts] == [
        "21686148-6449-6E6F-744E-656564454649",  # BIOS boot
        "C12A7328-F81F-11D2-BA4B-00A0C93EC93B",  # EFI system
        "0FC63DAF-8483-4772-8E79-3D69D8477DE4",  # Linux filesystem
    ]
    mbr = (built_image / "image.raw").open("rb").read(512)
    assert mbr[510:] == b"\x55\xaa" and mbr[:2] != b"\0\0"  # GRUB boot.img in the MBR


def test_box_layout(built_image: Path) -> None:
    with tarfile.open(built_image / "image.box") as tar:
        names = set(tar.getnames())
        assert names == {"metadata.json", "Vagrantfile", "box.img"}
        meta = json.load(tar.extractfile("metadata.json"))  # type: ignore[arg-type]
        assert meta == {"provider": "libvirt", "format": "qcow2", "virtual_size": 4}
        head = tar.extractfile("box.img").read(4)  # type: ignore[union-attr]
        assert head == b"QFI\xfb"


def test_build_log_published(built_image: Path) -> None:
    log = (built_image / "build.log").read_text()
    assert "rootfs done in" in log and "pyinfra" in log
