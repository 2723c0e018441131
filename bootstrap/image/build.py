"""The image pipeline: definition + options -> rootfs -> roles -> disk -> artifacts.

Artifacts appear only on full success: everything is written to a hidden sibling of
``--output`` and renamed into place at the very end; a failure or an interrupt removes the
sibling and the work directory (under /var/tmp), so ``--output`` never holds half a build.
The log lives under the cache directory while the build runs and is copied into the output.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from bootstrap.checksums import sha256_file
from bootstrap.errors import TerminalError
from bootstrap.fsutil import replace_dir
from bootstrap.image import artifacts, disk, inspect_root, kubernetes, preload, rootfs, sources
from bootstrap.image.definition import Definition, Options
from bootstrap.image.roles import ROLE_ORDER, apply_chroot, role_files
from bootstrap.image.workspace import remove_tree
from bootstrap.manifest import (
    Artifact,
    ImageManifest,
    KubernetesBinaries,
    OCIRuntime,
    OSInfo,
    PreloadedImage,
    Runtime,
)
from bootstrap.progress import Progress

CRI_SOCKET = "unix:///run/containerd/containerd.sock"


def packages_for(defn: Definition, opts: Options) -> list[str]:
    pkgs = list(defn.packages)
    for p in ("containerd", "runc", *(["crun"] if opts.oci_runtime == "crun" else [])):
        if p not in pkgs:
            pkgs.append(p)
    return pkgs


def inputs_hash(
    defn: Definition,
    opts: Options,
    apt_sources: str,
    kube_files: dict[str, Path],
    extra: tuple[Path, ...] = (),
) -> str:
    """sha256 over everything that decides the image: definition, roles, options, sources
    (and ``extra`` files, such as the Packer template)."""
    h = hashlib.sha256()
    h.update(defn.text.encode())
    for path in [*role_files(ROLE_ORDER), *extra]:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    opt = {
        k: str(v)
        for k, v in asdict(opts).items()
        if k not in ("output", "cache_dir", "work_parent")
    }
    h.update(json.dumps(opt, sort_keys=True).encode())
    h.update(apt_sources.encode())
    if opts.preload_images:
        h.update((opts.preload_images / "SHA256SUMS").read_bytes())
    for name, p in sorted(kube_files.items()):
        h.update(f"{name}={sha256_file(p)}".encode())
    return h.hexdigest()


def check_kubernetes_dir(opts: Options) -> tuple[dict[str, Path], dict[str, str]]:
    """A ``dir:`` source's binaries and versions, checked before anything slow or installed.

    A wrong sha256 or version is terminal here, naming the file and both values.
    """
    if opts.kubernetes_source.kind != "dir":
        return {}, {}
    assert opts.kubernetes_source.path is not None
    files = kubernetes.verify_dir(opts.kubernetes_source.path)
    return files, kubernetes.check_versions(files, opts.kubernetes_version)


def role_data(opts: Options) -> dict[str, str]:
    src = opts.kubernetes_source
    data = {
        "kubernetes_source": src.kind,
        "kubernetes_version": opts.kubernetes_version,
        "oci_runtime": opts.oci_runtime,
        "sandbox_image": opts.sandbox_image,
    }
    if src.path:
        data["kubernetes_dir"] = str(src.path)
    if opts.preload_images:
        data["preload_dir"] = str(opts.preload_images)
    return data


def check_inputs(opts: Options) -> tuple[dict[str, Path], dict[str, str], dict[str, str]]:
    """Everything ``dir:`` binaries and preloaded images need, checked before any slow stage:
    (kubernetes files, their versions, preload archive -> sha256)."""
    kube_files, kube_versions = check_kubernetes_dir(opts)
    archives = preload.check_dir(opts.preload_images) if opts.preload_images else {}
    return kube_files, kube_versions, archives


def add_vagrant_user(root: Path, progress: Progress) -> None:
    """The box variant only: Vagrant's well-known user and insecure key (public by design)."""
    progress.run(
        ["chroot", str(root), "useradd", "-m", "-s", "/bin/bash", "-G", "sudo", "vagrant"],
        what="useradd vagrant",
    )
    ssh = root / "home/vagrant/.ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    (ssh / "authorized_keys").write_text(artifacts.VAGRANT_INSECURE_KEY + "\n", encoding="utf-8")
    (ssh / "authorized_keys").chmod(0o600)
    progress.run(["chroot", str(root), "chown", "-R", "vagrant:vagrant", "/home/vagrant/.ssh"])
    sudoers = root / "etc/sudoers.d/vagrant"
    sudoers.write_text("vagrant ALL=(ALL) NOPASSWD: ALL\n", encoding="utf-8")
    sudoers.chmod(0o440)


