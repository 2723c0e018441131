"""``nodesmith image``: ``build`` a golden node image; ``apply-roles`` to a root or over SSH."""

from __future__ import annotations

import argparse
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

from bootstrap.errors import UsageError
from bootstrap.fsutil import default_cache_dir
from bootstrap.image import containerd
from bootstrap.image import definition as d
from bootstrap.image.defaults import DEFAULTS
from bootstrap.progress import Progress

KEY_ENV = "NODESMITH_SSH_PRIVATE_KEY"


def _on_sigterm(signum: int, frame: Any) -> NoReturn:
    # SystemExit unwinds through the build's cleanup (no half-written output).
    raise SystemExit(128 + signum)


def _add_kube_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubernetes-version", help="exact version, e.g. v1.31.4")
    p.add_argument("--kubernetes-source", help="pkgs | http | dir:PATH | none")
    p.add_argument("--oci-runtime", help="runc | crun")
    p.add_argument("--sandbox-image", help="pinned pause image for containerd")
    p.add_argument(
        "--containerd-source",
        help="package (the suite's, default) | dir:PATH (a containerd_*.deb + SHA256SUMS)",
    )
    p.add_argument("--containerd-version", help="the version the source must have, e.g. 1.7")
    p.add_argument(
        "--containerd-config-version", help="2 (containerd 1.x) | 3 (2.x); default: what it reads"
    )
    p.add_argument(
        "--datasources",
        help="comma list of the cloud-init datasources the image boots on, e.g. NoCloud "
        "(default: every target the roles support; None is always added last)",
    )
    p.add_argument(
        "--preload-images",
        metavar="DIR",
        help="image archives + SHA256SUMS to import into containerd's k8s.io namespace",
    )


def register(subparsers: Any) -> None:
    image = subparsers.add_parser("image", help="build golden node images")
    sub = image.add_subparsers(dest="image_command", metavar="ACTION", parser_class=type(image))
    b = sub.add_parser("build", help="build a node image from a definition (images/*.yaml)")
    b.add_argument("definition", help="image definition YAML, e.g. images/debian-12.yaml")
    _add_kube_args(b)
    b.add_argument("--runtime", help="containerd (the only CRI runtime packaged in Debian 12)")
    b.add_argument("--format", dest="formats", help="comma list of qcow2,raw,box")
    b.add_argument("--builder", help="chroot (default) | packer-qemu")
    b.add_argument("--output", "-o", help="output directory (default: output/<name>)")
    b.add_argument("--mirror", help="apt mirror URL instead of the host's Debian sources")
    b.add_argument("--force", action="store_true", help="replace an existing output directory")
    b.add_argument("--accel", help="packer-qemu only: tcg (default here) or kvm")
    b.set_defaults(func=run_build)

    a = sub.add_parser("apply-roles", help="run the node roles on a root dir or over SSH")
    target = a.add_mutually_exclusive_group(required=True)
    target.add_argument("--chroot", help="root directory (pyinfra @chroot)")
    target.add_argument("--ssh", help="host to reach over SSH (pyinfra @ssh)")
    a.add_argument("--ssh-port", type=int, default=22)
    a.add_argument("--ssh-user", default="root")
    a.add_argument("--ssh-key")
    a.add_argument("--ssh-password")
    a.add_argument(
        "--no-apt-update",
        action="store_true",
        help="over SSH: do not run apt-get update (offline builder VMs)",
    )
    a.add_argument("--log", help="full log file (default: ~/.cache/nodesmith/logs/)")
    _add_kube_args(a)
    a.set_defaults(func=run_apply_roles)
    image.set_defaults(func=lambda args: (image.print_help(), 2)[1])


