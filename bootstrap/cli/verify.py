"""``nodesmith verify``: boot a Machine's node (or use --host) and run the readiness suite."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from bootstrap.cli.vm import add_boot_arguments, boot
from bootstrap.errors import UsageError
from bootstrap.vm import qemu as vm
from bootstrap.vm.verify import (
    EXIT_CHECKS_FAILED,
    expected_bootstrap,
    machine_version,
    print_report,
    run_suite,
    testinfra_spec,
)


def _verify(args: argparse.Namespace) -> int:
    if bool(args.host) == bool(args.image):
        raise UsageError("give either IMAGE (with -f and --machine) or --host, not both")
    work = Path(tempfile.mkdtemp(prefix="nodesmith-verify-"))
    report_json = work / "report.json"
    state: vm.VMState | None = None
    try:
        if args.host:
            spec = testinfra_spec(args.host, args.identity)
            known = Path(args.known_hosts) if args.known_hosts else None
            name, version, userdata = args.machine_name, args.kubelet_version, args.userdata
            extra_host: dict[str, Any] = {"address": args.host}
        else:
            state, machine = boot(args)
            spec, known = state.testinfra_host, state.known_hosts
            name = args.machine_name or state.machine.rpartition("/")[2]
            version = args.kubelet_version or machine_version(machine)
            userdata = str(state.userdata_file)
            extra_host = {
                "address": state.ssh_address,
                "vm": state.name,
                "hostKeyFingerprint": state.host_key_fingerprint,
                "accel": state.accel,
                "sshReadySeconds": state.ssh_ready_s,
            }
        report = run_suite(
            spec,
            report_json=report_json,
            junit=Path(args.junit) if args.junit else None,
            known_hosts=known,
            machine_name=name,
            kubelet_version=version,
            rendered_userdata=Path(userdata) if userdata else None,
            expect_bootstrap=args.expect_bootstrap,
        )
        report["target"] = extra_host
        print_report(report)
        if args.json:
            tmp = Path(args.json + ".tmp")
            tmp.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
            tmp.replace(args.json)
        return 0 if report.get("ok") else EXIT_CHECKS_FAILED
    finally:
        if state is not None and not args.keep:
            vm.down(state.name, keep_logs=Path(args.serial_log) if args.serial_log else None)
        elif state is not None:
            print(f"vm {state.name} kept running: {state.ssh_command()}", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "verify", help="boot a Machine's node (or use --host) and run the readiness suite"
    )
    add_boot_arguments(p, image_required=False)
    p.add_argument(
        "--host",
        metavar="ssh://USER@HOST:PORT",
        help="verify an existing node instead of booting IMAGE",
    )
    p.add_argument("-i", "--identity", metavar="KEY", help="SSH private key for --host")
    p.add_argument("--known-hosts", metavar="FILE", help="pin --host's SSH host key")
    p.add_argument("--machine-name", help="expected hostname (default: the Machine's name)")
    p.add_argument("--kubelet-version", help="expected kubelet version (default: Machine's)")
    p.add_argument(
        "--userdata",
        metavar="FILE",
        help="with --host: the rendered cloud-config whose files to check",
    )
    p.add_argument(
        "--expect-bootstrap",
        default="Succeeded",
        type=expected_bootstrap,
        metavar="Succeeded|Failed[:REASON]",
        help="the bootstrap outcome the node should show, e.g. Failed:KubeadmNotFound on an "
        "image without kubeadm (default Succeeded)",
    )
    p.add_argument("--junit", metavar="FILE", help="write JUnit XML here")
    p.add_argument("--json", metavar="FILE", help="write the JSON report here")
    p.add_argument("--keep", action="store_true", help="leave the VM running afterwards")
    p.add_argument("--serial-log", metavar="FILE", help="keep the VM's serial console log")
    p.set_defaults(func=_verify)
