"""``nodesmith local-cluster``: write the bundle the Vagrantfile boots; run libvirt in a netns."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from bootstrap import seed
from bootstrap.errors import EXIT_OK, UsageError
from bootstrap.vm.accel import ACCELS
from bootstrap.vm.local_cluster import (
    DEFAULT_BOX,
    DEFAULT_CLUSTER,
    DEFAULT_CPUS,
    DEFAULT_DIR,
    DEFAULT_MEMORY_MB,
    DEFAULT_NETWORK,
    DEFAULT_VERSION,
    Spec,
    check_traversable,
    init,
)


def _positive(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number (got {text!r})") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative (got {value})")
    return value


def _default_workers() -> int:
    raw = os.environ.get("NODESMITH_WORKERS", "1")
    try:
        return _positive(raw)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"NODESMITH_WORKERS: {exc}") from None


def _cmd_init(args: argparse.Namespace) -> int:
    from bootstrap.manifest import load_manifest

    workers = args.workers if args.workers is not None else _default_workers()
    image = load_manifest(args.image_manifest) if args.image_manifest else None
    if image is not None:
        image.require_datasource(seed.DATASOURCE, args.image_manifest)
    version = args.kubernetes_version or (image and image.kubernetes.kubelet) or DEFAULT_VERSION
    spec = Spec(
        workers=workers,
        cluster=args.cluster,
        kubernetes_version=version,
        image=image,
        network=args.network,
        box=args.box,
        memory=args.memory,
        cpus=args.cpus,
        accel=args.accel,
    )
    target = Path(args.dir)
    state = init(target, spec, force=args.force)
    warning = check_traversable(target.absolute())
    if warning:
        print(f"nodesmith: warning: {warning}", flush=True)
    print(
        f"local cluster {state['cluster']} in {target}: control plane {state['api_endpoint']}, "
        f"{state['workers']} worker(s), accel {state['accel']} ({state['accel_reason']})"
    )
    for m in state["machines"]:
        print(f"  {m['name']:<18} {m['role']:<20} {m['ip']}")
    return EXIT_OK


def _cmd_netns(args: argparse.Namespace) -> int:
    from bootstrap.vm import netns

    if args.action == "up":
        sandbox = netns.LibvirtNetns(args.name)
        sandbox.start()
        print(
            f"netns {args.name}: libvirtd running; run vagrant with "
            f"`nodesmith local-cluster netns run {args.name} -- vagrant up`"
        )
        return EXIT_OK
    if args.action == "down":
        netns.LibvirtNetns(args.name).stop()
        return EXIT_OK
    command = [c for c in args.command if c != "--"] if args.command[:1] == ["--"] else args.command
    if not command:
        raise UsageError("netns run needs a command after --")
    return netns.LibvirtNetns(args.name).exec(command)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "local-cluster",
        help="a local Vagrant/libvirt cluster from nodesmith's box",
        description="Generate the bundle and NoCloud seeds the Vagrantfile boots.",
    )
    lc = p.add_subparsers(dest="local_cluster_command", metavar="ACTION", required=True)
    i = lc.add_parser("init", help="write the local cluster bundle, userdata and seeds")
    i.add_argument("--dir", default=DEFAULT_DIR, help=f"output directory (default {DEFAULT_DIR})")
    i.add_argument(
        "--workers",
        type=_positive,
        default=None,
        help="worker VMs (default $NODESMITH_WORKERS or 1)",
    )
    i.add_argument("--cluster", default=DEFAULT_CLUSTER, help="Cluster name")
    i.add_argument(
        "--kubernetes-version",
        help=f"default: the kubelet of --image-manifest, else {DEFAULT_VERSION}",
    )
    i.add_argument(
        "--image-manifest",
        metavar="FILE",
        help="manifest.json of the box: Machines are checked against it, and an image with "
        "preloaded images gets an air-gapped bundle (no pulls, its etcd)",
    )
    i.add_argument(
        "--network", default=DEFAULT_NETWORK, help="isolated cluster network (control plane at .10)"
    )
    i.add_argument("--box", default=DEFAULT_BOX, help="Vagrant box name")
    i.add_argument("--memory", type=_positive, default=DEFAULT_MEMORY_MB, help="MiB per VM")
    i.add_argument("--cpus", type=_positive, default=DEFAULT_CPUS, help="vCPUs per VM")
    i.add_argument(
        "--accel",
        choices=ACCELS,
        default="auto",
        help="kvm, tcg, or auto (KVM only where it boots a stock kernel)",
    )
    i.add_argument("--force", action="store_true", help="replace an existing directory")
    i.set_defaults(func=_cmd_init)

    n = lc.add_parser("netns", help="run libvirtd (and vagrant) inside a network namespace")
    n.add_argument("action", choices=("up", "run", "down"))
    n.add_argument("name", help="network namespace name")
    n.add_argument("command", nargs=argparse.REMAINDER, help="with run: -- COMMAND...")
    n.set_defaults(func=_cmd_netns)
