"""``nodesmith vm cluster``'s plan: which VM each Machine becomes, before anything boots.

The booted cluster itself is proven by the controller-driven cluster tests
(``test_controller_cluster.py``) and run by ``scripts/main``; these are the decisions
``bootstrap.vm.cluster.plan`` makes from the bundle, on the real renderer and the real
``examples/``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from bootstrap.errors import NodesmithError, TerminalError, TransientError
from bootstrap.render import RenderOptions
from bootstrap.render.loader import load_paths
from bootstrap.vm import cluster

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return load_paths([str(EXAMPLES)])


def test_examples_become_an_init_node_then_a_join_node(objects: list[dict[str, Any]]) -> None:
    nodes, tokens = cluster.plan(objects, RenderOptions())
    assert [(n.name, n.role, n.address, n.mac) for n in nodes] == [
        ("demo-cp-0", "init-control-plane", "192.168.57.10/24", "52:54:00:57:00:0a"),
        ("demo-md-0", "worker-join", "192.168.57.11/24", "52:54:00:57:00:0b"),
    ]
    assert all(n.userdata.startswith(b"#cloud-config") for n in nodes)
    # The joins' token must exist in the workload cluster: one Secret, as CABPK makes it.
    assert [t["type"] for t in tokens] == ["bootstrap.kubernetes.io/token"]


def test_network_config_puts_the_machine_on_the_private_segment(
    objects: list[dict[str, Any]],
) -> None:
    nodes, _ = cluster.plan(objects, RenderOptions())
    doc = yaml.safe_load(cluster.network_config(nodes[1]))
    assert doc["ethernets"]["cluster0"] == {
        "match": {"macaddress": "52:54:00:57:00:0b"},
        "set-name": "cluster0",
        "addresses": ["192.168.57.11/24"],
        "gateway4": "192.168.57.1",
    }
    assert doc["ethernets"]["mgmt0"]["match"] == {"macaddress": cluster.MGMT_MAC}


def _edit(objects: list[dict[str, Any]], kind: str, name: str, path: str, value: Any) -> list:
    out = copy.deepcopy(objects)
    for obj in out:
        if obj.get("kind") == kind and obj["metadata"]["name"] == name:
            *parents, leaf = path.split(".")
            target = obj
            for key in parents:
                target = target[key]
            target[leaf] = value
    return out


# (what is wrong, kind, name, path, value, error class, reason, text the message names)
ERRORS = [
    ("no QemuMachine ref", "Machine", "demo-md-0", "spec.infrastructureRef",
     {"kind": "AWSMachine", "name": "x"}, TerminalError, "NoInfrastructure", "AWSMachine"),
    ("address without prefix", "QemuMachine", "demo-md-0", "spec.address", "192.168.57.11",
     TerminalError, "InvalidAddress", "192.168.57.11"),
    ("address not an address", "QemuMachine", "demo-cp-0", "spec.address", "cp/24",
     TerminalError, "InvalidAddress", "spec.address"),
    ("QemuMachine not in the input", "Machine", "demo-md-0", "spec.infrastructureRef",
     {"kind": "QemuMachine", "name": "later"}, TransientError, "InfrastructureMissing",
     "'later'"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("what", "kind", "name", "path", "value", "error", "reason", "needle"),
    ERRORS,
    ids=[row[0] for row in ERRORS],
)
def test_errors(
    objects: list[dict[str, Any]],
    what: str,
    kind: str,
    name: str,
    path: str,
    value: Any,
    error: type[NodesmithError],
    reason: str,
    needle: str,
) -> None:
    with pytest.raises(NodesmithError) as raised:
        cluster.plan(_edit(objects, kind, name, path, value), RenderOptions())
    assert type(raised.value) is error, what
    assert raised.value.reason == reason
    assert needle in str(raised.value)