def prepare_output(output: Path, force: bool) -> None:
    if output.exists() and not force:
        raise TerminalError(
            "already exists; pass --force to replace it",
            obj=str(output),
            field="--output",
            reason="OutputExists",
        )
    output.parent.mkdir(parents=True, exist_ok=True)


def publish(staging: Path, output: Path) -> None:
    """Move the finished staging directory to ``output`` (replacing an old one last)."""
    staging.chmod(0o755)  # mkdtemp made it 0700
    replace_dir(staging, output)


def build(
    defn: Definition, opts: Options, *, force: bool = False, roles: tuple[str, ...] = ROLE_ORDER
) -> Path:
    """Run the whole chroot pipeline; returns the output directory."""
    output = opts.output.resolve()
    prepare_output(output, force)
    kube_files, kube_versions, archives = check_inputs(opts)
    apt_sources = sources.sources_for(defn.suite, defn.components, opts.mirror)

    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    log_path = opts.cache_dir / "logs" / f"image-{defn.name}-{stamp}-{os.getpid()}.log"
    progress = Progress(log_path)
    progress.say(f"building {defn.name} -> {output} (log: {log_path})")
    opts.work_parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="nodesmith-image-", dir=opts.work_parent))
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.partial-", dir=output.parent))
    t0 = time.monotonic()
    try:
        root = work / "root"
        with progress.stage("rootfs"):
            rootfs.build_rootfs(
                defn, packages_for(defn, opts), root, apt_sources, opts.cache_dir, progress
            )
        with progress.stage("roles"):
            apply_chroot(root, role_data(opts), progress, roles)
        with progress.stage("inspect"):
            pkgs = inspect_root.packages(root)
            os_info = inspect_root.os_release(root)
            kernel = inspect_root.kernel(root)
            images = preload.read_record(root, archives) if archives else []
        with progress.stage("disk"):
            raw = work / "disk.raw"
            disk.make_disk(root, raw, defn.disk_size_mib, progress)
        found: dict[str, Path] = {}
        if "qcow2" in opts.formats:
            with progress.stage("qcow2"):
                found["qcow2"] = staging / "image.qcow2"
                artifacts.qcow2(raw, found["qcow2"], progress)
        if "box" in opts.formats:
            with progress.stage("box"):
                add_vagrant_user(root, progress)
                box_raw = work / "box.raw"
                disk.make_disk(root, box_raw, defn.disk_size_mib, progress)
                box_qcow = work / "box.qcow2"
                artifacts.qcow2(box_raw, box_qcow, progress)
                box_raw.unlink()
                found["box"] = staging / "image.box"
                artifacts.box(box_qcow, found["box"], (defn.disk_size_mib + 1023) // 1024)
        if "raw" in opts.formats:
            found["raw"] = staging / "image.raw"
            raw.rename(found["raw"])
        with progress.stage("checksums"):
            described = {fmt: artifacts.describe(p, staging) for fmt, p in found.items()}
        progress.timings["total"] = round(time.monotonic() - t0, 1)
        manifest = make_manifest(
            defn,
            opts,
            pkgs,
            os_info,
            kernel,
            kube_versions,
            described,
            inputs_hash(defn, opts, apt_sources, kube_files),
            progress.timings,
            images,
        )
        (staging / "manifest.json").write_text(manifest.to_json() + "\n", encoding="utf-8")
        progress.say(f"total {progress.timings['total']:.1f}s")
        progress.close()
        shutil.copyfile(log_path, staging / "build.log")
        publish(staging, output)
        return output
    finally:
        progress.close()
        remove_tree(work)
        shutil.rmtree(staging, ignore_errors=True)


def make_manifest(
    defn: Definition,
    opts: Options,
    pkgs: dict[str, str],
    os_info: OSInfo,
    kernel: str | None,
    kube_versions: dict[str, str],
    described: dict[str, Artifact],
    inputs: str,
    timings: dict[str, float],
    images: list[PreloadedImage] | None = None,
) -> ImageManifest:
    src = opts.kubernetes_source.kind
    if src in ("pkgs", "http"):
        kube_versions = {b: opts.kubernetes_version for b in kubernetes.BINARIES}
    return ImageManifest(
        name=defn.name,
        os=os_info,
        kernel=kernel,
        runtime=Runtime(
            name=opts.runtime,
            version=pkgs.get("containerd"),
            ociRuntime=OCIRuntime(name=opts.oci_runtime, version=pkgs.get(opts.oci_runtime)),
            sandboxImage=opts.sandbox_image,
            criSocket=CRI_SOCKET,
        ),
        kubernetes=KubernetesBinaries(
            kubelet=kube_versions.get("kubelet"),
            kubeadm=kube_versions.get("kubeadm"),
            kubectl=kube_versions.get("kubectl"),
            source=src,
        ),
        packages=pkgs,
        images=images or [],
        artifacts=described,
        inputsHash=f"sha256:{inputs}",
        timings=dict(timings),
        builtAt=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
