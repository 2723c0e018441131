"""``--builder packer-qemu``: the same roles, run by Packer's qemu builder over SSH.

A chroot build (no roles but cloud-init's) gives the base disk; a NoCloud seed creates a
``builder`` user with a throw-away ed25519 key; Packer runs ``images/`` as one configuration,
as its users do (``packer build -only=qemu.node .``): ``qemu.pkr.hcl`` boots the disk under
qemu (TCG unless ``--accel kvm``) and runs ``nodesmith image apply-roles --ssh`` through a
shell-local provisioner, with the variables the builds share from ``variables.pkr.hcl``.
packer-py returns ``(rc, out, err)`` only at the end, so progress comes from tailing
``PACKER_LOG_PATH`` in the meantime.
"""

from __future__ import annotations

import os
import shlex
import sys
import threading
from dataclasses import replace
from pathlib import Path

from packerpy import PackerExecutable

from bootstrap import aptsources, seed, sshkeys
from bootstrap.errors import TerminalError, UsageError
from bootstrap.hostutil import free_port
from bootstrap.image import artifacts, diskfs
from bootstrap.image.build import build as chroot_build
from bootstrap.image.build import (
    check_inputs,
    check_installed,
    inputs_hash,
    make_manifest,
    resolve_containerd,
)
from bootstrap.image.containerd import Resolved
from bootstrap.image.definition import Definition, KubernetesSource, Options
from bootstrap.image.staged import Inspected, StagedBuild, inspect, prepare_output
from bootstrap.manifest import load_manifest
from bootstrap.progress import Progress
from bootstrap.resources import data_dir
from bootstrap.seed import build_seed_iso

PACKER = "/usr/bin/packer"


def seed_iso(work: Path, pubkey: str) -> Path:
    """The NoCloud seed of Packer's builder VM: a ``builder`` user with this run's key."""
    user_data = (
        "#cloud-config\nusers:\n  - name: builder\n    sudo: ALL=(ALL) NOPASSWD:ALL\n"
        f"    shell: /bin/bash\n    ssh_authorized_keys:\n      - {pubkey}\n"
    )
    # localhost: the name sysprep leaves in /etc/hosts, so sudo can resolve it to the end.
    meta_data = "instance-id: nodesmith-packer\nlocal-hostname: localhost\n"
    return build_seed_iso(work / "seed.iso", user_data.encode(), meta_data.encode())


def role_args(opts: Options, runtime: Resolved) -> str:
    """apply-roles' options, as one shell-quoted string for the shell-local provisioner."""
    args = [
        "--containerd-source",
        str(opts.containerd),
        "--containerd-config-version",
        str(runtime.config_version),
        "--kubernetes-source",
        str(opts.kubernetes_source),
        "--kubernetes-version",
        opts.kubernetes_version,
        "--oci-runtime",
        opts.oci_runtime,
        "--sandbox-image",
        opts.sandbox_image,
        "--datasources",
        ",".join(opts.datasources),
    ]
    if opts.preload_images:
        args += ["--preload-images", str(opts.preload_images)]
    if not needs_guest_network(opts):
        args.append("--no-apt-update")
    return shlex.join(args)


def _tail(path: Path, stop: threading.Event, progress: Progress) -> None:
    pos = 0
    while not stop.is_set():
        if path.is_file():
            with path.open(encoding="utf-8", errors="replace") as f:
                f.seek(pos)
                for line in f:
                    progress.log(line)
                    # PACKER_LOG lines carry the UI as "<ts>,,ui,say,==> qemu.node: ...".
                    for kind in (",ui,say,", ",ui,message,", ",ui,error,"):
                        if kind in line:
                            text = line.split(kind, 1)[1].replace("%!(PACKER_COMMA)", ",")
                            progress.say("  packer: " + text.split("\\n")[0].strip()[:140])
                pos = f.tell()
        stop.wait(2)


#: The build this builder runs out of the images/ configuration (``-only``).
QEMU_BUILD = "qemu.node"
#: The configuration's files that decide what the qemu build does (the image's inputs hash).
QEMU_FILES = ("variables.pkr.hcl", "qemu.pkr.hcl")


def run_packer(config: Path, variables: dict[str, str], work: Path, progress: Progress) -> None:
    """``packer build -only=qemu.node`` on the configuration directory ``config``."""
    log = work / "packer.log"
    # Packer's cache (lock files, port reservations) goes in the work dir, not the cwd.
    os.environ.update(
        {
            "PACKER_LOG": "1",
            "PACKER_LOG_PATH": str(log),
            "PACKER_CACHE_DIR": str(work / "packer_cache"),
            "CHECKPOINT_DISABLE": "1",
        }
    )
    stop = threading.Event()
    tail = threading.Thread(target=_tail, args=(log, stop, progress), daemon=True)
    tail.start()
    try:
        rc, out, err = PackerExecutable(executable_path=PACKER).build(
            str(config), var=variables, force=True, only=QEMU_BUILD
        )
    finally:
        stop.set()
        tail.join(timeout=5)
        for k in ("PACKER_LOG", "PACKER_LOG_PATH", "PACKER_CACHE_DIR"):
            os.environ.pop(k, None)
    progress.log(out.decode(errors="replace"))
    progress.log(err.decode(errors="replace"))
    if rc != 0:
        lines = [
            ln
            for ln in out.decode(errors="replace").splitlines()
            if ",error," in ln or "ui,error" in ln
        ]
        raise TerminalError(
            f"packer build failed (exit {rc}): {' '.join(lines)[-600:]} (log: {progress.log_path})",
            obj=f"{config}:{QEMU_BUILD}",
            reason="PackerBuildFailed",
        )


