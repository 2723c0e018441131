"""``render --all``'s failure path: N Machines whose Cluster is missing, each reported.

Every Machine fails on the Cluster lookup, whose error carries a hint naming other
namespaces that hold a Cluster of that name. That hint used to scan every object of the input,
so the path was quadratic (8,000 Machines: 31 s). Printed: seconds per size and the time per
Machine, which stays flat when the path is linear.

    .venv/bin/python bench/render_failures.py            # 2000 4000 8000 16000
    .venv/bin/python bench/render_failures.py 50000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bootstrap.render import RenderOptions  # noqa: E402
from bootstrap.render.batch import render_all  # noqa: E402
from bootstrap.render.resolve import Bundle  # noqa: E402


def objects(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(n):
        name = f"w-{i}"
        out.append({
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "Machine",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"clusterName": "missing", "version": "v1.31.4", "bootstrap": {
                "configRef": {"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
                              "kind": "KubeadmConfig", "name": name}}},
        })  # fmt: skip
        out.append(
            {
                "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
                "kind": "KubeadmConfig",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {},
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[2000, 4000, 8000, 16000])
    args = parser.parse_args(argv)
    print(f"{'machines':>9} {'seconds':>8} {'us/machine':>11}")
    for n in args.sizes:
        bundle = Bundle(objects(n))
        names = [f"{ns}/{name}" for ns, name in bundle.machines]
        started = time.perf_counter()
        batch = render_all(bundle, names, RenderOptions())
        seconds = time.perf_counter() - started
        assert len(batch.failures) == n and not batch.results
        print(f"{n:>9} {seconds:>8.2f} {seconds / n * 1e6:>11.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