def options_from(args: argparse.Namespace, defn: d.Definition) -> d.Options:
    dflt = defn.defaults
    version = d.check_version(
        args.kubernetes_version or str(dflt.get("kubernetes_version", DEFAULTS.kubernetes_version))
    )
    source = d.parse_kubernetes_source(
        args.kubernetes_source or str(dflt.get("kubernetes_source", DEFAULTS.kubernetes_source))
    )
    formats = d.parse_formats(
        getattr(args, "formats", None) or dflt.get("formats", list(DEFAULTS.formats))
    )
    output = Path(getattr(args, "output", None) or Path("output") / defn.name)
    return d.Options(
        kubernetes_version=version,
        kubernetes_source=source,
        runtime=d.choose(
            getattr(args, "runtime", None),
            d.RUNTIMES,
            "--runtime",
            str(dflt.get("runtime", DEFAULTS.runtime)),
        ),
        oci_runtime=d.choose(
            args.oci_runtime,
            d.OCI_RUNTIMES,
            "--oci-runtime",
            str(dflt.get("oci_runtime", DEFAULTS.oci_runtime)),
        ),
        formats=formats,
        builder=d.choose(getattr(args, "builder", None), d.BUILDERS, "--builder", DEFAULTS.builder),
        output=output,
        mirror=getattr(args, "mirror", None),
        sandbox_image=args.sandbox_image or str(dflt.get("sandbox_image", DEFAULTS.sandbox_image)),
        cache_dir=default_cache_dir(),
        work_parent=Path("/var/tmp"),
        preload_images=Path(args.preload_images).resolve() if args.preload_images else None,
        datasources=(
            d.parse_datasources(args.datasources)
            if args.datasources
            else d.parse_datasources(
                dflt.get("datasources", list(DEFAULTS.datasources)),
                f"{defn.path}: defaults.datasources",
            )
        ),
        containerd=containerd.parse(
            defn.containerd,
            str(defn.path),
            {
                "source": args.containerd_source,
                "version": args.containerd_version,
                "config_version": args.containerd_config_version,
            },
        ),
    )


def run_build(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _on_sigterm)
    defn = d.load_definition(args.definition)
    opts = options_from(args, defn)
    if opts.builder == "packer-qemu":
        from bootstrap.image.packer import build_with_packer

        out = build_with_packer(defn, opts, force=args.force, accel=args.accel or "tcg")
    else:
        from bootstrap.image.build import build

        out = build(defn, opts, force=args.force)
    print(out / "manifest.json")
    return 0


def run_apply_roles(args: argparse.Namespace) -> int:
    from bootstrap.image.build import role_data
    from bootstrap.image.roles import SSHTarget, apply_chroot, apply_ssh

    # Roles need no image definition: defaults only.
    fake = d.Definition(
        path=Path("."),
        name="apply-roles",
        os="",
        suite="",
        variant="",
        arch="amd64",
        disk_size_mib=4096,
        packages=(),
        components=(),
        defaults={},
        text="",
    )
    opts = options_from(args, fake)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    log = Path(args.log or default_cache_dir() / "logs" / f"apply-roles-{stamp}-{os.getpid()}.log")
    progress = Progress(log)
    data = role_data(opts)
    if args.no_apt_update:
        data["apt_update"] = "false"
    try:
        if args.chroot:
            root = Path(args.chroot)
            if not (root / "bin/sh").exists():
                raise UsageError(f"--chroot {root}: not a root filesystem (no bin/sh)")
            with progress.stage(f"roles on {root} (chroot)"):
                apply_chroot(root, data, progress)
        else:
            target = SSHTarget(args.ssh, args.ssh_port, args.ssh_user, None, args.ssh_password)
            with (
                _key_file(args.ssh_key) as key,
                progress.stage(f"roles on {target.user}@{target.host}:{target.port} (ssh)"),
            ):
                apply_ssh(replace(target, key=key), data, progress)
    finally:
        progress.close()
    return 0


@contextmanager
def _key_file(path: str | None) -> Iterator[Path | None]:
    """``--ssh-key``, else the key in $NODESMITH_SSH_PRIVATE_KEY (Packer's cloud templates
    pass it there, never in argv), written to a 0600 temp file for the run only."""
    material = os.environ.get(KEY_ENV)
    if path or not material:
        yield Path(path) if path else None
        return
    fd, name = tempfile.mkstemp(prefix="nodesmith-key-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(material if material.endswith("\n") else material + "\n")
        yield Path(name)
    finally:
        os.unlink(name)