def needs_guest_network(opts: Options) -> bool:
    """pkgs.k8s.io, dl.k8s.io (pyinfra downloads on the target) and an explicit --mirror are
    reached from inside the builder VM; ``dir:`` and ``none`` builds work offline (the host's
    .deb cache built the base disk, and files are uploaded over SSH)."""
    return opts.kubernetes_source.kind in ("pkgs", "http") or opts.mirror is not None


def build_with_packer(
    defn: Definition, opts: Options, *, force: bool = False, accel: str = "tcg"
) -> Path:
    """Base disk (chroot), then Packer's qemu builder runs the roles on it over SSH.

    The manifest is read from the disk Packer returns (packages, kernel, OS), not from the
    base disk, so it describes what the roles really left there.
    """
    if "box" in opts.formats:
        raise UsageError("--format box is built by the chroot builder only")
    output = prepare_output(opts.output, force)
    kube_files, kube_versions, archives = check_inputs(opts)
    apt_sources = aptsources.sources_for(defn.suite, defn.components, opts.mirror, os=defn.os)
    runtime = resolve_containerd(defn, opts, apt_sources)
    config = data_dir("images")
    with StagedBuild(f"packer-{defn.name}", output, opts.cache_dir, opts.work_parent) as staged:
        progress = staged.progress
        progress.say(f"building {defn.name} with packer-qemu -> {output} (log: {staged.log_path})")
        with progress.stage("base disk (chroot, cloud-init role only)"):
            base = base_disk(defn, opts, staged.work / "base")
        variables = packer_variables(defn, opts, runtime, base, staged.work, accel)
        with progress.stage("packer build (qemu)"):
            run_packer_with_roles_log(config, variables, staged.work, progress)
        found, inspected = packer_artifacts(opts, staged, archives)
        check_installed(inspected, runtime)
        described = staged.describe(found)
        packer_files = tuple(config / f for f in QEMU_FILES)
        inputs = inputs_hash(defn, opts, apt_sources, kube_files, packer_files, runtime)
        return staged.publish(
            make_manifest(
                defn, opts, inspected, kube_versions, described, inputs, progress.timings, runtime
            )
        )


def base_disk(defn: Definition, opts: Options, output: Path) -> Path:
    """The chroot build with only the cloud-init role: what Packer's VM boots from. It boots
    on Packer's NoCloud seed whatever the image is for (apply-roles then writes the build's
    own datasources, e.g. Ec2)."""
    base_opts = replace(
        opts,
        formats=("qcow2",),
        output=output,
        kubernetes_source=KubernetesSource("none"),
        datasources=(seed.DATASOURCE,),
    )
    return chroot_build(defn, base_opts, roles=("cloud_init",))


def packer_variables(
    defn: Definition, opts: Options, runtime: Resolved, base: Path, work: Path, accel: str
) -> dict[str, str]:
    """The template's variables: base disk (sha256-pinned), seed with a throw-away key,
    accelerator, SSH port, and the ``apply-roles`` command line the provisioner runs."""
    key = work / "builder_key"
    builder_key = sshkeys.generate("nodesmith-packer")
    builder_key.write_private(key)
    base_sha = load_manifest(base / "manifest.json").artifacts["qcow2"].sha256
    roles_log = work / "roles.log"
    return {
        "base_disk": str(base / "image.qcow2"),
        "base_disk_checksum": f"sha256:{base_sha}",
        "seed_iso": str(seed_iso(work, builder_key.public_openssh)),
        "output_directory": str(work / "packer-out"),
        "vm_name": "image.qcow2",
        "accelerator": accel,
        "ssh_private_key_file": str(key),
        "ssh_port": str(free_port()),
        "disk_size": f"{defn.disk_size_mib}M",
        "nodesmith": str(Path(sys.executable).parent / "nodesmith"),
        "role_args": f"{role_args(opts, runtime)} --log {shlex.quote(str(roles_log))}",
        "restrict_guest_network": "off" if needs_guest_network(opts) else "on",
    }


def run_packer_with_roles_log(
    config: Path, variables: dict[str, str], work: Path, progress: Progress
) -> None:
    """``packer build``, then the roles' full pyinfra output into this build's log."""
    roles_log = work / "roles.log"
    try:
        run_packer(config, variables, work, progress)
    finally:
        if roles_log.is_file():
            progress.log(
                f"--- {roles_log.name} (apply-roles over SSH) ---\n"
                + roles_log.read_text(encoding="utf-8", errors="replace")
            )


def packer_artifacts(
    opts: Options, staged: StagedBuild, archives: dict[str, str]
) -> tuple[dict[str, Path], Inspected]:
    """Packer's disk, inspected in place (debugfs) and staged in each asked format."""
    progress, work = staged.progress, staged.work
    built = work / "packer-out" / "image.qcow2"
    with progress.stage("inspect"):
        raw = staged.staging / "image.raw" if "raw" in opts.formats else work / "final.raw"
        progress.run(["qemu-img", "convert", "-O", "raw", built, raw], what="qemu-img")
        inspected = inspect(diskfs.extract(raw, work / "inspect", progress), archives)
    found: dict[str, Path] = {}
    if "qcow2" in opts.formats:
        with progress.stage("qcow2"):
            found["qcow2"] = staged.staging / "image.qcow2"
            artifacts.qcow2(raw, found["qcow2"], progress)
    if "raw" in opts.formats:
        found["raw"] = raw
    return found, inspected
