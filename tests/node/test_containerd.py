"""containerd runs, serves CRI, runs containers with an OCI runtime under systemd cgroups v2."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import pytest

from bootstrap.vm import cri


@pytest.fixture(scope="module")
def config_dump(host: Any) -> str:
    res = host.run("containerd config dump")
    assert res.rc == 0, res.stderr
    out: str = res.stdout
    return out.replace("'", '"')  # containerd 2.x quotes TOML strings with ', 1.x with "


def test_containerd_reads_its_config_file(host: Any, config_dump: str) -> None:
    """The file's version is one this containerd reads (2 for 1.x; 3, or a migrated 2, for
    2.x): a 1.6 given a 3 would ignore it and run on its defaults, a 1.7 would not start."""
    out = host.check_output("containerd --version")
    found = re.search(r"\s(\d+)\.\d+\.\d+", out)
    assert found, f"no version in {out!r}"
    native = 3 if int(found.group(1)) >= 2 else 2
    written = re.search(
        r"^version = (\d+)", host.file("/etc/containerd/config.toml").content_string, re.M
    )
    assert written and int(written.group(1)) <= native, (out, written)
    assert re.search(rf"^version = {native}$", config_dump, re.M), "containerd did not read it"


def test_containerd_active(host: Any) -> None:
    svc = host.service("containerd")
    assert svc.is_running, "containerd.service is not active"
    assert svc.is_enabled, "containerd.service is not enabled"


def test_cri_runtime_version(host: Any, node_info: dict[str, Any], record_property: Any) -> None:
    if host.backend.NAME != "paramiko":
        pytest.skip(f"the CRI call needs the paramiko:// backend (got {host.backend.NAME}://)")
    transport = host.backend.client.get_transport()
    version = cri.runtime_version(transport, cri.DEFAULT_SOCKET)
    node_info["runtime"] = {
        "name": version.runtime_name,
        "version": version.runtime_version,
        "apiVersion": version.runtime_api_version,
    }
    node_info.setdefault("nodeInfo", {})["containerRuntimeVersion"] = (
        version.container_runtime_version
    )
    record_property(
        "detail",
        f"{version.runtime_name} {version.runtime_version} "
        f"(CRI {version.runtime_api_version}) on unix://{cri.DEFAULT_SOCKET}",
    )
    assert version.runtime_name, "CRI Version answered without a runtime name"
    assert version.runtime_api_version == "v1", version


def test_oci_runtime_binary(host: Any, config_dump: str, record_property: Any) -> None:
    default = re.search(r'default_runtime_name = "([^"]+)"', config_dump)
    names = re.findall(r'BinaryName = "([^"]*)"', config_dump)
    binary = next((n for n in names if n), None) or (default.group(1) if default else "runc")
    res = host.run(f"command -v {binary} && {binary} --version")
    assert res.rc == 0, f"OCI runtime {binary!r} is not runnable: {res.stderr.strip()}"
    record_property("detail", res.stdout.splitlines()[1] if res.stdout.count("\n") > 1 else binary)


def test_oci_runtime_runs_a_container(host: Any, config_dump: str, record_property: Any) -> None:
    """One container, run by the OCI runtime itself. No image can be pulled here, so the
    bundle's rootfs is a (non-recursive) bind mount of the node's own /, read-only inside."""
    default = re.search(r'default_runtime_name = "([^"]+)"', config_dump)
    names = re.findall(r'BinaryName = "([^"]*)"', config_dump)
    binary = next((n for n in names if n), None) or (default.group(1) if default else "runc")
    bundle = host.check_output("mktemp -d /tmp/oci-smoke.XXXXXX")
    rootfs = f"{bundle}/rootfs"
    try:
        host.check_output(f"mkdir {rootfs} && mount --bind / {rootfs}")
        host.check_output(f"cd {bundle} && {binary} spec")
        spec = json.loads(host.file(f"{bundle}/config.json").content_string)
        spec["root"] = {"path": "rootfs", "readonly": True}
        spec["process"].update(terminal=False, args=["/bin/sh", "-c", "cat /proc/self/cgroup"])
        host.check_output(f"printf %s {shlex.quote(json.dumps(spec))} > {bundle}/config.json")
        res = host.run(f"cd {bundle} && {binary} run nodesmith-oci-smoke")
    finally:
        # Never rm -r here: rootfs is the node's / until it is unmounted.
        host.run(
            f"{binary} delete --force nodesmith-oci-smoke; umount {rootfs} && rmdir "
            f"{rootfs} && rm -f {bundle}/config.json && rmdir {bundle}"
        )
    assert res.rc == 0, f"{binary} could not run a container: {res.stderr.strip()[-400:]}"
    assert res.stdout.startswith("0::/"), res.stdout  # its own cgroup v2 path, from inside
    assert not host.file(bundle).exists, f"{bundle} was not cleaned up"
    record_property("detail", f"{binary} ran /bin/sh in a container: {res.stdout.strip()}")


def test_cgroup_v2_systemd_driver(host: Any, config_dump: str) -> None:
    fs = host.run("stat -fc %T /sys/fs/cgroup").stdout.strip()
    assert fs == "cgroup2fs", f"/sys/fs/cgroup is {fs}, not cgroup v2"
    assert re.search(r"SystemdCgroup = true", config_dump), (
        "containerd's runc options do not set SystemdCgroup = true"
    )
