"""Build Kubernetes from Debian's source package once per machine, and cache the result.

Stages: fetch the source (apt, verified) -> unpack -> replace the vendored reflect2 ->
``make`` the seven binaries -> SHA256SUMS -> container image archives (+ SHA256SUMS) ->
``build.json``. Everything happens in a staging directory beside the cache and is renamed
into place only when complete, so a failed or killed build leaves no partial cache.

The cache key is the hash of the source package's .dsc (which pins every source file's
sha256), this recipe's version and the host toolchain's package versions: a new Go or
a changed recipe builds again, anything else reuses the cached build.

The trap this works around: Go >= 1.18 with the vendored ``modern-go/reflect2`` v1.0.1
builds, but kubeadm then panics writing the kubelet config (a nil dereference in
json-iterator). Debian 12's reflect2 1.0.2 replaces it; nothing else needs changing.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bootstrap.checksums import read_sums, sha256_file
from bootstrap.errors import TerminalError
from bootstrap.fsutil import atomic_write, default_cache_dir
from bootstrap.kubernetes import images
from bootstrap.kubernetes.source import DEBIAN_VERSION, KUBERNETES_VERSION, SourcePackage, fetch
from bootstrap.progress import Progress

RECIPE = "1"  # bump when a build step changes: it is part of the cache key
BINARIES = (
    "kubeadm",
    "kubelet",
    "kubectl",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kube-proxy",
)
REFLECT2 = Path("/usr/share/gocode/src/github.com/modern-go/reflect2")
# Host packages whose files end up in the build; their versions are part of the key.
HOST_PACKAGES = (
    "golang-go",
    "golang-github-modern-go-reflect2-dev",
    "gcc",
    "etcd-server",
    "iptables",
    "conntrack",
    "busybox-static",
)
REGISTRY = "k8s.gcr.io"  # kubeadm v1.20's default imageRepository
PAUSE_VERSION = "3.2"  # kubeadm v1.20's pause
BUSYBOX_REF = "localhost/nodesmith/busybox"
BUSYBOX_APPLETS = ("sh", "echo", "cat", "ls", "sleep", "env", "hostname", "wget", "nslookup")


@dataclass(frozen=True)
class Build:
    """A complete cached build."""

    path: Path

    @property
    def bin_dir(self) -> Path:
        return self.path / "bin"

    @property
    def images_dir(self) -> Path:
        return self.path / "images"

    @property
    def info(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.path / "build.json").read_text("utf-8"))
        return data

    def image_ref(self, name: str) -> str:
        """The reference of image ``name`` (``etcd``, ``pause``, ``busybox``...)."""
        ref: str = self.info["images"][name]["ref"]
        return ref


def cache_root(cache_dir: Path | None = None) -> Path:
    return (cache_dir or default_cache_dir()) / "kubernetes"


def current(cache_dir: Path | None = None) -> Build | None:
    """The build ``nodesmith kubernetes build`` last completed on this machine, if any."""
    pointer = cache_root(cache_dir) / "current"
    if not pointer.is_symlink():
        return None
    path = pointer.resolve()
    return Build(path) if (path / "build.json").is_file() else None


def host_versions() -> dict[str, str]:
    """Installed versions of ``HOST_PACKAGES``; a missing one stops the build up front."""
    done = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Status}\\n", *HOST_PACKAGES],
        capture_output=True,
        text=True,
        check=False,
    )
    versions = {}
    for line in done.stdout.splitlines():
        name, version, status = [*line.split(), "", ""][:3]
        if status == "installed":
            versions[name] = version
    missing = [p for p in HOST_PACKAGES if p not in versions]
    if missing:
        raise TerminalError(
            f"missing host packages: {' '.join(missing)} (scripts/setup installs them)",
            obj="host",
            reason="BuildDependenciesMissing",
        )
    return versions


def cache_key(source: SourcePackage, host: dict[str, str]) -> str:
    material = json.dumps({"dsc": source.sha256, "recipe": RECIPE, "host": host}, sort_keys=True)
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def _unpack(source: SourcePackage, tree: Path, progress: Progress) -> None:
    tree.mkdir()
    progress.run(
        ["tar", "-xzf", source.orig, "-C", tree, "--strip-components=1"], what="unpack the source"
    )
    vendored = tree / "vendor/github.com/modern-go/reflect2"
    shutil.rmtree(vendored)
    shutil.copytree(REFLECT2, vendored, symlinks=True)
    (vendored / "go.mod").unlink(missing_ok=True)  # a vendored package carries no go.mod
    progress.log(f"replaced {vendored} with {REFLECT2}")


def _make(tree: Path, progress: Progress) -> None:
    gopath = tree / ".go"
    (gopath / "src/k8s.io").mkdir(parents=True)
    (gopath / "src/k8s.io/kubernetes").symlink_to(tree)
    env = {
        "GOPATH": str(gopath),
        "GOFLAGS": "-mod=vendor",
        "KUBE_GIT_VERSION": KUBERNETES_VERSION,
        "KUBE_GIT_TREE_STATE": "clean",
        "KUBE_GIT_MAJOR": KUBERNETES_VERSION.split(".")[0].lstrip("v"),
        "KUBE_GIT_MINOR": KUBERNETES_VERSION.split(".")[1],
    }
    what = " ".join(f"cmd/{name}" for name in BINARIES)
    progress.run(
        ["make", "-C", gopath / "src/k8s.io/kubernetes", f"WHAT={what}"],
        env=env,
        what="make (Kubernetes binaries)",
    )


def _write_sums(directory: Path, names: list[str]) -> dict[str, str]:
    sums = {name: sha256_file(directory / name) for name in sorted(names)}
    text = "".join(f"{digest}  {name}\n" for name, digest in sums.items())
    atomic_write(directory / "SHA256SUMS", text.encode(), mode=0o644)
    return sums


def _pause(tree: Path, work: Path, progress: Progress) -> Path:
    out = work / "pause"
    progress.run(
        [
            "gcc",
            "-Os",
            "-Wall",
            "-Werror",
            "-static",
            f"-DVERSION=v{PAUSE_VERSION}",
            "-o",
            out,
            tree / "build/pause/linux/pause.c",
        ],
        what="gcc pause.c",
    )
    progress.run(["strip", out], what="strip pause")
    return out


def _etcd_version() -> str:
    done = subprocess.run(["etcd", "--version"], capture_output=True, text=True, check=True)
    return done.stdout.split()[2]  # "etcd Version: 3.4.23"


def image_specs(bin_dir: Path, pause: Path) -> dict[str, images.ImageSpec]:
    """Every image this build provides, keyed by short name."""
    specs: dict[str, images.ImageSpec] = {}
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        specs[name] = images.ImageSpec(f"{REGISTRY}/{name}:{KUBERNETES_VERSION}")
        images.add_binary(specs[name], bin_dir / name)
    proxy = images.ImageSpec(f"{REGISTRY}/kube-proxy:{KUBERNETES_VERSION}")
    images.add_binary(proxy, bin_dir / "kube-proxy")
    # kube-proxy drives iptables (nft backend, as Debian 12 hosts use) and conntrack.
    images.add_binary(proxy, Path("/usr/sbin/xtables-nft-multi"), dest="/usr/sbin")
    images.add_binary(proxy, Path("/usr/sbin/conntrack"), dest="/usr/sbin")
    for tool in (
        "iptables",
        "iptables-save",
        "iptables-restore",
        "ip6tables",
        "ip6tables-save",
        "ip6tables-restore",
    ):
        proxy.links[f"/usr/sbin/{tool}"] = "xtables-nft-multi"
    for module in sorted(Path("/usr/lib/x86_64-linux-gnu/xtables").glob("*.so")):
        proxy.files[str(module)] = module
    for etc in ("/etc/protocols", "/etc/services", "/etc/ethertypes"):
        if Path(etc).is_file():
            proxy.files[etc] = Path(etc)
    specs["kube-proxy"] = proxy
    etcd = images.ImageSpec(f"{REGISTRY}/etcd:{_etcd_version()}-0")
    images.add_binary(etcd, Path("/usr/bin/etcd"))
    specs["etcd"] = etcd
    specs["pause"] = images.ImageSpec(
        f"{REGISTRY}/pause:{PAUSE_VERSION}", files={"/pause": pause}, entrypoint=["/pause"]
    )
    busybox_version = subprocess.run(
        ["dpkg-query", "-W", "-f", "${source:Upstream-Version}", "busybox-static"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    busybox = images.ImageSpec(
        f"{BUSYBOX_REF}:{busybox_version}", files={"/bin/busybox": Path("/bin/busybox")}
    )
    for applet in BUSYBOX_APPLETS:
        busybox.links[f"/bin/{applet}"] = "busybox"
    specs["busybox"] = busybox
    return specs


def build(
    cache_dir: Path | None = None,
    *,
    force: bool = False,
    mirror: str | None = None,
    progress: Progress | None = None,
) -> Build:
    """Return the cached build for this source and host, building it first if needed."""
    root = cache_root(cache_dir)
    root.mkdir(parents=True, exist_ok=True)
    own_progress = progress is None
    if progress is None:
        progress = Progress(root / "logs" / f"build-{time.strftime('%Y%m%dT%H%M%S')}.log")
    try:
        host = host_versions()
        with progress.stage("fetch the source package"):
            source = fetch(root / "source", progress, mirror)
        target = root / f"{KUBERNETES_VERSION}-{cache_key(source, host)}"
        if (target / "build.json").is_file() and not force:
            progress.say(f"cached: {target}")
        else:
            _build_into(target, source, host, progress)
        _point_current(root, target)
        return Build(target)
    finally:
        if own_progress:
            progress.close()


def _build_into(
    target: Path, source: SourcePackage, host: dict[str, str], progress: Progress
) -> None:
    staging = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    try:
        tree, out = staging / "tree", staging / "out"
        (out / "bin").mkdir(parents=True)
        (out / "images").mkdir()
        with progress.stage("unpack the source, replace vendored reflect2"):
            _unpack(source, tree, progress)
        with progress.stage(f"build {len(BINARIES)} binaries (make; ~10 min cold on 2 cores)"):
            _make(tree, progress)
            for name in BINARIES:
                shutil.copy2(tree / "_output/bin" / name, out / "bin" / name)
            binary_sums = _write_sums(out / "bin", list(BINARIES))
        with progress.stage("container images"):
            pause = _pause(tree, staging, progress)
            specs = image_specs(out / "bin", pause)
            archives = {
                name: images.write_archive(spec, out / "images").name
                for name, spec in specs.items()
            }
            image_sums = _write_sums(out / "images", list(archives.values()))
        info = {
            "kubernetesVersion": KUBERNETES_VERSION,
            "source": {
                "package": "kubernetes",
                "version": DEBIAN_VERSION,
                "dscSha256": source.sha256,
                "origSha256": sha256_file(source.orig),
            },
            "recipe": RECIPE,
            "host": host,
            "binaries": binary_sums,
            "images": {
                name: {"ref": specs[name].ref, "archive": archive, "sha256": image_sums[archive]}
                for name, archive in archives.items()
            },
            "timings": progress.timings,
        }
        atomic_write(out / "build.json", (json.dumps(info, indent=2) + "\n").encode(), 0o644)
        shutil.rmtree(target, ignore_errors=True)
        out.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _point_current(root: Path, target: Path) -> None:
    tmp = root / ".current.tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target.name)
    os.replace(tmp, root / "current")


def verify(build_: Build) -> None:
    """Check every binary and archive of a cached build against its SHA256SUMS."""
    for directory in (build_.bin_dir, build_.images_dir):
        for name, digest in read_sums(directory / "SHA256SUMS").items():
            actual = sha256_file(directory / name)
            if actual != digest:
                raise TerminalError(
                    f"sha256 mismatch: SHA256SUMS says {digest}, file has {actual}",
                    obj=str(directory / name),
                    reason="ChecksumMismatch",
                )
