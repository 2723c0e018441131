"""The ``nodesmith`` command line: one sub-command per module, exit codes from ``errors``.

Each command module exposes ``register(subparsers)``, which adds its parser and sets
``func`` to a callable taking the parsed arguments and returning an exit code. Errors derived
from ``NodesmithError`` are printed as one line on stderr and mapped to their exit code;
nothing else is caught here, so a real bug still shows its traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import __version__
from .errors import EXIT_USAGE, NodesmithError

# Dotted names of the modules that add sub-commands, loaded in this order.
COMMANDS = [
    "bootstrap.render_cli",
    "bootstrap.image.cli",
    "bootstrap.serve",
    "bootstrap.vm_cli",
    "bootstrap.verify",
    "bootstrap.local_cluster",
]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = _Parser(prog="nodesmith", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"nodesmith {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        code: int = args.func(args)
    except NodesmithError as exc:
        print(f"nodesmith: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("nodesmith: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":
    raise SystemExit(main())
