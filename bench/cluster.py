#!/usr/bin/env python3
"""Cluster benchmark: examples/ booted as a real two-node cluster; per-node timeline.

    .venv/bin/python bench/cluster.py --image OUT/image.qcow2 [--accel auto]

The image is a ``nodesmith image build`` with the Kubernetes build's binaries and preloaded
images (see scripts/main). For each node, seconds from its qemu start to: SSH (first pinned
login), kubeadm done (the bootstrap status' finishedAt), cloud-init done (result.json) and
Node Ready (the Ready condition's lastTransitionTime, from the API server); then seconds from
creating a busybox Pod on the worker to Running. Workers boot once the control plane has
initialized (``--parallel``: at once, as scripts/main does). The node clocks are the host's
(qemu -rtc base=utc), with one-second resolution. Target (issue 11): a worker Ready within
90 s of its qemu start under TCG, images preloaded.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from boottimes import breakdown, report  # noqa: E402

from bootstrap.manifest import load_manifest  # noqa: E402
from bootstrap.render import RenderOptions  # noqa: E402
from bootstrap.render.loader import load_paths  # noqa: E402
from bootstrap.vm import cluster  # noqa: E402
from bootstrap.vm.accel import choose  # noqa: E402

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "bench", "namespace": "default"},
    "spec": {
        "nodeName": "demo-md-0",
        "restartPolicy": "Never",
        "containers": [{"name": "c", "image": "localhost/nodesmith/busybox:1.35.0",
                        "imagePullPolicy": "Never", "command": ["sleep", "3600"]}],
    },
}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", required=True)
    parser.add_argument("--accel", default="auto")
    parser.add_argument("--json", help="write the figures here")
    parser.add_argument(
        "--parallel",
        action="store_true",
        help="boot the workers while the control plane inits (as scripts/main does); by "
        "default they boot once it has, so their timelines measure the join alone",
    )
    args = parser.parse_args()
    image = Path(args.image)
    t0 = time.monotonic()
    run = cluster.up(
        image,
        load_paths([str(REPO / "examples")]),
        accel=choose(args.accel),
        options=RenderOptions(image_manifest=load_manifest(image.parent / "manifest.json")),
        workers_wait=not args.parallel,
    )
    try:
        total = time.monotonic() - t0
        start = time.monotonic()
        run.kubectl("apply", "-f", "-", stdin=json.dumps(POD))
        while (
            json.loads(run.kubectl("get", "pod", "bench", "-o", "json"))["status"].get("phase")
            != "Running"
        ):
            time.sleep(1)
        pod_s = time.monotonic() - start
        figures: dict[str, Any] = {n.name: {"role": n.role, **n.timeline} for n in run.nodes}
        for node in run.nodes:
            figures[node.name]["breakdown"] = breakdown(node.vm)
        figures["podRunningSeconds"] = round(pod_s, 1)
        figures["clusterSeconds"] = round(total, 1)
        print(
            f"{'node':<12} {'role':<20} {'ssh':>6} {'kubeadm':>8} {'cloud-init':>10} {'ready':>6}"
        )
        for node in run.nodes:
            t = node.timeline
            print(f"{node.name:<12} {node.role:<20} {t['ssh']:>6.0f} {t['kubeadm']:>8.0f} "
                  f"{t['cloudInit']:>10.0f} {t['ready']:>6.0f}")  # fmt: skip
        print(f"pod on the worker Running after {pod_s:.1f}s; whole cluster {total:.0f}s")
        for node in run.nodes:
            print(report(node.name, figures[node.name]["breakdown"]))
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    finally:
        run.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
