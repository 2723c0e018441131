"""Where a node's boot went, as the node itself measured it (shared by the boot and cluster
benchmarks): systemd's kernel/userspace split, the critical chain to cloud-final (the stage
that runs the bootstrap and so kubeadm), the slowest units, and cloud-init's own stage and
module timings."""

from __future__ import annotations

from typing import Any

from bootstrap.vm import cluster, qemu


def _lines(vm: qemu.VMState, command: str) -> list[str]:
    _, out, _ = cluster.ssh(vm, command, timeout=120)
    return [line.strip() for line in out.splitlines() if line.strip()]


def breakdown(vm: qemu.VMState) -> dict[str, Any]:
    """The figures, read over SSH once the node has booted."""
    chain = _lines(vm, "systemd-analyze critical-chain --no-pager cloud-final.service")
    stages = _lines(
        vm,
        "sudo cloud-init analyze show -i /var/log/cloud-init.log | "
        "grep -E '^(Starting stage|Finished stage)' | head -12",
    )
    return {
        "systemd": " ".join(_lines(vm, "systemd-analyze time | head -1")),
        "criticalChain": [x for x in chain if "@" in x or "+" in x][:24],
        "blame": _lines(vm, "systemd-analyze blame --no-pager | head -15"),
        "cloudInitStages": [x for x in stages if x.startswith("Finished")],
        "cloudInitBlame": _lines(
            vm,
            "sudo cloud-init analyze blame -i /var/log/cloud-init.log | "
            "grep -E '^ +[0-9]' | sort -rn | head -10",
        ),
    }


def report(name: str, b: dict[str, Any]) -> str:
    """The breakdown as the benchmarks print it."""
    return "\n".join(
        [
            f"\n{name}: {b['systemd']}",
            "  critical chain to cloud-final:\n    " + "\n    ".join(b["criticalChain"]),
            "  slowest units: " + ", ".join(b["blame"][:10]),
            "  cloud-init stages: " + ", ".join(b["cloudInitStages"]),
            "  slowest cloud-init modules: " + ", ".join(b["cloudInitBlame"][:8]),
        ]
    )
