#!/usr/bin/env python3
"""Boot benchmark: qemu start -> SSH -> cloud-init done -> bootstrap done, for one worker.

    .venv/bin/python bench/boot.py --image OUT/image.qcow2 [--runs 3] [--accel auto] [--breakdown]

Boots the image with ``bootstrap.vm.up`` for a worker Machine of ``examples/`` whose kubeadm is
the test stand-in told to succeed (kubeadm cannot exist on this network; the stand-in is
delivered through the bundle's ``files``, as in the VM tests, and is never in the image). Times
are taken on the host from the moment qemu is started: SSH is the first pinned-key login; the
other two come from a shell watcher on the node that reports when /run/cloud-init/result.json
appears and when the phase in /run/cluster-api/bootstrap-status.json becomes final.
``--breakdown`` then prints where each boot went, as the node measured it
(bench/boottimes.py). Target (issue 5): bootstrap done in 60 s or less under TCG on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from boottimes import breakdown, report  # noqa: E402
from standin.bundle import worker_bundle  # noqa: E402

from bootstrap.render import RenderOptions, render_one  # noqa: E402
from bootstrap.render.loader import load_paths  # noqa: E402
from bootstrap.vm import qemu as vm  # noqa: E402
from bootstrap.vm.accel import choose  # noqa: E402

# Cheap shell tests only: a python3 or cloud-init call costs seconds under TCG and would blur
# the figures. result.json is written when cloud-init's last stage has finished.
WATCH = r"""
ci=""; bs=""
while [ -z "$ci" ] || [ -z "$bs" ]; do
  if [ -z "$bs" ]; then
    p=$(grep -oE '"phase": "(Succeeded|Failed)"' /run/cluster-api/bootstrap-status.json \
        2>/dev/null | cut -d'"' -f4)
    [ -n "$p" ] && bs=$p && echo "BOOTSTRAP $p"
  fi
  if [ -z "$ci" ] && [ -f /run/cloud-init/result.json ]; then
    if grep -q '"errors": \[\]' /run/cloud-init/result.json; then ci=done; else ci=error; fi
    echo "CLOUDINIT $ci"
  fi
  sleep 0.2
done
"""


def one_run(image: Path, accel: str, work: Path, index: int, explain: bool) -> dict[str, Any]:
    bundle = worker_bundle(work / f"run{index}", {"bench-0": {"mode": "succeed"}})
    userdata = render_one(
        load_paths([str(bundle)]),
        "default/bench-0",
        RenderOptions(unsafe_skip_ca_verification=True),
    ).userdata
    root = work / "state"
    state = vm.up(
        image,
        userdata,
        name="bench-0",
        machine="default/bench-0",
        accel=choose(accel),
        root=root,
        progress=lambda line: None,
    )
    result: dict[str, Any] = {"accel": state.accel, "ssh": state.ssh_ready_s or 0.0}
    try:
        client = vm.pinned_client(state)
        _, out, _ = client.exec_command(WATCH, timeout=900)
        for line in out:
            t = time.time() - state.started_at
            kind, _, value = line.strip().partition(" ")
            if kind == "CLOUDINIT":
                result["cloud_init"], result["cloud_init_status"] = t, value
            elif kind == "BOOTSTRAP":
                result["bootstrap"], result["bootstrap_phase"] = t, value
        client.close()
        if explain:
            result["breakdown"] = breakdown(state)
    finally:
        vm.down("bench-0", root)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", required=True, type=Path)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--accel", default="auto")
    ap.add_argument(
        "--breakdown", action="store_true", help="print where each boot went (systemd, cloud-init)"
    )
    args = ap.parse_args()
    runs = []
    with tempfile.TemporaryDirectory(prefix="nodesmith-bench-boot-") as tmp:
        for i in range(args.runs):
            r = one_run(args.image, args.accel, Path(tmp), i, args.breakdown)
            runs.append(r)
            print(
                f"run {i + 1}: accel={r['accel']} ssh={r['ssh']:.1f}s "
                f"cloud-init={r.get('cloud_init', float('nan')):.1f}s "
                f"({r.get('cloud_init_status')}) "
                f"bootstrap={r.get('bootstrap', float('nan')):.1f}s "
                f"({r.get('bootstrap_phase')})",
                flush=True,
            )
            if "breakdown" in r:
                print(report(f"run {i + 1}", r["breakdown"]), flush=True)
    for key in ("ssh", "bootstrap", "cloud_init"):
        values = [float(r[key]) for r in runs if key in r]
        if values:
            print(
                f"{key:<11} median {statistics.median(values):6.1f}s  "
                f"min {min(values):6.1f}s  max {max(values):6.1f}s  (n={len(values)})"
            )
    print(json.dumps({"runs": runs}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
