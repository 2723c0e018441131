"""Kernel and system settings kubeadm's preflight and the kubelet rely on."""

from __future__ import annotations

import json
from typing import Any

import pytest

SYSCTLS = {
    "net.bridge.bridge-nf-call-iptables": "1",
    "net.bridge.bridge-nf-call-ip6tables": "1",
    "net.ipv4.ip_forward": "1",
}
# kubeadm's preflight wants these free; after a bootstrap they belong to these processes
# (``comm``, as ss shows it: at most 15 characters). The last two on control planes only.
KUBE_PORTS = {10250: "kubelet", 10257: "kube-controller", 10259: "kube-scheduler"}
CONTROL_PLANE_ONLY = {10257, 10259}
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


def _bootstrap(host: Any) -> dict[str, Any]:
    f = host.file("/run/cluster-api/bootstrap-status.json")
    status: dict[str, Any] = json.loads(f.content_string) if f.exists else {}
    return status


@pytest.mark.parametrize("port", sorted(KUBE_PORTS))
def test_kube_port_free_or_held_by_kubernetes(host: Any, port: int) -> None:
    """Before kubeadm ran, nothing may squat on its ports (its preflight would fail); after a
    successful bootstrap by a real kubeadm, each is held by the component that owns it, and a
    worker holds no control-plane port. (A node without a kubelet cannot have run a real
    kubeadm: the ports must be free there whatever its status says.)"""
    status = _bootstrap(host)
    listening = port in _listening_ports(host)
    if status.get("phase") != "Succeeded" or not host.file("/usr/bin/kubelet").exists:
        assert not listening, f"port {port} is already in use before kubeadm ran"
        return
    if status.get("role") == "worker-join" and port in CONTROL_PLANE_ONLY:
        assert not listening, f"a worker listens on control-plane port {port}"
        return
    assert listening, f"port {port}: {KUBE_PORTS[port]} is not listening after the bootstrap"
    owner = host.check_output(f"ss -Hltnp 'sport = :{port}'")
    assert f'"{KUBE_PORTS[port]}"' in owner, owner


def test_no_failed_units(host: Any, bootstrap_failed: bool) -> None:
    res = host.run("systemctl --failed --no-legend --plain")
    failed = [line.split()[0] for line in res.stdout.splitlines() if line.strip()]
    if bootstrap_failed:  # runcmd's failure fails cloud-final; test_bootstrap_status judges it
        failed = [unit for unit in failed if unit != "cloud-final.service"]
    assert not failed, f"failed systemd units: {', '.join(failed)}"
