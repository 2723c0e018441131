"""``--builder packer-qemu``: the same roles, run by Packer's qemu builder over SSH.

A chroot build (no roles but cloud-init's) gives the base disk; a NoCloud seed creates a
``builder`` user with a throw-away ed25519 key; ``images/qemu.pkr.hcl`` boots the disk under
qemu (TCG unless ``--accel kvm``) and runs ``nodesmith image apply-roles --ssh`` through a
shell-local provisioner. packer-py returns ``(rc, out, err)`` only at the end, so progress
comes from tailing ``PACKER_LOG_PATH`` in the meantime.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from packerpy import PackerExecutable

from ..errors import TerminalError, UsageError
from ..manifest import ImageManifest
from ..resources import data_dir
from . import artifacts
from .build import build as chroot_build
from .build import prepare_output, publish
from .definition import Definition, KubernetesSource, Options
from .progress import Progress
from .workspace import remove_tree

PACKER = "/usr/bin/packer"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def seed_iso(work: Path, pubkey: str, progress: Progress) -> Path:
    user_data = ("#cloud-config\nusers:\n  - name: builder\n    sudo: ALL=(ALL) NOPASSWD:ALL\n"
                 f"    shell: /bin/bash\n    ssh_authorized_keys:\n      - {pubkey}\n")
    (work / "user-data").write_text(user_data, encoding="utf-8")
    (work / "meta-data").write_text("instance-id: nodesmith-packer\nlocal-hostname: builder\n",
                                    encoding="utf-8")
    iso = work / "seed.iso"
    progress.run(["cloud-localds", iso, work / "user-data", work / "meta-data"],
                 what="cloud-localds")
    return iso


def role_args(opts: Options) -> str:
    src = opts.kubernetes_source
    return " ".join([
        f"--kubernetes-source {src}", f"--kubernetes-version {opts.kubernetes_version}",
        f"--oci-runtime {opts.oci_runtime}", f"--sandbox-image {opts.sandbox_image}",
        "--no-apt-update" if opts.mirror is None else "",
    ]).strip()


def _tail(path: Path, stop: threading.Event, progress: Progress) -> None:
    pos = 0
    while not stop.is_set():
        if path.is_file():
            with path.open(encoding="utf-8", errors="replace") as f:
                f.seek(pos)
                for line in f:
                    progress.log(line)
                    if "ui: ==>" in line or "ui:     qemu" in line:
                        progress.say("  packer: " + line.split("ui:", 1)[1].strip()[:140])
                pos = f.tell()
        stop.wait(2)


def run_packer(template: Path, variables: dict[str, str], work: Path,
               progress: Progress) -> None:
    log = work / "packer.log"
    os.environ.update({"PACKER_LOG": "1", "PACKER_LOG_PATH": str(log),
                       "CHECKPOINT_DISABLE": "1"})
    stop = threading.Event()
    tail = threading.Thread(target=_tail, args=(log, stop, progress), daemon=True)
    tail.start()
    try:
        rc, out, err = PackerExecutable(executable_path=PACKER).build(
            str(template), var=variables, force=True)
    finally:
        stop.set()
        tail.join(timeout=5)
        for k in ("PACKER_LOG", "PACKER_LOG_PATH"):
            os.environ.pop(k, None)
    progress.log(out.decode(errors="replace"))
    progress.log(err.decode(errors="replace"))
    if rc != 0:
        lines = [ln for ln in out.decode(errors="replace").splitlines() if ",error," in ln
                 or "ui,error" in ln]
        raise TerminalError(f"packer build failed (exit {rc}): {' '.join(lines)[-600:]} "
                            f"(log: {progress.log_path})", obj=str(template),
                            reason="PackerBuildFailed")


def build_with_packer(defn: Definition, opts: Options, *, force: bool = False,
                      accel: str = "tcg") -> Path:
    if "box" in opts.formats:
        raise UsageError("--format box is built by the chroot builder only")
    output = opts.output.resolve()
    prepare_output(output, force)
    work = Path(tempfile.mkdtemp(prefix="nodesmith-packer-", dir=opts.work_parent))
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.partial-", dir=output.parent))
    progress = Progress(opts.cache_dir / "logs" / f"packer-{defn.name}-{os.getpid()}.log")
    t0 = time.monotonic()
    try:
        with progress.stage("base disk (chroot, cloud-init role only)"):
            base_opts = replace(opts, formats=("qcow2",), output=work / "base",
                                kubernetes_source=KubernetesSource("none"))
            base = chroot_build(defn, base_opts, roles=("cloud_init",))
        key = work / "builder_key"
        progress.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "nodesmith-packer",
                      "-f", key], what="ssh-keygen")
        iso = seed_iso(work, (work / "builder_key.pub").read_text().strip(), progress)
        out_dir = work / "packer-out"
        variables = {
            "base_disk": str(base / "image.qcow2"), "seed_iso": str(iso),
            "output_directory": str(out_dir), "vm_name": "image.qcow2",
            "accelerator": accel, "ssh_private_key_file": str(key),
            "ssh_port": str(free_port()), "disk_size": f"{defn.disk_size_mib}M",
            "nodesmith": str(Path(sys.executable).parent / "nodesmith"),
            "role_args": role_args(opts),
        }
        with progress.stage("packer build (qemu)"):
            run_packer(data_dir("images") / "qemu.pkr.hcl", variables, work, progress)
        found = {"qcow2": staging / "image.qcow2"}
        shutil.move(str(out_dir / "image.qcow2"), found["qcow2"])
        if "raw" in opts.formats:
            found["raw"] = staging / "image.raw"
            progress.run(["qemu-img", "convert", "-O", "raw", found["qcow2"], found["raw"]])
        if "qcow2" not in opts.formats:
            found.pop("qcow2").unlink()
        manifest = ImageManifest.model_validate_json((base / "manifest.json").read_text())
        manifest.artifacts = {f: artifacts.describe(p, staging) for f, p in found.items()}
        manifest.timings = {**progress.timings, "total": round(time.monotonic() - t0, 1)}
        # Packages are those of the base disk; the roles over SSH add none when it has them.
        (staging / "manifest.json").write_text(manifest.to_json() + "\n", encoding="utf-8")
        publish(staging, output)
        return output
    finally:
        progress.close()
        subprocess.run(["sync"], check=False)
        remove_tree(work)
        shutil.rmtree(staging, ignore_errors=True)
