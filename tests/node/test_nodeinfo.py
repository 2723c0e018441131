"""Gather Node.status.nodeInfo as the kubelet would report it, for the report."""

from __future__ import annotations

import re
from typing import Any

from bootstrap.vm import cri

_ARCH = {
    "x86_64": "amd64",
    "aarch64": "arm64",
    "armv7l": "arm",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
}


def test_node_info(host: Any, node_info: dict[str, Any]) -> None:
    info = node_info.setdefault("nodeInfo", {})
    os_release = host.file("/etc/os-release").content_string
    pretty = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', os_release, re.M)
    info["kernelVersion"] = host.run("uname -r").stdout.strip()
    info["osImage"] = pretty.group(1) if pretty else ""
    info["operatingSystem"] = "linux"
    info["architecture"] = _ARCH.get(host.run("uname -m").stdout.strip(), "unknown")
    info["machineID"] = host.file("/etc/machine-id").content_string.strip()
    info["bootID"] = host.file("/proc/sys/kernel/random/boot_id").content_string.strip()
    if "kubeletVersion" not in info:
        res = host.run("kubelet --version")
        info["kubeletVersion"] = (
            res.stdout.strip().removeprefix("Kubernetes ") or None if res.rc == 0 else None
        )
    if "containerRuntimeVersion" not in info and host.backend.NAME == "paramiko":
        version = cri.runtime_version(host.backend.client.get_transport())
        info["containerRuntimeVersion"] = version.container_runtime_version
    missing = [
        k
        for k in ("kernelVersion", "osImage", "machineID", "bootID", "containerRuntimeVersion")
        if not info.get(k)
    ]
    assert not missing, f"nodeInfo fields not found: {', '.join(missing)}"
