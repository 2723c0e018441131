"""Time `vagrant up` of the local cluster (1 control plane + N workers) from a built box.

    bench/vagrant.py BOX_FILE [--workers 1] [--cpus 1] [--memory 1536]

Runs libvirtd, vagrant and the VMs inside a network namespace of its own (as the test does),
prints the time of `local-cluster init`, `vagrant box add`, `vagrant up` (to SSH-ready on every
node) and `vagrant destroy -f`, then removes everything it made: VMs, volumes, box, namespace.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bootstrap.vm.netns import LibvirtNetns  # noqa: E402

NODESMITH = str(Path(sys.executable).parent / "nodesmith")


def timed(label: str, argv: list[str], env: dict[str, str]) -> float:
    start = time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    took = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(
            f"{label} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        )
    print(f"{label:<28} {took:7.1f} s", flush=True)
    return took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("box", type=Path)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--cpus", type=int, default=1)
    ap.add_argument("--memory", type=int, default=1536)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="nodesmith-bench-vagrant-", dir="/var/tmp"))
    work.chmod(0o755)
    tag = str(os.getpid())
    ns = LibvirtNetns(f"nodesmith-bv-{tag}")
    box = f"nodesmith-bench/debian-12-{tag}"
    env = dict(
        os.environ,
        VAGRANT_HOME=str(work / "vagrant.d"),
        VAGRANT_DOTFILE_PATH=str(work / "dot"),
        VAGRANT_CWD=str(REPO),
        VAGRANT_CHECKPOINT_DISABLE="1",
        NODESMITH=NODESMITH,
        NODESMITH_CLUSTER_DIR=str(work / "cluster"),
        NODESMITH_WORKERS=str(args.workers),
        NODESMITH_BOX=box,
    )
    print(
        f"nodes: 1 control plane + {args.workers} worker(s), {args.cpus} vCPU, "
        f"{args.memory} MiB each; host load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    try:
        timed(
            "local-cluster init",
            [
                NODESMITH,
                "local-cluster",
                "init",
                "--dir",
                str(work / "cluster"),
                "--workers",
                str(args.workers),
                "--cpus",
                str(args.cpus),
                "--memory",
                str(args.memory),
            ],
            env,
        )
        ns.start()
        timed(
            "vagrant box add", ns.argv(["vagrant", "box", "add", "--name", box, str(args.box)]), env
        )
        timed(f"vagrant up ({args.workers + 1} nodes)", ns.argv(["vagrant", "up"]), env)
        timed("vagrant destroy -f", ns.argv(["vagrant", "destroy", "-f"]), env)
    finally:
        subprocess.run(
            ns.argv(["vagrant", "destroy", "-f"]), env=env, capture_output=True, check=False
        )
        if ns.exists():
            for line in ns.virsh("vol-list", "default").stdout.splitlines()[2:]:
                name = line.split()[0] if line.split() else ""
                if "nodesmith-bench-VAGRANTSLASH" in name and tag in name:
                    ns.virsh("vol-delete", "--pool", "default", name)
        ns.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
