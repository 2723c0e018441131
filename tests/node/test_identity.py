"""The node has its own identity: the Machine's hostname, a machine-id, fresh SSH host keys."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest

from bootstrap.sshkeys import fingerprint_of_blob


def test_hostname_is_machine_name(
    host: Any, instance_data: dict[str, Any], pytestconfig: pytest.Config
) -> None:
    want = pytestconfig.getoption("machine_name") or instance_data["v1"]["local_hostname"]
    got = host.run("hostname").stdout.strip()
    assert got == want, f"hostname {got!r}, want {want!r}"


def test_hostname_resolves(host: Any) -> None:
    name = host.run("hostname").stdout.strip()
    res = host.run(f"getent hosts {name}")
    assert res.rc == 0, f"{name} does not resolve on the node (sudo and kubeadm warn)"


def test_machine_id_set(host: Any) -> None:
    mid = host.file("/etc/machine-id").content_string.strip()
    assert re.fullmatch(r"[0-9a-f]{32}", mid), f"/etc/machine-id is {mid!r}"
    assert mid != "0" * 32


def test_ssh_host_keys_from_first_boot(host: Any) -> None:
    """Keys exist and none predates this instance's cloud-init ssh module (none came baked)."""
    sem = host.file("/var/lib/cloud/instance/sem/config_ssh")
    assert sem.exists, "cloud-init's ssh module has not run for this instance"
    res = host.run("stat -c '%Y %n' /var/lib/cloud/instance/sem/config_ssh /etc/ssh/ssh_host_*_key")
    stamps = [line.split(" ", 1) for line in res.stdout.splitlines()]
    sem_time = int(stamps[0][0])
    keys = {name: int(t) for t, name in stamps[1:]}
    assert keys, "no SSH host keys in /etc/ssh"
    old = sorted(name for name, t in keys.items() if t < sem_time - 1)
    assert not old, f"older than this instance's first boot: {', '.join(old)}"


def test_ssh_host_key_is_the_served_one(host: Any) -> None:
    if host.backend.NAME != "paramiko":
        pytest.skip(f"needs the paramiko:// backend to see the served key ({host.backend.NAME})")
    served = host.backend.client.get_transport().get_remote_server_key()
    kind = {"ssh-ed25519": "ed25519", "ssh-rsa": "rsa"}.get(served.get_name(), "ecdsa")
    path = f"/etc/ssh/ssh_host_{kind}_key.pub"
    on_node = host.file(path).content_string.split()
    assert len(on_node) >= 2, f"{path} is empty"
    assert fingerprint_of_blob(base64.b64decode(on_node[1])) == fingerprint_of_blob(
        served.asbytes()
    ), f"the served host key is not {path}"
