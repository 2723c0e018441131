"""``nodesmith image build --builder packer-qemu --oci-runtime crun`` with containerd 2.x (a
``dir:`` source), run for real: packer 1.6.6 (through packer-py) boots the base disk under TCG
and the roles run over SSH.
test_hygiene.py checks the resulting root; this checks what the build publishes and prints,
and boots the result as a node (where the readiness suite runs a container with crun)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from image_build import containerd_dir
from test_artifacts import sha256

from bootstrap.manifest import load_manifest
from bootstrap.render.loader import load_paths

pytestmark = [pytest.mark.image, pytest.mark.vm]


def test_artifacts_and_hashes(packer_image: Path) -> None:
    m = load_manifest(packer_image / "manifest.json")
    assert set(m.artifacts) == {"qcow2", "raw"}
    for art in m.artifacts.values():
        path = packer_image / art.path
        assert path.stat().st_size == art.size
        assert sha256(path) == art.sha256
    assert (packer_image / "build.log").stat().st_size > 1000
    assert sorted(p.name for p in packer_image.iterdir()) == [
        "build.log", "image.qcow2", "image.raw", "manifest.json"]  # fmt: skip
    if (packer_image.parent / "cwd").is_dir():  # nothing (packer_cache/) left where it ran
        assert list((packer_image.parent / "cwd").iterdir()) == []


def test_manifest_describes_the_disk_packer_returned(packer_image: Path, packer_root: Path) -> None:
    """Packages and kernel come from the final disk, as dpkg inside it sees them."""
    m = load_manifest(packer_image / "manifest.json")
    out = subprocess.run(
        ["chroot", str(packer_root), "dpkg-query", "-W", "-f",
         "${db:Status-Abbrev}=${Package}=${Version}\n"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rows = [line.split("=", 2) for line in out.splitlines()]
    inside = {name: version for status, name, version in rows if status[1:2] == "i"}
    assert len(inside) > 150 and m.packages == inside
    # containerd 2.x from the dir: source (Debian unstable's .deb), with a version 3 config
    (deb,) = containerd_dir().glob("containerd_*.deb")
    assert m.runtime.version == inside["containerd"] == deb.name.split("_")[1]
    assert m.runtime.version.startswith("2.") and m.runtime.config_version == 3
    boot = packer_root / "boot"
    assert [m.kernel] == [p.name.removeprefix("vmlinuz-") for p in boot.glob("vmlinuz-*")]
    assert m.os is not None and (m.os.id, m.os.version_id) == ("debian", "12")
    assert m.kubernetes.source == "dir" and m.kubernetes.kubectl
    assert m.kubernetes.kubelet is None  # the dir: source holds kubectl only
    assert (packer_root / "etc/kubernetes-version").read_text().strip() == m.kubernetes.kubectl
    assert m.runtime.oci_runtime is not None and m.runtime.oci_runtime.name == "crun"
    assert m.runtime.oci_runtime.version == inside["crun"]
    config = (packer_root / "etc/containerd/config.toml").read_text()
    assert 'BinaryName = "/usr/bin/crun"' in config and "SystemdCgroup = true" in config
    assert config.splitlines()[1] == "version = 3" and "io.containerd.cri.v1.runtime" in config
    stages = ("base disk (chroot, cloud-init role only)", "packer build (qemu)", "qcow2", "total")
    for stage in stages:
        assert m.timings[stage] > 0, stage


def test_inputs_hash_names_the_builder(packer_image: Path, built_image: Path) -> None:
    """Same definition, roles and Kubernetes source; another builder is another image."""
    packer = load_manifest(packer_image / "manifest.json").inputs_hash
    chroot = load_manifest(built_image / "manifest.json").inputs_hash
    assert packer and chroot and packer.startswith("sha256:") and packer != chroot


def test_progress_shows_packer_and_the_roles(packer_image: Path) -> None:
    printed = (packer_image.parent / "build-output.txt").read_text(encoding="utf-8")
    assert "packer build (qemu) ..." in printed
    assert "packer: ==> qemu.node: Waiting for SSH to become available..." in printed
    assert "packer: ==> qemu.node: Gracefully halting virtual machine..." in printed
    log = (packer_image / "build.log").read_text(encoding="utf-8")
    assert "pyinfra" in log and "containerd config.toml" in log


def test_packer_image_boots_as_a_node(packer_image: Path, tmp_path: Path) -> None:
    """``nodesmith verify`` on the packer-built image with the examples' worker: the readiness
    suite green but kubelet (none in the image) and crun running a container."""
    repo = Path(__file__).resolve().parents[2]
    nodesmith = str(Path(sys.executable).parent / "nodesmith")
    env = dict(os.environ, NODESMITH_STATE_DIR=str(tmp_path / "state"))
    cas = tmp_path / "cas.yaml"
    subprocess.run([nodesmith, "render", "--all", "-f", str(repo / "examples"), "--out-dir",
                    str(tmp_path / "render"), "--secrets-out", str(cas)],
                   check=True, capture_output=True, env=env)  # fmt: skip
    # The control plane those CAs belong to is now initialized: the worker joins, not waits.
    objects = load_paths([str(repo / "examples")])
    next(o for o in objects if o["kind"] == "Cluster")["status"] = {
        "conditions": [{"type": "ControlPlaneInitialized", "status": "True"}]
    }
    bundle = tmp_path / "initialized.yaml"
    bundle.write_text(yaml.safe_dump_all(objects, sort_keys=False), encoding="utf-8")
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [nodesmith, "verify", str(packer_image / "image.qcow2"), "-f", str(bundle),
         "-f", str(cas), "--machine", "default/demo-md-0", "--no-image-manifest",
         "--expect-bootstrap", "Failed:KubeadmNotFound", "--json", str(report)],
        capture_output=True, text=True, timeout=900, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    checks = {c["check"]: c for c in json.loads(report.read_text())["checks"]}
    smoke = checks["test_oci_runtime_runs_a_container"]
    assert smoke["outcome"] == "passed" and "/usr/bin/crun ran /bin/sh" in smoke["message"]
    skipped = {k for k, c in checks.items() if c["outcome"] == "skipped"}
    assert skipped == {"test_kubelet_version", "test_kubelet_enabled"}, skipped
