"""``nodesmith kubernetes build|path``: a real Kubernetes v1.20.2 from Debian's source.

``build`` runs once per machine (about 10 minutes on 2 cores, then cached); ``path`` prints
the cached build's directory (``bin/``, ``images/``, ``build.json``) for scripts, or exits
75 when there is none yet.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from bootstrap.errors import EXIT_OK, TransientError


def _build(args: argparse.Namespace) -> int:
    from bootstrap.kubernetes.build import build, verify

    cache = Path(args.cache_dir) if args.cache_dir else None
    result = build(cache, force=args.force, mirror=args.mirror)
    verify(result)
    print(result.path)
    return EXIT_OK


def _path(args: argparse.Namespace) -> int:
    from bootstrap.kubernetes.build import current

    found = current(Path(args.cache_dir) if args.cache_dir else None)
    if found is None:
        raise TransientError(
            "no Kubernetes build on this machine yet; run `nodesmith kubernetes build`",
            obj="kubernetes cache",
            reason="KubernetesNotBuilt",
        )
    print(found.path)
    sys.stdout.flush()
    return EXIT_OK


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "kubernetes",
        help="build a real Kubernetes from Debian's source package (cached)",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    sub = p.add_subparsers(dest="kubernetes_command", metavar="build|path", required=True)
    b = sub.add_parser("build", help="build (or reuse) the cached Kubernetes binaries and images")
    b.add_argument("--cache-dir", help="cache root (default: ~/.cache/nodesmith)")
    b.add_argument("--force", action="store_true", help="build again even when cached")
    b.add_argument("--mirror", help="Debian mirror URL instead of the host's apt sources")
    b.set_defaults(func=_build)
    q = sub.add_parser("path", help="print the cached build's directory")
    q.add_argument("--cache-dir", help="cache root (default: ~/.cache/nodesmith)")
    q.set_defaults(func=_path)
