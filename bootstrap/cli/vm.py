"""``nodesmith vm up|down|list``: boot a node image with a Machine's rendered userdata.

``vm up IMAGE -f BUNDLE --machine NS/NAME`` renders the Machine exactly as ``nodesmith render``
would (with the image's ``manifest.json`` beside IMAGE, when there is one, so a Machine the
image cannot serve is refused before booting), then boots it with :func:`bootstrap.vm.up`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bootstrap import seed
from bootstrap.errors import UsageError, bad_usage
from bootstrap.fsutil import atomic_write
from bootstrap.vm import qemu as vm
from bootstrap.vm.accel import ACCELS, choose


def add_boot_arguments(p: argparse.ArgumentParser, image_required: bool = True) -> None:
    """The options ``vm up`` and ``verify`` share."""
    p.add_argument(
        "image",
        metavar="IMAGE",
        nargs=None if image_required else "?",
        help="qcow2 (or raw) node image; it is never written to",
    )
    p.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        default=[],
        metavar="FILE",
        help="YAML file, directory or - (repeatable)",
    )
    p.add_argument("--machine", metavar="NS/NAME", help="the Machine to boot")
    p.add_argument("--name", help="VM name (default: the Machine's name)")
    p.add_argument(
        "--accel",
        choices=ACCELS,
        default="auto",
        help="auto uses KVM only where it can boot a stock kernel (default: auto)",
    )
    p.add_argument("--memory", type=int, default=vm.DEFAULT_MEMORY_MB, metavar="MIB")
    p.add_argument("--cpus", type=int, default=vm.DEFAULT_CPUS)
    p.add_argument(
        "--firmware", choices=["bios", "uefi"], default="bios", help="SeaBIOS (default) or OVMF"
    )
    p.add_argument("--ssh-timeout", type=float, default=vm.DEFAULT_SSH_TIMEOUT, metavar="S")
    p.add_argument(
        "--image-manifest",
        metavar="FILE",
        help="image manifest (default: manifest.json beside IMAGE, if present)",
    )
    p.add_argument(
        "--no-image-manifest",
        action="store_true",
        help="do not check the Machine against the image's manifest (images built "
        "without kubelet: the suite then skips the kubelet checks)",
    )
    p.add_argument(
        "--unsafe-skip-ca-verification",
        action="store_true",
        help="render without pinning the cluster CA (as nodesmith render)",
    )


def render_for(args: argparse.Namespace) -> tuple[str, str, bytes, dict[str, Any]]:
    """Render the Machine: returns (namespace/name, vm name, userdata, machine object)."""
    from bootstrap.manifest import load_manifest
    from bootstrap.render import RenderOptions, render_one
    from bootstrap.render.loader import load_paths

    if not args.files or not args.machine:
        raise UsageError("-f BUNDLE and --machine NS/NAME are required")
    objects = load_paths(args.files)
    manifest_path = args.image_manifest
    if args.no_image_manifest:
        manifest_path = None
    elif manifest_path is None and args.image:
        beside = Path(args.image).parent / "manifest.json"
        manifest_path = str(beside) if beside.is_file() else None
    manifest = load_manifest(manifest_path) if manifest_path else None
    if manifest is not None:
        manifest.require_datasource(seed.DATASOURCE, str(manifest_path))
    options = RenderOptions(
        unsafe_skip_ca_verification=args.unsafe_skip_ca_verification,
        image_manifest=manifest,
    )
    result = render_one(objects, args.machine, options)
    for warning in result.warnings:
        print(f"nodesmith: warning: {warning}", file=sys.stderr)
    namespace, _, name = result.machine.rpartition("/")
    machine_obj = next(
        (
            o
            for o in objects
            if o.get("kind") == "Machine"
            and (o.get("metadata") or {}).get("name") == name
            and (o.get("metadata") or {}).get("namespace", "default") == (namespace or "default")
        ),
        {},
    )
    return result.machine, args.name or name, result.userdata, machine_obj


def boot(args: argparse.Namespace) -> tuple[vm.VMState, dict[str, Any]]:
    """Render and boot; used by ``vm up`` and ``verify``."""
    if not args.image:
        raise UsageError("IMAGE is required")
    if args.memory < 256 or args.cpus < 1:
        raise UsageError(
            f"--memory must be >= 256 and --cpus >= 1 (got {args.memory}, {args.cpus})"
        )
    if args.name:
        vm.check_name(args.name)  # before rendering: a wrong name is wrong whatever renders
    machine, name, userdata, machine_obj = render_for(args)
    state = vm.up(
        Path(args.image),
        userdata,
        name=name,
        machine=machine,
        accel=choose(args.accel),
        memory=args.memory,
        cpus=args.cpus,
        firmware=args.firmware,
        ssh_timeout=args.ssh_timeout,
    )
    return state, machine_obj


def _up(args: argparse.Namespace) -> int:
    state, _ = boot(args)
    print(state.ssh_address)
    print(f"  ssh:       {state.ssh_command()}")
    print(f"  testinfra: --hosts='{state.testinfra_host}' --known-hosts {state.known_hosts}")
    print(f"  serial:    {state.serial_log}")
    print(f"  stop:      nodesmith vm down {state.name}")
    return 0


def _down(args: argparse.Namespace) -> int:
    state = vm.down(args.name, keep_logs=Path(args.keep_log) if args.keep_log else None)
    print(f"vm {state.name}: stopped, overlay and state removed")
    return 0


def _list(args: argparse.Namespace) -> int:
    rows = [
        {"name": s.name, "machine": s.machine, "running": alive, "ssh": s.ssh_address, "pid": s.pid}
        for s, alive in vm.list_vms()
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(f"{r['name']:<24} {'running' if r['running'] else 'stopped':<8} {r['ssh']}")
    return 0


def _cluster(args: argparse.Namespace) -> int:
    from bootstrap.manifest import load_manifest
    from bootstrap.render import RenderOptions
    from bootstrap.render.loader import load_paths
    from bootstrap.vm import cluster

    image = Path(args.image)
    beside = image.parent / "manifest.json"
    manifest = load_manifest(beside) if beside.is_file() else None
    if manifest is not None:
        manifest.require_datasource(seed.DATASOURCE, str(beside))
    management: dict[str, Any] | None = None
    if args.controller_image is not None and not args.via_controller:
        raise bad_usage("--controller-image", str(args.controller_image), "needs --via-controller")
    if args.via_controller:
        import tempfile

        from bootstrap.vm import managed

        workdir = Path(tempfile.mkdtemp(prefix="nodesmith-management-", dir="/var/tmp"))
        print(f"management cluster and controller logs: {workdir}", file=sys.stderr)
        run, management = managed.up(
            image,
            load_paths(args.files),
            accel=choose(args.accel),
            workdir=workdir,
            memory=args.memory,
            timeout=args.timeout,
            controller_image=args.controller_image,
        )
    else:
        run = cluster.up(
            image,
            load_paths(args.files),
            accel=choose(args.accel),
            options=RenderOptions(image_manifest=manifest),
            memory=args.memory,
            timeout=args.timeout,
        )
    result: dict[str, Any] = {"ok": False}
    try:
        result = cluster.report(run)
        if management is not None:
            result["management"] = management
            for machine, cond in management["bootstrapSucceeded"].items():
                print(f"{machine}: BootstrapSucceeded {cond['status']} ({cond['reason']})")
        print(run.kubectl("get", "nodes", "-o", "wide"), end="")
        for node in result["nodes"]:
            steps = ", ".join(f"{k} {v:.0f}s" for k, v in node["timeline"].items())
            print(f"{node['name']}: {node['role']}, kubelet {node['kubelet']}: {steps}")
        if args.json:
            atomic_write(args.json, (json.dumps(result, indent=2) + "\n").encode(), 0o644)
    finally:
        if args.keep:
            for node in run.nodes:
                print(f"kept {node.name}: {node.vm.ssh_command()}", file=sys.stderr)
        else:
            run.down()
    return 0 if result["ok"] else 1


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("vm", help="boot a node image under qemu with rendered userdata")
    sub = p.add_subparsers(dest="vm_command", metavar="up|down|list|cluster", parser_class=type(p))
    up = sub.add_parser("up", help="boot IMAGE for a Machine and wait for SSH")
    add_boot_arguments(up)
    up.set_defaults(func=_up)
    down = sub.add_parser("down", help="stop a VM and remove its overlay")
    down.add_argument("name")
    down.add_argument("--keep-log", metavar="FILE", help="copy the serial console log here")
    down.set_defaults(func=_down)
    ls = sub.add_parser("list", help="VMs with recorded state")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=_list)
    cl = sub.add_parser(
        "cluster", help="boot every Machine of a bundle on one private segment until Ready"
    )
    cl.add_argument("image", metavar="IMAGE", help="node image with kubelet/kubeadm inside")
    cl.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        required=True,
        metavar="FILE",
        help="the cluster's bundle (repeatable)",
    )
    cl.add_argument("--accel", choices=ACCELS, default="auto")
    cl.add_argument("--memory", type=int, default=vm.DEFAULT_MEMORY_MB, metavar="MIB")
    cl.add_argument("--timeout", type=float, default=1800, metavar="S")
    cl.add_argument("--json", metavar="FILE", help="write the report (nodes, timelines) here")
    cl.add_argument(
        "--via-controller",
        action="store_true",
        help="boot each VM from the data Secret nodesmith's controller writes on a local "
        "management API server (CABPK's role), the nodes reporting back to it",
    )
    cl.add_argument(
        "--controller-image",
        type=Path,
        metavar="DIR",
        help="with --via-controller: once the control plane is up, make the cluster its own "
        "management cluster (clusterctl move) with the controller as a Pod from this "
        "'nodesmith controller image' output, imported into the node's containerd",
    )
    cl.add_argument("--keep", action="store_true", help="leave the VMs running")
    cl.set_defaults(func=_cluster)
