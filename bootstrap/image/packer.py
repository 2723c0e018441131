"""``--builder packer-qemu``: the same roles, run by Packer's qemu builder over SSH.

A chroot build (no roles but cloud-init's) gives the base disk; a NoCloud seed creates a
``builder`` user with a throw-away ed25519 key; ``images/qemu.pkr.hcl`` boots the disk under
qemu (TCG unless ``--accel kvm``) and runs ``nodesmith image apply-roles --ssh`` through a
shell-local provisioner. packer-py returns ``(rc, out, err)`` only at the end, so progress
comes from tailing ``PACKER_LOG_PATH`` in the meantime.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from packerpy import PackerExecutable

from bootstrap.errors import TerminalError, UsageError
from bootstrap.hostutil import free_port
from bootstrap.image import artifacts, diskfs, inspect_root, preload, sources
from bootstrap.image.build import build as chroot_build
from bootstrap.image.build import (
    check_inputs,
    inputs_hash,
    make_manifest,
    prepare_output,
    publish,
)
from bootstrap.image.definition import Definition, KubernetesSource, Options
from bootstrap.image.workspace import remove_tree
from bootstrap.manifest import load_manifest
from bootstrap.progress import Progress
from bootstrap.resources import data_dir
from bootstrap.vm import sshkeys
from bootstrap.vm.seed import build_seed_iso

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


def role_args(opts: Options) -> str:
    """apply-roles' options, as one shell-quoted string for the shell-local provisioner."""
    args = [
        "--kubernetes-source",
        str(opts.kubernetes_source),
        "--kubernetes-version",
        opts.kubernetes_version,
        "--oci-runtime",
        opts.oci_runtime,
        "--sandbox-image",
        opts.sandbox_image,
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


def run_packer(template: Path, variables: dict[str, str], work: Path, progress: Progress) -> None:
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
            str(template), var=variables, force=True
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
            obj=str(template),
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
    output = opts.output.resolve()
    prepare_output(output, force)
    kube_files, kube_versions, archives = check_inputs(opts)
    apt_sources = sources.sources_for(defn.suite, defn.components, opts.mirror)
    template = data_dir("images") / "qemu.pkr.hcl"
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    log_path = opts.cache_dir / "logs" / f"packer-{defn.name}-{stamp}-{os.getpid()}.log"
    progress = Progress(log_path)
    progress.say(f"building {defn.name} with packer-qemu -> {output} (log: {log_path})")
    opts.work_parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="nodesmith-packer-", dir=opts.work_parent))
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.partial-", dir=output.parent))
    t0 = time.monotonic()
    try:
        with progress.stage("base disk (chroot, cloud-init role only)"):
            base_opts = replace(
                opts,
                formats=("qcow2",),
                output=work / "base",
                kubernetes_source=KubernetesSource("none"),
            )
            base = chroot_build(defn, base_opts, roles=("cloud_init",))
        key = work / "builder_key"
        builder_key = sshkeys.generate("nodesmith-packer")
        builder_key.write_private(key)
        iso = seed_iso(work, builder_key.public_openssh)
        out_dir = work / "packer-out"
        roles_log = work / "roles.log"
        base_sha = load_manifest(base / "manifest.json").artifacts["qcow2"].sha256
        variables = {
            "base_disk": str(base / "image.qcow2"),
            "base_disk_checksum": f"sha256:{base_sha}",
            "seed_iso": str(iso),
            "output_directory": str(out_dir),
            "vm_name": "image.qcow2",
            "accelerator": accel,
            "ssh_private_key_file": str(key),
            "ssh_port": str(free_port()),
            "disk_size": f"{defn.disk_size_mib}M",
            "nodesmith": str(Path(sys.executable).parent / "nodesmith"),
            "role_args": f"{role_args(opts)} --log {shlex.quote(str(roles_log))}",
            "restrict_guest_network": "off" if needs_guest_network(opts) else "on",
        }
        with progress.stage("packer build (qemu)"):
            try:
                run_packer(template, variables, work, progress)
            finally:
                if roles_log.is_file():  # the roles' full pyinfra output, into this build's log
                    progress.log(
                        f"--- {roles_log.name} (apply-roles over SSH) ---\n"
                        + roles_log.read_text(encoding="utf-8", errors="replace")
                    )
        built = out_dir / "image.qcow2"
        found: dict[str, Path] = {}
        with progress.stage("inspect"):
            raw = staging / "image.raw" if "raw" in opts.formats else work / "final.raw"
            progress.run(["qemu-img", "convert", "-O", "raw", built, raw], what="qemu-img")
            seen = diskfs.extract(raw, work / "inspect", progress)
            pkgs = inspect_root.packages(seen)
            os_info, kernel = inspect_root.os_release(seen), inspect_root.kernel(seen)
            images = preload.read_record(seen, archives) if archives else []
        if "qcow2" in opts.formats:
            found["qcow2"] = staging / "image.qcow2"
            shutil.move(str(built), found["qcow2"])
        if "raw" in opts.formats:
            found["raw"] = raw
        with progress.stage("checksums"):
            described = {fmt: artifacts.describe(p, staging) for fmt, p in found.items()}
        progress.timings["total"] = round(time.monotonic() - t0, 1)
        manifest = make_manifest(
            defn, opts, pkgs, os_info, kernel, kube_versions, described,
            inputs_hash(defn, opts, apt_sources, kube_files, extra=(template,)),
            progress.timings, images,
        )  # fmt: skip
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
