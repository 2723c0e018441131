"""``nodesmith controller run|manifests|image``: the Cluster API bootstrap provider."""

from __future__ import annotations

import argparse
import logging
import re
import signal
import sys
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import Any

from bootstrap import __version__
from bootstrap.errors import bad_usage

_DURATION = re.compile(r"^(\d{1,6})(s|m|h)$")
_URL = re.compile(r"^https?://[^/\s]+(/\S*)?$")


def parse_duration(flag: str, text: str) -> timedelta:
    match = _DURATION.match(text)
    if not match or int(match.group(1)) == 0:
        raise bad_usage(flag, text, "must be a positive duration such as 30s, 15m or 1h")
    unit = {"s": 1, "m": 60, "h": 3600}[match.group(2)]
    return timedelta(seconds=int(match.group(1)) * unit)


def check_url(flag: str, text: str) -> None:
    if not _URL.match(text):
        raise bad_usage(flag, text, "must be an http(s):// URL")


def parse_bind(flag: str, text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if text == "0":
        return "", 0
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise bad_usage(flag, text, "must be HOST:PORT, or 0 for none")
    return host, int(port)


def read_ca(flag: str, path: Path | None) -> str | None:
    """A CA certificate file (PEM) nodes will trust for the report endpoint, checked now."""
    from bootstrap.render import pki

    if path is None:
        return None
    try:
        return pki.check_ca_cert(path.read_bytes()).decode()
    except OSError as exc:
        raise bad_usage(flag, str(path), f"cannot be read ({exc.strerror})") from None
    except ValueError as exc:
        raise bad_usage(flag, str(path), str(exc)) from None


def _run(args: argparse.Namespace) -> int:
    from bootstrap.controller.manager import Controller, Options
    from bootstrap.render.names import is_label

    if args.kubeconfig is not None and not args.kubeconfig.is_file():
        raise bad_usage("--kubeconfig", str(args.kubeconfig), "is not a file")
    if not 1 <= args.workers <= 64:
        raise bad_usage("--workers", args.workers, "must be 1..64")
    if args.namespace and not is_label(args.namespace):
        raise bad_usage("--namespace", args.namespace, "is not a namespace name")
    host, port = parse_bind("--metrics-bind", args.metrics_bind)
    report_host, report_port = parse_bind("--report-bind", args.report_bind)
    if args.report_url is not None:
        check_url("--report-url", args.report_url)
    if bool(args.report_tls_cert) != bool(args.report_tls_key):
        raise bad_usage(
            "--report-tls-cert", args.report_tls_cert or "", "needs --report-tls-key too"
        )
    tls = (args.report_tls_cert, args.report_tls_key) if args.report_tls_cert else None
    report_ca = read_ca("--report-ca", args.report_ca)
    if report_ca is not None and args.report_url is None:
        raise bad_usage("--report-ca", str(args.report_ca), "means nothing without --report-url")
    webhook = _webhook_options(args)
    options = Options(
        **webhook,
        kubeconfig=args.kubeconfig,
        namespace=args.namespace or None,
        workers=args.workers,
        metrics_host=host,
        metrics_port=port,
        leader_elect=args.leader_elect,
        lease_name=args.leader_election_id,
        lease_duration=parse_duration("--lease-duration", args.lease_duration).total_seconds(),
        lease_renew=parse_duration("--lease-renew", args.lease_renew).total_seconds(),
        identity=args.identity or "",
        token_ttl=parse_duration("--bootstrap-token-ttl", args.bootstrap_token_ttl),
        report_host=report_host,
        report_port=report_port,
        report_url=args.report_url,
        report_ttl=parse_duration("--report-credential-ttl", args.report_credential_ttl),
        report_tls=tls,
        report_ca=report_ca,
    )
    from bootstrap.log import JsonFormatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(event="controller"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    for noisy in ("httpx", "httpx2", "httpcore"):  # one line per request: not ours to log
        logging.getLogger(noisy).setLevel(logging.WARNING)
    controller = Controller(options)

    def stop(signum: int, frame: FrameType | None) -> None:
        controller.stop.set()  # graceful: the reconcile in hand finishes, the Lease is given up

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return controller.run()


def _webhook_options(args: argparse.Namespace) -> dict[str, Any]:
    """The conversion webhook's settings, checked: its Secret lives in the Lease's namespace
    (the Pod's own, as the manifests pass it)."""
    from bootstrap.controller.manifests import WEBHOOK_SERVICE
    from bootstrap.render.names import is_subdomain

    host, port = parse_bind("--webhook-bind", args.webhook_bind)
    if not is_subdomain(args.webhook_secret):
        raise bad_usage("--webhook-secret", args.webhook_secret, "is not a Secret name")
    names = list(args.webhook_name or [])
    if args.webhook_self_signed and port == 0:
        raise bad_usage("--webhook-self-signed", "", "means nothing without --webhook-bind")
    if not names:  # the Service the manifests put in front of the webhook
        ns = args.leader_election_namespace
        names = [f"{WEBHOOK_SERVICE}.{ns}.svc", f"{WEBHOOK_SERVICE}.{ns}.svc.cluster.local"]
    return {
        "webhook_host": host,
        "webhook_port": port,
        "webhook_secret": args.webhook_secret,
        "webhook_self_signed": args.webhook_self_signed,
        "webhook_names": tuple(names),
        "webhook_reload": parse_duration("--webhook-reload", args.webhook_reload).total_seconds(),
        "lease_namespace": args.leader_election_namespace,
    }


def _webhook(args: argparse.Namespace) -> int:
    """Serve only the conversion webhook (no reconciling, no Lease) until SIGTERM."""
    import threading

    from bootstrap.controller import kube
    from bootstrap.controller.manager import Options, serve_webhook

    if args.kubeconfig is not None and not args.kubeconfig.is_file():
        raise bad_usage("--kubeconfig", str(args.kubeconfig), "is not a file")
    webhook = _webhook_options(args)
    if not webhook["webhook_port"]:
        raise bad_usage("--webhook-bind", args.webhook_bind, "must be HOST:PORT here")
    if args.kubeconfig is not None:
        client = kube.connect(args.kubeconfig)
    else:
        from lightkube import Client

        client = Client(field_manager="nodesmith")
    server = serve_webhook(kube.Api(client), Options(**webhook))
    print(f"conversion webhook on port {server.server_address[1]}", file=sys.stderr, flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stopped.set())
    stopped.wait()
    server.shutdown()
    return 0


def _add_webhook_flags(parser: argparse.ArgumentParser, bind: str) -> None:
    parser.add_argument(
        "--webhook-bind", default=bind, help="HOST:PORT of the CRD conversion webhook, or 0"
    )
    parser.add_argument(
        "--webhook-secret",
        default="nodesmith-webhook-service-cert",
        help="the kubernetes.io/tls Secret (tls.crt, tls.key, ca.crt) in the Lease's namespace "
        "that the webhook serves with (cert-manager's Certificate writes it)",
    )
    parser.add_argument(
        "--webhook-self-signed",
        action="store_true",
        help="no cert-manager: make that Secret (a CA and a serving certificate) if it is "
        "missing and write its CA into the CRDs' conversion caBundle",
    )
    parser.add_argument(
        "--webhook-reload",
        default="1m",
        help="how often the Secret is read again for a renewed certificate (served without a "
        "restart)",
    )
    parser.add_argument(
        "--webhook-name",
        action="append",
        metavar="NAME",
        help="a DNS name or IP for the self-signed certificate (repeatable; default: the "
        "webhook Service's names)",
    )


def _manifests(args: argparse.Namespace) -> int:
    from bootstrap.controller.manifests import (
        CERT_MANAGER,
        NAMESPACE,
        ReportEndpoint,
        Webhook,
        manifests,
        render_yaml,
    )
    from bootstrap.render.names import is_subdomain

    if args.replicas < 1:
        raise bad_usage("--replicas", args.replicas, "must be at least 1")
    report = None
    secret = args.report_tls_secret
    if args.report_url is None and secret is not None:
        raise bad_usage("--report-tls-secret", secret, "means nothing without --report-url")
    if secret is not None and not is_subdomain(secret):
        raise bad_usage("--report-tls-secret", secret, "is not a Secret name")
    if args.report_url is not None:
        check_url("--report-url", args.report_url)
        https = args.report_url.startswith("https://")
        if https and secret is None:
            raise bad_usage(
                "--report-url",
                args.report_url,
                "is https but the endpoint would serve plain HTTP: add --report-tls-secret",
            )
        if not https and args.report_service_type != "ClusterIP":
            print(
                "nodesmith: warning: --report-url is plain http on a "
                f"{args.report_service_type} Service: each node's report credential crosses "
                "the network unencrypted; prefer https with --report-tls-secret",
                file=sys.stderr,
            )
        report = ReportEndpoint(
            args.report_url, secret, args.report_service_type, args.report_tls_ca
        )
    if args.clusterctl is not None:
        from bootstrap.controller.clusterctl import write_release

        if args.webhook_self_signed:
            raise bad_usage(
                "--webhook-self-signed",
                "",
                "is not for a clusterctl release: clusterctl installs cert-manager first",
            )
        if args.namespace != NAMESPACE:
            raise bad_usage(
                "--namespace",
                args.namespace,
                "is clusterctl's to choose for a release (clusterctl init --target-namespace)",
            )
        for path in write_release(args.clusterctl, args.image, args.replicas, report):
            print(path)
        return 0
    hook = Webhook(self_signed=True) if args.webhook_self_signed else CERT_MANAGER
    objects = manifests(args.image, args.namespace, args.replicas, report, hook)
    sys.stdout.write(render_yaml(objects))
    return 0


def _image(args: argparse.Namespace) -> int:
    from bootstrap.fsutil import default_cache_dir
    from bootstrap.image.container import build

    if not re.match(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$", args.tag):
        raise bad_usage("--tag", args.tag, "is not an image tag")
    image = build(
        args.output, tag=args.tag, mirror=args.mirror, force=args.force,
        cache_dir=default_cache_dir(),
    )  # fmt: skip
    size_mib = image.size / (1 << 20)
    print(f"{image.archive} sha256:{image.sha256} {size_mib:.1f} MiB (tag {image.tag})")
    return 0


def register(sub: Any) -> None:
    parser = sub.add_parser("controller", help="the Cluster API bootstrap provider controller")
    commands = parser.add_subparsers(dest="controller_command", metavar="COMMAND", required=True)

    run = commands.add_parser("run", help="reconcile KubeadmConfigs on a management cluster")
    run.add_argument("--kubeconfig", type=Path, help="default: the in-cluster ServiceAccount")
    run.add_argument(
        "--namespace",
        default="",
        help="reconcile only the Cluster API objects of this namespace (default, or empty: all)",
    )
    run.add_argument("--workers", type=int, default=4)
    run.add_argument("--metrics-bind", default="127.0.0.1:8080", help="HOST:PORT, or 0")
    run.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=True)
    run.add_argument("--leader-election-namespace", default="default")
    run.add_argument("--leader-election-id", default="nodesmith-controller")
    run.add_argument("--lease-duration", default="15s")
    run.add_argument("--lease-renew", default="5s")
    run.add_argument("--identity", help="this replica's name in the Lease (default host_pid)")
    run.add_argument("--bootstrap-token-ttl", default="15m", help="as CABPK's flag (15m)")
    run.add_argument(
        "--report-bind", default="0", help="HOST:PORT of the node status endpoint, or 0 (none)"
    )
    run.add_argument(
        "--report-url",
        help="the node status endpoint as nodes reach it (https://HOST:PORT); rendered into "
        "the userdata with a per-Machine credential",
    )
    run.add_argument("--report-credential-ttl", default="4h")
    run.add_argument("--report-tls-cert", help="serve the node status endpoint over TLS")
    run.add_argument("--report-tls-key")
    run.add_argument(
        "--report-ca",
        type=Path,
        help="CA certificate (PEM) that signed the endpoint's certificate; rendered into the "
        "userdata as the only CA nodes trust for their reports (default: the node's store)",
    )
    _add_webhook_flags(run, "0")
    run.set_defaults(func=_run)

    hook = commands.add_parser(
        "webhook", help="serve only the CRD conversion webhook (v1beta1 <-> v1beta2)"
    )
    hook.add_argument("--kubeconfig", type=Path, help="default: the in-cluster ServiceAccount")
    hook.add_argument("--leader-election-namespace", default="default",
                      help="the namespace of the webhook's Secret (the controller's)")  # fmt: skip
    _add_webhook_flags(hook, f"0.0.0.0:{9443}")
    hook.set_defaults(func=_webhook)

    show = commands.add_parser("manifests", help="print the provider's install YAML")
    show.add_argument("--image", default="ghcr.io/nodesmith/nodesmith:0.1.0")
    show.add_argument("--namespace", default="nodesmith-system")
    show.add_argument("--replicas", type=int, default=2)
    show.add_argument(
        "--webhook-self-signed",
        action="store_true",
        help="for a cluster without cert-manager: the controller makes the conversion "
        "webhook's certificate and writes its CA into the CRDs (RBAC to patch those two)",
    )
    show.add_argument(
        "--clusterctl",
        type=Path,
        metavar="DIR",
        help="write a clusterctl provider release instead: DIR/metadata.yaml and "
        "DIR/bootstrap-components.yaml (provider bootstrap-nodesmith)",
    )
    show.add_argument(
        "--report-url",
        help="serve the node status endpoint (port 8443, Service nodesmith-reports) and render "
        "this URL, as nodes reach that Service, into the userdata",
    )
    show.add_argument(
        "--report-tls-secret",
        metavar="NAME",
        help="a kubernetes.io/tls Secret in --namespace: tls.crt/tls.key serve the endpoint, "
        "its ca.crt (cert-manager writes one) is the CA nodes trust",
    )
    show.add_argument(
        "--report-tls-ca",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="render the Secret's ca.crt as the only CA nodes trust for reports; "
        "--no-report-tls-ca for a certificate the nodes' system store accepts (no ca.crt)",
    )
    show.add_argument(
        "--report-service-type",
        choices=("ClusterIP", "NodePort", "LoadBalancer"),
        default="LoadBalancer",
        help="how the endpoint's Service is exposed (default LoadBalancer: nodes are outside)",
    )
    show.set_defaults(func=_manifests)

    image = commands.add_parser(
        "image",
        help="build the controller's container image (OCI archive) without Docker: "
        "mmdebstrap + umoci, as the Containerfile says",
    )
    image.add_argument("--output", type=Path, default=Path("build/controller-image"))
    image.add_argument("--tag", default=__version__)
    image.add_argument("--mirror", help="Debian mirror URL (default: the host's apt sources)")
    image.add_argument("--force", action="store_true", help="replace an existing --output")
    image.set_defaults(func=_image)
