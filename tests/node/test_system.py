"""Kernel and system settings kubeadm's preflight and the kubelet rely on."""

from __future__ import annotations

from typing import Any

import pytest

SYSCTLS = {
    "net.bridge.bridge-nf-call-iptables": "1",
    "net.bridge.bridge-nf-call-ip6tables": "1",
    "net.ipv4.ip_forward": "1",
}
KUBE_PORTS = (10250, 10257, 10259)
TIME_SYNC = ("chrony", "systemd-timesyncd", "ntpsec", "ntp")


@pytest.mark.parametrize("module", ["br_netfilter", "overlay"])
def test_kernel_module_loaded(host: Any, module: str) -> None:
    assert host.file(f"/sys/module/{module}").is_directory, f"{module} is not loaded"


@pytest.mark.parametrize(("key", "value"), sorted(SYSCTLS.items()))
def test_sysctl(host: Any, key: str, value: str) -> None:
    path = "/proc/sys/" + key.replace(".", "/")
    got = host.file(path).content_string.strip() if host.file(path).exists else "(missing)"
    assert got == value, f"{key} = {got}, want {value}"


def test_swap_off(host: Any) -> None:
    lines = host.file("/proc/swaps").content_string.strip().splitlines()
    assert len(lines) <= 1, f"swap is on: {lines[1:]}"


def test_time_sync_active(host: Any) -> None:
    active = [s for s in TIME_SYNC if host.service(s).is_running]
    assert active, f"no time sync service is active (looked for {', '.join(TIME_SYNC)})"


def _listening_ports(host: Any) -> set[int]:
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in host.file(table).content_string.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.parametrize("port", KUBE_PORTS)
def test_kube_port_free(host: Any, port: int) -> None:
    assert port not in _listening_ports(host), f"port {port} is already in use"


def test_no_failed_units(host: Any, bootstrap_failed: bool) -> None:
    res = host.run("systemctl --failed --no-legend --plain")
    failed = [line.split()[0] for line in res.stdout.splitlines() if line.strip()]
    if bootstrap_failed:  # runcmd's failure fails cloud-final; test_bootstrap_status judges it
        failed = [unit for unit in failed if unit != "cloud-final.service"]
    assert not failed, f"failed systemd units: {', '.join(failed)}"
