"""``nodesmith render``: bootstrap userdata for one Machine, or for every Machine in the input.

Exit codes: 0 success, 2 usage, 65 terminal input error, 75 transient (retry later). Every
output target is checked first, output is only written once everything rendered, and files are
written atomically with mode 0600 since userdata holds bootstrap tokens and keys; ``--all``
swaps in a whole directory (``bootstrap.cli.targets``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import Any

from bootstrap.cli.common import add_policy_arguments, policy_options
from bootstrap.cli.targets import check_targets, publish, suffix_of
from bootstrap.errors import EXIT_OK, TerminalError, UsageError
from bootstrap.fsutil import atomic_write
from bootstrap.render import RenderResult
from bootstrap.render.batch import render_all
from bootstrap.render.loader import load_paths
from bootstrap.render.outputs import bootstrap_secret, json_envelope
from bootstrap.render.resolve import Bundle
from bootstrap.render.yamlio import dump_stream

OUTPUTS = ("userdata", "json", "secret")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "render",
        help="render bootstrap userdata for a Machine",
        description="Render cloud-init userdata (kubeadm init/join) for a Cluster API Machine.",
    )
    p.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        metavar="FILE",
        help="YAML/JSON file, directory, or - for stdin (repeatable)",
    )
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--machine", metavar="[NAMESPACE/]NAME")
    target.add_argument("--all", action="store_true", help="render every Machine in the input")
    p.add_argument("--out-dir", metavar="DIR", help="with --all: write one file per Machine")
    p.add_argument("-o", "--output", choices=OUTPUTS, default="userdata")
    p.add_argument("--gzip", action="store_true", help="gzip the userdata value")
    add_policy_arguments(p)
    p.add_argument(
        "--token-secret-out",
        metavar="FILE",
        help="write the generated bootstrap-token Secret(s) for the workload cluster",
    )
    p.add_argument(
        "--secrets-out",
        metavar="FILE",
        help="write generated cluster CA Secrets (<cluster>-ca, -etcd, -proxy, -sa)",
    )
    p.set_defaults(func=run)


def _present(result: RenderResult, output: str) -> bytes:
    if output == "userdata":
        return result.value
    if output == "json":
        envelope = json_envelope(result)
        if result.bootstrap_token_secret:
            envelope["bootstrapTokenSecret"] = result.bootstrap_token_secret
        return (json.dumps(envelope, indent=2) + "\n").encode()
    # A generated token lives only in this userdata: its Secret goes out in the same stream,
    # or `kubectl apply` would create a node that can never authenticate.
    objects = [bootstrap_secret(result)]
    if result.bootstrap_token_secret:
        objects.append(result.bootstrap_token_secret)
    return dump_stream(objects)


def run(args: argparse.Namespace) -> int:
    if args.out_dir and not args.all:
        raise UsageError("--out-dir goes with --all")
    if args.all and not args.out_dir:
        raise UsageError("--all needs --out-dir DIR")
    side_flags = {"--token-secret-out": args.token_secret_out, "--secrets-out": args.secrets_out}
    check_targets(args.out_dir, side_flags)  # before anything is rendered or written
    options = policy_options(args, gzip=args.gzip)
    options = replace(options, now=options.clock())  # one clock for every Machine of the run
    bundle = Bundle(load_paths(args.filename))
    if args.all:
        names = [f"{ns}/{name}" for ns, name in bundle.machines]
        if not names:
            raise TerminalError("the input holds no Machine", obj="input", reason="NoMachines")
    else:
        names = [args.machine]

    batch = render_all(bundle, names, options)
    results, failures = batch.results, batch.failures
    if batch.worst is not None:
        for failure in failures[:-1]:
            print(f"nodesmith: error: {failure}", file=sys.stderr)
        if len(failures) > 1:
            print(
                f"nodesmith: {len(failures)} of {len(names)} Machines failed; nothing written",
                file=sys.stderr,
            )
        raise batch.worst

    for result in results:
        for warning in result.warnings:
            print(f"nodesmith: warning: {result.machine}: {warning}", file=sys.stderr)
    side = _side_outputs(args, results)
    if args.all:
        files: dict[str, bytes] = {}
        for result in results:
            namespace, _, name = result.machine.partition("/")
            file_name = f"{namespace}_{name}{suffix_of(args.output, args.gzip, result.format)}"
            if file_name in files:  # names cannot hold "_": only the same Machine twice
                raise TerminalError(
                    f"Machine {result.machine} is in the input twice",
                    obj="input",
                    reason="DuplicateMachine",
                )
            files[file_name] = _present(result, args.output)
        publish(args.out_dir, files, side)
        print(f"nodesmith: rendered {len(results)} Machines into {args.out_dir}", file=sys.stderr)
    else:
        for path, data in side:
            atomic_write(path, data)
        sys.stdout.buffer.write(_present(results[0], args.output))
        sys.stdout.flush()
    return EXIT_OK


def _side_outputs(args: argparse.Namespace, results: list[RenderResult]) -> list[tuple[str, bytes]]:
    """The token and CA Secret files to write (0600), saying which flags have nothing."""
    tokens = [r.bootstrap_token_secret for r in results if r.bootstrap_token_secret]
    secrets = [s for r in results for s in r.generated_secrets]
    side: list[tuple[str, bytes]] = []
    for path, objects, why_none in (
        (
            args.token_secret_out,
            tokens,
            "no bootstrap token was generated (the configs name theirs)",
        ),
        (args.secrets_out, secrets, "no CA was generated (the input has the CA Secrets)"),
    ):
        if path and objects:
            side.append((path, dump_stream(objects)))
        elif path:
            print(f"nodesmith: warning: {why_none}; {path} not written", file=sys.stderr)
    if tokens and not args.token_secret_out and args.output == "userdata":
        print(
            "nodesmith: warning: a bootstrap token was generated; pass --token-secret-out "
            "FILE (or -o secret) to keep its Secret, or the join cannot authenticate",
            file=sys.stderr,
        )
    if secrets and not args.secrets_out:
        print(
            "nodesmith: warning: a cluster CA was generated; pass --secrets-out FILE to keep "
            "it, or later joins cannot pin it",
            file=sys.stderr,
        )
    return side
