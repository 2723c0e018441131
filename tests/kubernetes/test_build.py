"""``nodesmith kubernetes build``: the cached build's shape, and failures that name their step
and leave no partial cache. The cold build itself runs in scripts/setup (once per machine);
these tests read what it left, and break a build on purpose only where it fails fast."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bootstrap.checksums import read_sums
from bootstrap.errors import NodesmithError
from bootstrap.kubernetes import build as kbuild
from bootstrap.kubernetes.source import DEBIAN_VERSION, KUBERNETES_VERSION


def test_cached_build_has_seven_binaries_and_images_with_sums(kubernetes_build: Path) -> None:
    bins = read_sums(kubernetes_build / "bin" / "SHA256SUMS")
    assert sorted(bins) == sorted(kbuild.BINARIES)
    info = json.loads((kubernetes_build / "build.json").read_text())
    assert info["kubernetesVersion"] == KUBERNETES_VERSION
    assert info["source"]["version"] == DEBIAN_VERSION
    assert info["binaries"] == bins
    sums = read_sums(kubernetes_build / "images" / "SHA256SUMS")
    refs = {name: image["ref"] for name, image in info["images"].items()}
    assert refs == {
        "kube-apiserver": "k8s.gcr.io/kube-apiserver:v1.20.2",
        "kube-controller-manager": "k8s.gcr.io/kube-controller-manager:v1.20.2",
        "kube-scheduler": "k8s.gcr.io/kube-scheduler:v1.20.2",
        "kube-proxy": "k8s.gcr.io/kube-proxy:v1.20.2",
        "etcd": "k8s.gcr.io/etcd:3.4.23-0",
        "pause": "k8s.gcr.io/pause:3.2",
        "busybox": "localhost/nodesmith/busybox:1.35.0",
    }
    assert {image["archive"]: image["sha256"] for image in info["images"].values()} == sums


@pytest.mark.parametrize(
    ("binary", "argv", "expected"),
    [
        ("kubeadm", ["version", "-o", "short"], "v1.20.2"),
        ("kubelet", ["--version"], "Kubernetes v1.20.2"),
        ("kube-apiserver", ["--version"], "Kubernetes v1.20.2"),
    ],
)
def test_binaries_report_the_version(
    kubernetes_build: Path, binary: str, argv: list[str], expected: str
) -> None:
    import subprocess

    out = subprocess.run([str(kubernetes_build / "bin" / binary), *argv], capture_output=True,
                         text=True, check=True, timeout=60).stdout.strip()  # fmt: skip
    assert out == expected


def test_unreachable_source_names_the_step_and_leaves_no_cache(tmp_path: Path) -> None:
    """A mirror nobody serves (a loopback port with no listener): the build stops at the
    apt step, says so, and the cache holds no build and no staging directory."""
    with pytest.raises(NodesmithError) as caught:
        kbuild.build(tmp_path, mirror="http://127.0.0.1:9/debian")
    message = str(caught.value)
    assert "apt-get" in message and "failed" in message
    root = tmp_path / "kubernetes"
    assert sorted(p.name for p in root.iterdir()) == ["logs", "source"]
    assert kbuild.current(tmp_path) is None


def test_cache_key_changes_with_the_toolchain(tmp_path: Path) -> None:
    dsc = tmp_path / "k.dsc"
    dsc.write_text("Format: 3.0 (quilt)\n")
    source = kbuild.SourcePackage(dsc, tmp_path / "o", tmp_path / "d")
    host = {"golang-go": "2:1.19~1"}
    assert kbuild.cache_key(source, host) == kbuild.cache_key(source, dict(host))
    assert kbuild.cache_key(source, host) != kbuild.cache_key(source, {"golang-go": "2:1.20~1"})
