"""Flags more than one command shares, and how they become engine options."""

from __future__ import annotations

import argparse
from datetime import timedelta

from bootstrap.errors import bad_usage, is_small_number
from bootstrap.manifest import load_manifest
from bootstrap.render.result import RenderOptions


def add_policy_arguments(p: argparse.ArgumentParser) -> None:
    """The render policy flags ``render`` and ``serve`` share (see ``policy_options``)."""
    p.add_argument(
        "--image-manifest", metavar="FILE", help="manifest.json of the image the Machine boots"
    )
    p.add_argument(
        "--allow-runtime-install",
        action="store_true",
        help="install a runtime/kubelet the image lacks instead of refusing",
    )
    p.add_argument(
        "--unsafe-skip-ca-verification",
        action="store_true",
        help="join without pinning the cluster CA when no CA Secret is given",
    )
    p.add_argument(
        "--token-ttl",
        default="15m",
        metavar="DURATION",
        help="lifetime of a generated bootstrap token (default 15m)",
    )


def policy_options(args: argparse.Namespace, gzip: bool = False) -> RenderOptions:
    """RenderOptions from ``add_policy_arguments``' flags (the manifest is read and checked
    here, once, so a bad file fails at start-up rather than on every request)."""
    return RenderOptions(
        unsafe_skip_ca_verification=args.unsafe_skip_ca_verification,
        image_manifest=load_manifest(args.image_manifest) if args.image_manifest else None,
        allow_runtime_install=args.allow_runtime_install,
        gzip=gzip,
        token_ttl=parse_duration(args.token_ttl),
    )


def parse_duration(text: str) -> timedelta:
    units = {"s": 1, "m": 60, "h": 3600}
    number, unit = text[:-1], text[-1:]
    if unit not in units or not is_small_number(number) or int(number) == 0:
        raise bad_usage("--token-ttl", text, "expected a duration like 15m, 900s or 1h")
    return timedelta(seconds=int(number) * units[unit])
