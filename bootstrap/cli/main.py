"""The ``nodesmith`` command line: one sub-command per module, exit codes from ``errors``.

Each command module exposes ``register(subparsers)``, which adds its parser and sets
``func`` to a callable taking the parsed arguments and returning an exit code. Only the
module of the command being run is imported (``nodesmith --version`` imports nothing
heavy); the others appear in ``--help`` by name and summary. Errors derived from
``NodesmithError`` are printed as one line on stderr and mapped to their exit code; nothing
else is caught here, so a real bug still shows its traceback. SIGTERM ends a command as
Ctrl-C does, through its cleanup (exit 143).
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from bootstrap import __version__
from bootstrap.errors import EXIT_USAGE, NodesmithError

# name -> (module that registers it, one-line summary for the top-level --help), in order.
COMMANDS: dict[str, tuple[str, str]] = {
    "render": ("bootstrap.cli.render", "render bootstrap userdata for a Machine"),
    "image": ("bootstrap.cli.image", "build golden node images"),
    "serve": ("bootstrap.cli.serve", "serve bootstrap userdata over HTTP to machine controllers"),
    "controller": (
        "bootstrap.cli.controller",
        "run nodesmith as a Cluster API bootstrap provider, or print its install YAML",
    ),
    "vm": ("bootstrap.cli.vm", "boot a node image under qemu with rendered userdata"),
    "verify": (
        "bootstrap.cli.verify",
        "boot a Machine's node (or use --host) and run the readiness suite",
    ),
    "local-cluster": (
        "bootstrap.cli.local_cluster",
        "a local Vagrant/libvirt cluster from nodesmith's box",
    ),
    "kubernetes": (
        "bootstrap.cli.kubernetes",
        "build a real Kubernetes from Debian's source package (cached)",
    ),
}


class Terminated(BaseException):
    """SIGTERM, raised wherever the command is, so that every ``finally`` runs: temporary key
    files are removed, work directories cleaned and children stopped (``Progress.run`` stops
    their process groups). The default action would end the process at once, leaving a
    private key in /tmp and a pyinfra or mmdebstrap running on. ``serve`` sets its own."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise Terminated


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _command_of(argv: Sequence[str]) -> str | None:
    """The sub-command named on the command line (the top level only has dash options)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser, with the full sub-parser of the command in ``argv`` (or of all, if none)."""
    parser = _Parser(prog="nodesmith", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"nodesmith {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    chosen = _command_of(argv)
    for name, (module, summary) in COMMANDS.items():
        if chosen == name:
            importlib.import_module(module).register(sub)
        else:
            sub.add_parser(name, help=summary)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    signal.signal(signal.SIGTERM, _terminate)
    try:
        code: int = args.func(args)
    except NodesmithError as exc:
        print(f"nodesmith: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("nodesmith: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("nodesmith: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    return code


if __name__ == "__main__":
    raise SystemExit(main())
