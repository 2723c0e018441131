"""``objects``: the Cluster API facts both drivers read, in every API version's words, and
the inputs refused before any render (a Windows node's config)."""

from __future__ import annotations

from typing import Any

import pytest

from bootstrap.errors import TerminalError
from bootstrap.render.objects import parse_cluster, parse_config, parse_machine, parse_stored

INITIALIZED = {"type": "ControlPlaneInitialized", "status": "True"}


def cluster(status: dict[str, Any], **spec: Any) -> dict[str, Any]:
    meta = {"name": "c1", "namespace": "prod"}
    return {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster", "metadata": meta,
            "spec": spec, "status": status}  # fmt: skip


# status, spec -> (initialized, infrastructure ready, paused, control-plane provider)
CLUSTERS: list[tuple[dict[str, Any], dict[str, Any], tuple[bool, bool, bool, str | None]]] = [
    ({}, {}, (False, False, False, None)),
    ({"infrastructureReady": True, "conditions": [INITIALIZED]}, {}, (True, True, False, None)),
    ({"infrastructureReady": True, "v1beta2": {"conditions": [INITIALIZED]}}, {},
     (True, True, False, None)),
    ({"initialization": {"infrastructureProvisioned": True, "controlPlaneInitialized": True}},
     {}, (True, True, False, None)),
    ({"controlPlaneInitialized": True}, {"paused": True}, (True, False, True, None)),
    ({}, {"controlPlaneRef": {"kind": "KubeadmControlPlane", "name": "c1-cp"}},
     (False, False, False, "KubeadmControlPlane/c1-cp")),
]  # fmt: skip


@pytest.mark.parametrize(("status", "spec", "want"), CLUSTERS)
def test_cluster_facts(status: dict[str, Any], spec: dict[str, Any], want: tuple[Any, ...]) -> None:
    c = parse_cluster(cluster(status, **spec))
    assert (c.initialized, c.infrastructure_ready, c.paused, c.control_plane_provider) == want


def test_the_paused_annotation_pauses_a_cluster() -> None:
    doc = cluster({})
    doc["metadata"]["annotations"] = {"cluster.x-k8s.io/paused": ""}
    assert parse_cluster(doc).paused


@pytest.mark.parametrize(
    ("spec", "labels", "status", "want"),
    [
        ({"clusterName": "c1"}, {}, {}, ("c1", False)),
        ({}, {"cluster.x-k8s.io/cluster-name": "c1"}, {}, ("c1", False)),  # the label alone
        ({"clusterName": "c1"}, {}, {"nodeRef": {"kind": "Node", "name": "n"}}, ("c1", True)),
    ],
)
def test_machine_facts(
    spec: dict[str, Any], labels: dict[str, str], status: dict[str, Any], want: tuple[Any, ...]
) -> None:
    machine = parse_machine({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
                             "metadata": {"name": "m", "labels": labels}, "spec": spec,
                             "status": status})  # fmt: skip
    assert (machine.cluster_name, machine.has_node) == want


MACHINE_OWNER = {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine", "name": "m-0"}
KCP_OWNER = {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane",
             "name": "c1-cp"}  # fmt: skip


@pytest.mark.parametrize(
    ("owners", "status", "want"),
    [
        ([], {}, (None, False)),
        ([KCP_OWNER], {}, (None, False)),  # KCP made it; no Machine owns it yet
        ([KCP_OWNER, MACHINE_OWNER], {}, ("m-0", False)),
        ([MACHINE_OWNER], {"failureReason": "X", "observedGeneration": 2}, ("m-0", True)),
        ([MACHINE_OWNER], {"failureReason": "X", "observedGeneration": 1}, ("m-0", False)),
    ],
)
def test_stored_facts(
    owners: list[dict[str, Any]], status: dict[str, Any], want: tuple[Any, ...]
) -> None:
    stored = parse_stored({"kind": "KubeadmConfig", "metadata": {
        "name": "m-0", "namespace": "prod", "generation": 2, "ownerReferences": owners},
        "status": status})  # fmt: skip
    assert (stored.owner_machine, stored.latched_failure) == want


@pytest.mark.parametrize(
    ("spec", "field", "value"),
    [
        ({"files": [{"path": "/etc/a", "content": "x"}, {"path": "c:/k/azure.json"}]},
         "spec.files[1].path", "c:/k/azure.json"),
        ({"files": [{"path": "C:\\k\\kubeadm-bootstrap.ps1"}]},
         "spec.files[0].path", "C:\\k\\kubeadm-bootstrap.ps1"),
        ({"joinConfiguration": {"nodeRegistration": {
            "criSocket": "npipe:////./pipe/containerd-containerd"}}},
         "spec.joinConfiguration.nodeRegistration.criSocket",
         "npipe:////./pipe/containerd-containerd"),
    ],
)  # fmt: skip
def test_a_windows_nodes_config_is_refused_naming_the_field(
    spec: dict[str, Any], field: str, value: str
) -> None:
    with pytest.raises(TerminalError) as caught:
        parse_config({"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1", "kind": "KubeadmConfig",
                      "metadata": {"name": "win"}, "spec": spec})  # fmt: skip
    error = caught.value
    assert (error.reason, error.field) == ("WindowsNotSupported", field)
    assert repr(value) in str(error) and "Windows nodes" in str(error)
    assert "absolute path" not in str(error)
