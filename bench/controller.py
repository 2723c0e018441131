"""Benchmark: the controller on 1,000 KubeadmConfigs against a real loopback kube-apiserver.

900 worker configs render at once; 100 more reference a ``contentFrom`` Secret that is created
only after every config exists (they wait, then render on the Secret's event). The management
and workload API servers are the project's own kube-apiserver v1.20.2 over Debian's etcd
(tests/controller_harness.py); the controller is ``nodesmith controller run`` with its defaults
(4 workers), acting as the provider's ServiceAccount.

Prints: time from the first config created until every data Secret exists, reconcile latency
p50/p99 (from the controller's own JSON log), API writes per config (its metrics, management
and workload together, leases excluded), the controller's peak RSS, and the conversion webhook's
latency p50/p99 (every config is created as v1beta1 and stored as v1beta2 through it; then each
is read both ways, and each reviewed by the webhook directly).

    .venv/bin/python bench/controller.py [--configs 1000] [--late 100]
"""

from __future__ import annotations

import argparse
import base64
import json
import ssl
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from controller_harness import Testbed, wait_for

from bootstrap.controller import kube
from bootstrap.kubernetes.build import current


def _rss_kib(pid: int) -> tuple[int, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])


def _writes(metrics: str, cluster: str) -> float:
    """API writes the controller made to ``cluster`` (management | workload), leases aside."""
    total = 0.0
    for line in metrics.splitlines():
        if (
            line.startswith("nodesmith_controller_api_writes_total{")
            and f'cluster="{cluster}"' in line
            and "leases" not in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def _conversion_latency(bed: Testbed, ns: str, names: list[str]) -> dict[str, list[float]]:
    """Each rendered config read as stored (v1beta2, no conversion) and as v1beta1 (the API
    server calls the webhook), one client thread; and the webhook alone, a ConversionReview of
    the stored object POSTed to it over TLS (the CA from the CRD), as the API server sends it."""
    crd = bed.admin.get(kube.CRD, f"kubeadmconfigs.{kube.GROUP}") or {}
    bundle = crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"]
    context = ssl.create_default_context(cadata=base64.b64decode(bundle).decode())
    url = f"https://127.0.0.1:{bed.webhook_port}/convert"
    stored, through, direct = [], [], []
    for name in names:
        stored.append(_timed(lambda n=name: bed.admin.get(kube.KubeadmConfig, n, ns)))
        through.append(_timed(lambda n=name: bed.admin.get(kube.KubeadmConfigV1Beta1, n, ns)))
    for name in names:
        obj = bed.admin.get(kube.KubeadmConfig, name, ns)
        body = json.dumps(
            {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
             "request": {"uid": name, "desiredAPIVersion": f"{kube.GROUP}/v1beta1",
                         "objects": [obj]}}
        ).encode()  # fmt: skip
        request = urllib.request.Request(url, body, {"Content-Type": "application/json"})

        def post(request: urllib.request.Request = request) -> None:
            with urllib.request.urlopen(request, context=context, timeout=10) as response:
                assert json.loads(response.read())["response"]["result"]["status"] == "Success"

        direct.append(_timed(post))
    return {
        "GET as stored (v1beta2, no conversion)": stored,
        "GET as v1beta1 (API server -> conversion webhook)": through,
        "conversion webhook alone (TLS connection + review, rendered configs)": direct,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--configs", type=int, default=1000)
    parser.add_argument("--late", type=int, default=100)
    args = parser.parse_args()
    build = current()
    if build is None:
        print("no Kubernetes build: run scripts/setup", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="nodesmith-bench-") as tmp:
        bed = Testbed(Path(tmp), build.path / "bin")
        bed.start()
        try:
            ns = bed.namespace("bench")
            bed.cluster(ns, "bench", initialized=True)
            controller = bed.controller(name="bench")
            wait_for("the controller to lead", lambda: "leader 1.0" in controller.metrics(), 30)
            names = [f"w{i:04d}" for i in range(args.configs)]
            late = set(names[: args.late])

            def create(name: str) -> None:
                spec = None
                if name in late:
                    spec = {
                        "files": [
                            {
                                "path": "/etc/bench/late.conf",
                                "permissions": "0600",
                                "contentFrom": {"secret": {"name": f"late-{name}", "key": "c"}},
                            }
                        ]
                    }
                bed.node(ns, name, "bench", spec=spec)

            started = time.monotonic()
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(create, names))
            created = time.monotonic() - started
            with ThreadPoolExecutor(8) as pool:
                list(
                    pool.map(
                        lambda n: bed.admin.create(
                            kube.Secret,
                            {
                                "metadata": {"name": f"late-{n}", "namespace": ns},
                                "data": {"c": base64.b64encode(b"late\n").decode()},
                            },
                        ),
                        sorted(late),
                    )
                )
            secrets_at = time.monotonic() - started

            def all_there() -> bool:
                have = {
                    s.metadata.name
                    for s in bed.admin.client.list(kube.Secret, namespace=ns)
                    if s.metadata and s.metadata.name
                }
                return set(names) <= have

            wait_for("every data Secret", all_there, 600, every=0.25)
            done = time.monotonic() - started
            time.sleep(3)  # let the status writes and their events settle
            metrics = controller.metrics()
            management, workload = _writes(metrics, "management"), _writes(metrics, "workload")
            rss, peak = _rss_kib(controller.process.pid)
            lines = [r for r in controller.reconciles() if r["config"].startswith(f"{ns}/")]
            ready = [r["ms"] for r in lines if r["reason"] == "DataSecretAvailable"]
            every = [r["ms"] for r in lines]
            waits = sum(1 for r in lines if r["result"] == "waiting")
            assert controller.stop() == 0
            conversion = _conversion_latency(bed, ns, names)
        finally:
            bed.stop()
    print(f"configs: {args.configs} ({args.configs - args.late} at once, {args.late} late)")
    print(
        f"objects created (Machine + config) in {created:.1f} s; late Secrets at {secrets_at:.1f} s"
    )
    print(f"every data Secret exists after: {done:.1f} s (target <= 60 s)")
    per = len(every) / args.configs
    print(f"reconciles: {len(every)} ({waits} ended waiting), per config {per:.2f}")
    for what, values in (("all", every), ("the rendering ones", ready)):
        p50, p99 = statistics.median(values), _pct(values, 0.99)
        print(f"reconcile latency, {what}: p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    n = args.configs
    print(
        f"API writes per config: management {management / n:.2f} (data Secret, status; a late "
        f"config also its waiting condition), workload {workload / n:.2f} (bootstrap token), "
        f"together {(management + workload) / n:.2f} (target <= 3)"
    )
    print(f"controller RSS: {rss / 1024:.0f} MiB now, peak {peak / 1024:.0f} MiB")
    for what, values in conversion.items():
        p50, p99 = statistics.median(values), _pct(values, 0.99)
        print(f"{what}: p50 {p50:.1f} ms, p99 {p99:.1f} ms ({len(values)} requests)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
