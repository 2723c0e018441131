"""``nodesmith serve``: parse the command line and hand it to the supervisor."""

from __future__ import annotations

import argparse
from typing import Any

from bootstrap.cli.common import add_policy_arguments, policy_options
from bootstrap.errors import UsageError, bad_usage
from bootstrap.log import log_event as _log
from bootstrap.serve.app import DEFAULT_MAX_BODY
from bootstrap.serve.auth import TokenStore
from bootstrap.serve.server import (
    ServeConfig,
    bind,
    check_tls,
    parse_listen,
    run_worker,
    supervise,
    warn_if_readable,
)


def config_from_args(args: argparse.Namespace) -> ServeConfig:
    from bootstrap.serve.app import ServeSettings
    from bootstrap.serve.protocol import Limits

    host, port = parse_listen(args.listen)
    if args.workers < 1 or args.workers > 64:
        raise bad_usage("--workers", args.workers, "must be 1..64", reason="InvalidWorkers")
    if args.max_body_bytes < 1:
        raise UsageError("--max-body-bytes must be positive", reason="InvalidLimit")
    for flag, value in (
        ("--header-timeout", args.header_timeout),
        ("--body-timeout", args.body_timeout),
    ):
        if not 0 < value <= 3600:
            raise bad_usage(flag, value, "must be 0 < SECONDS <= 3600", reason="InvalidLimit")
    if not 1 <= args.max_connections <= 100_000:
        raise bad_usage(
            "--max-connections", args.max_connections, "must be 1..100000", reason="InvalidLimit"
        )
    check_tls(args.tls_cert, args.tls_key)
    return ServeConfig(
        host=host,
        port=port,
        token_file=args.token_file,
        workers=args.workers,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        settings=ServeSettings(
            max_body=args.max_body_bytes, cpu_budget=args.cpu_budget, options=policy_options(args)
        ),
        limits=Limits(
            head_timeout=args.header_timeout,
            body_timeout=args.body_timeout,
            max_connections=args.max_connections,
        ),
    )


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    tokens = TokenStore(config.token_file)
    count = tokens.load()  # fail before binding when the token file is unusable
    warn_if_readable(tokens)
    sockets = bind(config.host, config.port, config.workers)
    host, port = sockets[0].getsockname()[:2]
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    scheme = "https" if config.tls_cert else "http"
    from bootstrap.serve.metrics import SharedMetrics

    metrics = SharedMetrics(config.workers)
    _log(
        "listening", address=shown, url=f"{scheme}://{shown}", workers=config.workers, tokens=count
    )
    if config.workers == 1:
        return run_worker(0, sockets[0], config, metrics, tokens)
    return supervise(sockets, config, metrics, tokens)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve bootstrap userdata over HTTP to machine controllers",
        description="``nodesmith serve``: the userdata HTTP service that machine controllers call.",
    )
    parser.add_argument("--listen", default="127.0.0.1:8080", metavar="HOST:PORT")
    parser.add_argument(
        "--token-file",
        required=True,
        metavar="FILE",
        help="bearer tokens, one per line; re-read on SIGHUP",
    )
    parser.add_argument("--tls-cert", metavar="FILE")
    parser.add_argument("--tls-key", metavar="FILE")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="worker processes (default 1; use the core count for throughput)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY,
        metavar="N",
        help=f"largest request body accepted (default {DEFAULT_MAX_BODY})",
    )
    parser.add_argument(
        "--cpu-budget",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="CPU time one request may spend parsing and rendering before it is refused "
        "with 422 (default 2; 0 disables)",
    )
    parser.add_argument(
        "--header-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="a request's head must arrive within this, else 408 (default 10)",
    )
    parser.add_argument(
        "--body-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="a request's body must arrive within this after its head, else 408 (default 30)",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=1000,
        metavar="N",
        help="open connections per worker; beyond, the longest-waiting unfinished request is "
        "dropped (default 1000)",
    )
    # The same render policy as `nodesmith render`, for every request this server answers.
    add_policy_arguments(parser)
    parser.set_defaults(func=run)
