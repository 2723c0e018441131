"""The image pipeline: definition + options -> rootfs -> roles -> disk -> artifacts.

Where the output goes, and what a failure leaves (nothing), is :mod:`bootstrap.image.staged`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from bootstrap import aptsources
from bootstrap.checksums import sha256_file
from bootstrap.errors import TerminalError
from bootstrap.image import artifacts, containerd, disk, kubernetes, preload, rootfs
from bootstrap.image.containerd import Resolved
from bootstrap.image.definition import Definition, Options
from bootstrap.image.roles import ROLE_ORDER, apply_chroot, role_files
from bootstrap.image.staged import Inspected, StagedBuild, inspect, prepare_output
from bootstrap.manifest import (
    Artifact,
    CloudInit,
    ImageManifest,
    KubernetesBinaries,
    OCIRuntime,
    Runtime,
)
from bootstrap.progress import Progress

CRI_SOCKET = "unix:///run/containerd/containerd.sock"


def packages_for(defn: Definition, opts: Options) -> list[str]:
    """What mmdebstrap installs: the definition's packages and the runtime's (containerd
    itself only from the suite: a ``dir:`` containerd is the role's to install)."""
    pkgs = list(defn.packages)
    for p in ("containerd", "runc", *(["crun"] if opts.oci_runtime == "crun" else [])):
        if p not in pkgs:
            pkgs.append(p)
    if opts.containerd.source == "dir":
        pkgs.remove("containerd")
    return pkgs


def resolve_containerd(defn: Definition, opts: Options, apt_sources: str) -> Resolved:
    """The containerd this build installs, checked against its source before anything is:
    the suite's package (its candidate in the build's fresh apt lists) or a ``dir:`` .deb."""
    choice = opts.containerd
    if choice.source == "dir":
        assert choice.path is not None
        deb, version = containerd.dir_package(choice.path)
        return Resolved(version, containerd.check(choice, version, f"dir:{choice.path}"), deb)
    options = rootfs.refresh_lists(defn, apt_sources, opts.cache_dir)
    candidate = containerd.package_candidate(options)
    config_version = containerd.check(choice, candidate, f"suite {defn.suite}")
    return Resolved(candidate or "", config_version)


def inputs_hash(
    defn: Definition,
    opts: Options,
    apt_sources: str,
    kube_files: dict[str, Path],
    extra: tuple[Path, ...] = (),
    runtime: Resolved | None = None,
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
    if runtime is not None:
        deb = sha256_file(runtime.deb) if runtime.deb else ""
        h.update(f"containerd={runtime.version}:{runtime.config_version}:{deb}".encode())
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


def role_data(opts: Options, runtime: Resolved | None = None) -> dict[str, str]:
    """The roles' host data. ``runtime``: the containerd a build resolved. Without it
    (``apply-roles`` on a running host) a ``dir:`` .deb is checked as a build checks it;
    the suite's package, not known until the role installs it, gets the config version
    asked for, else 2 (Debian's containerd is 1.x)."""
    if runtime is None and opts.containerd.source == "dir" and opts.containerd.path:
        deb, version = containerd.dir_package(opts.containerd.path)
        where = f"dir:{opts.containerd.path}"
        runtime = Resolved(version, containerd.check(opts.containerd, version, where), deb)
    src = opts.kubernetes_source
    config_version = runtime.config_version if runtime else opts.containerd.config_version or 2
    data = {
        "kubernetes_source": src.kind,
        "kubernetes_version": opts.kubernetes_version,
        "oci_runtime": opts.oci_runtime,
        "sandbox_image": opts.sandbox_image,
        "containerd_config_version": str(config_version),
        "datasources": ",".join(opts.datasources),
    }
    if runtime is not None and runtime.version:
        data["containerd_version"] = runtime.version
    if runtime is not None and runtime.deb is not None:
        data["containerd_deb"] = str(runtime.deb)
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


def build(
    defn: Definition, opts: Options, *, force: bool = False, roles: tuple[str, ...] = ROLE_ORDER
) -> Path:
    """Run the whole chroot pipeline; returns the output directory.

    rootfs (mmdebstrap) -> roles (pyinfra in the chroot) -> inspect -> disk -> artifacts ->
    manifest, all inside a :class:`StagedBuild`, so ``--output`` is complete or untouched.
    """
    output = prepare_output(opts.output, force)
    kube_files, kube_versions, archives = check_inputs(opts)
    apt_sources = aptsources.sources_for(defn.suite, defn.components, opts.mirror, os=defn.os)
    runtime = resolve_containerd(defn, opts, apt_sources)
    with StagedBuild(f"image-{defn.name}", output, opts.cache_dir, opts.work_parent) as staged:
        progress = staged.progress
        progress.say(f"building {defn.name} -> {output} (log: {staged.log_path})")
        progress.say(
            f"  containerd {runtime.version} from {opts.containerd}, "
            f"config version {runtime.config_version}"
        )
        root = staged.work / "root"
        with progress.stage("rootfs"):
            rootfs.build_rootfs(
                defn, packages_for(defn, opts), root, apt_sources, opts.cache_dir, progress
            )
        with progress.stage("roles"):
            apply_chroot(root, role_data(opts, runtime), progress, roles)
        with progress.stage("inspect"):
            inspected = inspect(root, archives)
            if "containerd" in roles:  # not packer's base disk: its containerd comes later
                check_installed(inspected, runtime)
        found = disk_artifacts(defn, opts, root, staged)
        described = staged.describe(found)
        inputs = inputs_hash(defn, opts, apt_sources, kube_files, runtime=runtime)
        return staged.publish(
            make_manifest(
                defn, opts, inspected, kube_versions, described, inputs, progress.timings, runtime
            )
        )


def check_installed(inspected: Inspected, runtime: Resolved) -> None:
    """The root holds the containerd that was checked (a mirror updated in between, or a
    role that installed another, would make the manifest lie)."""
    got = inspected.packages.get("containerd")
    if got != runtime.version:
        raise TerminalError(
            f"the root has containerd {got}, but the build resolved {runtime.version}",
            obj="image root",
            field="containerd.version",
            reason="ContainerdVersionChanged",
        )


def disk_artifacts(
    defn: Definition, opts: Options, root: Path, staged: StagedBuild
) -> dict[str, Path]:
    """The root as a bootable disk, in each asked format, staged: ``{format: path}``.

    The box variant gets its own disk, because it adds Vagrant's user to the root.
    """
    progress = staged.progress
    with progress.stage("disk"):
        raw = staged.work / "disk.raw"
        disk.make_disk(root, raw, defn.disk_size_mib, progress)
    found: dict[str, Path] = {}
    if "qcow2" in opts.formats:
        with progress.stage("qcow2"):
            found["qcow2"] = staged.staging / "image.qcow2"
            artifacts.qcow2(raw, found["qcow2"], progress)
    if "box" in opts.formats:
        with progress.stage("box"):
            add_vagrant_user(root, progress)
            box_raw = staged.work / "box.raw"
            disk.make_disk(root, box_raw, defn.disk_size_mib, progress)
            box_qcow = staged.work / "box.qcow2"
            artifacts.qcow2(box_raw, box_qcow, progress)
            box_raw.unlink()
            found["box"] = staged.staging / "image.box"
            artifacts.box(box_qcow, found["box"], (defn.disk_size_mib + 1023) // 1024)
    if "raw" in opts.formats:
        found["raw"] = staged.staging / "image.raw"
        raw.rename(found["raw"])
    return found


def make_manifest(
    defn: Definition,
    opts: Options,
    inspected: Inspected,
    kube_versions: dict[str, str],
    described: dict[str, Artifact],
    inputs: str,
    timings: dict[str, float],
    runtime: Resolved | None = None,
) -> ImageManifest:
    """The manifest.json of a finished build (what ``render --image-manifest`` checks)."""
    pkgs = inspected.packages
    src = opts.kubernetes_source.kind
    if src in ("pkgs", "http"):
        kube_versions = {b: opts.kubernetes_version for b in kubernetes.BINARIES}
    return ImageManifest(
        name=defn.name,
        os=inspected.os_info,
        kernel=inspected.kernel,
        runtime=Runtime(
            name=opts.runtime,
            version=pkgs.get("containerd"),
            configVersion=(
                runtime.config_version
                if runtime
                else containerd.config_version_for(pkgs.get("containerd") or "1")
            ),
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
        cloudInit=CloudInit(datasources=list(opts.datasources)),
        packages=pkgs,
        images=inspected.images,
        artifacts=described,
        inputsHash=f"sha256:{inputs}",
        timings=dict(timings),
        builtAt=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
