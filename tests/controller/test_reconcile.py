"""Reconcile decisions as a table, on the in-memory API (``fakekube``, a test double): each row
is a world (Cluster status, Machine, config, Secrets, lock), the outcome one reconcile must
reach, and what it must have created. Milliseconds a row; the same reconciler runs against
real API servers in the other files of this folder."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from fakekube import FakeApi, fake_caches

from bootstrap.controller import kube
from bootstrap.controller.manager import Controller, Options
from bootstrap.controller.reconcile import Reconciler, Settings
from bootstrap.controller.workload import Workloads
from bootstrap.render import pki

Obj = dict[str, Any]
NS = "prod"
CLUSTER = "c1"
INITIALIZED = {"type": "ControlPlaneInitialized", "status": "True"}

# The status words of every API version for "infrastructure ready, control plane initialized".
NOT_INITIALIZED: Obj = {"infrastructureReady": True}
V1BETA1: Obj = {"infrastructureReady": True, "conditions": [INITIALIZED]}
V1BETA2_ON_V1BETA1: Obj = {"infrastructureReady": True, "v1beta2": {"conditions": [INITIALIZED]}}
V1BETA2: Obj = {
    "initialization": {"infrastructureProvisioned": True, "controlPlaneInitialized": True},
    "conditions": [INITIALIZED],
}
NO_INFRASTRUCTURE: Obj = {"conditions": [INITIALIZED]}

_CAS = pki.pki_secrets(CLUSTER, NS, pki.generate_cluster_pki(CLUSTER))


class FakeWorkloads(Workloads):
    """TEST DOUBLE: the workload cluster is another in-memory API, reachable once the
    ``<cluster>-kubeconfig`` Secret exists (as the real one is made from it)."""

    def __init__(self, secrets: Any, workload: FakeApi) -> None:
        super().__init__(secrets)
        self.workload = workload

    def api(self, namespace: str, cluster: str) -> kube.Api | None:
        if self.secrets.get(namespace, f"{cluster}-kubeconfig") is None:
            return None
        return self.workload


def cluster_doc(
    status: Obj, *, paused: bool = False, namespace: str = NS, kcp: bool = False
) -> Obj:
    doc: Obj = {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Cluster",
        "metadata": {"name": CLUSTER, "namespace": namespace},
        "spec": {
            "paused": paused,
            "clusterNetwork": {"pods": {"cidrBlocks": ["10.244.0.0/16"]}},
            "controlPlaneEndpoint": {"host": "10.0.0.10", "port": 6443},
        },
        "status": status,
    }
    if kcp:  # a control-plane provider: it creates the CAs, never the bootstrap provider
        doc["spec"]["controlPlaneRef"] = {
            "apiVersion": "controlplane.cluster.x-k8s.io/v1beta1",
            "kind": "KubeadmControlPlane",
            "name": f"{CLUSTER}-cp",
        }
    return doc


def machine_doc(name: str, *, cp: bool, by_label: bool = False, node: bool = False) -> Obj:
    labels = {"cluster.x-k8s.io/cluster-name": CLUSTER}
    if cp:
        labels["cluster.x-k8s.io/control-plane"] = ""
    spec: Obj = {
        "version": "v1.30.2",
        "bootstrap": {"configRef": {"kind": "KubeadmConfig", "name": name}},
    }
    if not by_label:
        spec["clusterName"] = CLUSTER
    doc: Obj = {
        "apiVersion": "cluster.x-k8s.io/v1beta1",
        "kind": "Machine",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": spec,
    }
    if node:
        doc["status"] = {"nodeRef": {"kind": "Node", "name": name}}
    return doc


def config_doc(name: str, owner: Obj | None, spec: Obj | None = None) -> Obj:
    meta: Obj = {"name": name, "namespace": NS}
    if owner is not None:
        meta["ownerReferences"] = [
            {
                "apiVersion": "cluster.x-k8s.io/v1beta1",
                "kind": "Machine",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
            }
        ]
    return {
        "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
        "kind": "KubeadmConfig",
        "metadata": meta,
        "spec": spec or {},
    }


def lock_doc(holder: str) -> Obj:
    return {
        "metadata": {"name": f"{CLUSTER}-lock", "namespace": NS},
        "data": {"lock-information": json.dumps({"machineName": holder})},
    }


@dataclass
class World:
    api: FakeApi = field(default_factory=FakeApi)
    workload: FakeApi = field(default_factory=FakeApi)

    def reconciler(self) -> Reconciler:
        caches = fake_caches(self.api)
        reconciler = Reconciler(self.api, caches, Settings())
        reconciler.workloads = FakeWorkloads(caches.secrets, self.workload)
        return reconciler

    def names(self, res: Any) -> set[str]:
        return {o["metadata"]["name"] for o in self.api.of(res, NS)}


def node(w: World, name: str, *, cp: bool, spec: Obj | None = None, **machine: Any) -> Obj:
    """A Machine and its KubeadmConfig owned by it; returns the config."""
    owner = w.api.put(kube.Machine, machine_doc(name, cp=cp, **machine))
    return w.api.put(kube.KubeadmConfig, config_doc(name, owner, spec))


def cas(w: World) -> None:
    for secret in _CAS:
        w.api.put(kube.Secret, secret)


def kubeconfig(w: World) -> None:
    w.api.put(kube.Secret, {"metadata": {"name": f"{CLUSTER}-kubeconfig", "namespace": NS}})


def with_cluster(
    status: Obj, *extra: Callable[[World], None], **kw: Any
) -> Callable[[World], None]:
    def build(w: World) -> None:
        w.api.put(kube.Cluster, cluster_doc(status, **kw))
        for step in extra:
            step(w)

    return build


def cp(w: World) -> None:
    node(w, "cp-0", cp=True)


def worker(w: World) -> None:
    node(w, "cp-0", cp=False)


CA_NAMES = {f"{CLUSTER}-{s}" for s in pki.SECRET_SUFFIXES.values()}

# name: (world, (result, reason), Secrets created, ConfigMaps after, role rendered or None)
ROWS: dict[str, tuple[Callable[[World], None], tuple[str, str], set[str], set[str], str | None]] = {
    "first control plane inits: CAs, lock, data": (
        with_cluster(NOT_INITIALIZED, cp),
        ("ready", "DataSecretAvailable"), CA_NAMES | {"cp-0"}, {"c1-lock"}, "init-control-plane",
    ),
    "under KubeadmControlPlane the init waits for its CAs, never makes them": (
        with_cluster(NOT_INITIALIZED, cp, kcp=True),
        ("waiting", "CANotFound"), set(), {"c1-lock"}, None,
    ),
    "under KubeadmControlPlane the init uses the CAs it made": (
        with_cluster(NOT_INITIALIZED, cas, cp, kcp=True),
        ("ready", "DataSecretAvailable"), {"cp-0"}, {"c1-lock"}, "init-control-plane",
    ),
    "a second control plane waits for the lock's holder": (
        with_cluster(NOT_INITIALIZED, cp, lambda w: node(w, "cp-1", cp=True),
                     lambda w: w.api.put(kube.ConfigMap, lock_doc("cp-1"))),
        ("waiting", "WaitingForControlPlaneInitialized"), set(), {"c1-lock"}, None,
    ),
    "a lock whose holder is gone is broken and taken": (
        with_cluster(NOT_INITIALIZED, cp, lambda w: w.api.put(kube.ConfigMap, lock_doc("gone"))),
        ("ready", "DataSecretAvailable"), CA_NAMES | {"cp-0"}, {"c1-lock"}, "init-control-plane",
    ),
    "initialized (v1beta1 condition): control-plane join, lock released": (
        with_cluster(V1BETA1, cas, kubeconfig, cp,
                     lambda w: w.api.put(kube.ConfigMap, lock_doc("cp-9"))),
        ("ready", "DataSecretAvailable"), {"cp-0"}, set(), "join-control-plane",
    ),
    "initialized (v1beta2 conditions on a v1beta1 Cluster): join waits for CAs, never makes them": (
        with_cluster(V1BETA2_ON_V1BETA1, cp),
        ("waiting", "CANotFound"), set(), set(), None,
    ),
    "initialized (v1beta2 initialization): control-plane join": (
        with_cluster(V1BETA2, cas, kubeconfig, cp),
        ("ready", "DataSecretAvailable"), {"cp-0"}, set(), "join-control-plane",
    ),
    "a worker waits for the control plane": (
        with_cluster(NOT_INITIALIZED, worker),
        ("waiting", "WaitingForControlPlaneInitialized"), set(), set(), None,
    ),
    "a worker joins an initialized cluster with a token made in the workload cluster": (
        with_cluster(V1BETA1, cas, kubeconfig, worker),
        ("ready", "DataSecretAvailable"), {"cp-0"}, set(), "worker-join",
    ),
    "a worker whose Machine names its Cluster by label alone": (
        with_cluster(V1BETA1, cas, kubeconfig, lambda w: node(w, "cp-0", cp=False, by_label=True)),
        ("ready", "DataSecretAvailable"), {"cp-0"}, set(), "worker-join",
    ),
    "a worker waits for the workload cluster's kubeconfig": (
        with_cluster(V1BETA1, cas, worker),
        ("waiting", "WaitingForWorkloadCluster"), set(), set(), None,
    ),
    "a worker asking for the control plane's keys is refused": (
        with_cluster(V1BETA1, cas, kubeconfig, lambda w: node(
            w, "cp-0", cp=False, spec={"joinConfiguration": {"controlPlane": {}}})),
        ("failed", "WorkerAsksForControlPlane"), set(), set(), None,
    ),
    "infrastructure not ready": (
        with_cluster(NO_INFRASTRUCTURE, worker),
        ("waiting", "WaitingForClusterInfrastructure"), set(), set(), None,
    ),
    "a paused Cluster is left alone": (
        with_cluster(V1BETA1, cas, kubeconfig, worker, paused=True),
        ("ignored", "Paused"), set(), set(), None,
    ),
    "no Cluster yet": (cp, ("waiting", "WaitingForCluster"), set(), set(), None),
    "the Cluster in another namespace": (
        with_cluster(V1BETA1, cp, namespace="elsewhere"),
        ("failed", "ClusterInOtherNamespace"), set(), set(), None,
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(ROWS))
def test_reconcile_decides(name: str) -> None:
    build, want, secrets, config_maps, role = ROWS[name]
    w = World()
    build(w)
    before = w.names(kube.Secret)
    outcome = w.reconciler().reconcile((NS, "cp-0"))
    assert (outcome.result, outcome.reason) == want
    assert w.names(kube.Secret) - before == secrets
    assert w.names(kube.ConfigMap) == config_maps
    status = w.api.of(kube.KubeadmConfig, NS)[0].get("status") or {}
    writes = w.api.writes[("patch-status", "kubeadmconfigs")]
    if want[0] == "ignored":
        assert writes == 0 and status == {}
        return
    assert writes == 1  # the status is computed once and written once
    # stored in v1beta2's words: initialization, metav1 conditions of this generation, the
    # v1beta1 failure kept under deprecated.v1beta1 (as CABPK keeps it)
    deprecated = status.get("deprecated", {}).get("v1beta1", {})
    assert status.get("initialization", {}).get("dataSecretCreated", False) == (want[0] == "ready")
    assert deprecated.get("failureReason") == (want[1] if want[0] == "failed" else None)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["observedGeneration"] == status["observedGeneration"]
    assert ready["status"] == ("True" if want[0] == "ready" else "False")
    assert "ready" not in status and "failureReason" not in status
    if role is not None:
        data = w.api.get(kube.Secret, "cp-0", NS)
        assert data is not None
        assert f": {role} for Machine prod/cp-0" in base64.b64decode(data["data"]["value"]).decode()
    if role in ("worker-join", "join-control-plane"):
        (token,) = w.workload.of(kube.Secret, "kube-system")
        assert token["metadata"]["name"].startswith("bootstrap-token-")


def test_a_latched_failure_is_not_retried_until_an_input_changes() -> None:
    w = World()
    with_cluster(V1BETA1, cas, kubeconfig, lambda w: node(
        w, "cp-0", cp=False, spec={"joinConfiguration": {"controlPlane": {}}}))(w)  # fmt: skip
    reconciler = w.reconciler()
    assert reconciler.reconcile((NS, "cp-0")).result == "failed"
    writes = w.api.total_writes()
    assert reconciler.reconcile((NS, "cp-0")).reason == "WorkerAsksForControlPlane"
    assert w.api.total_writes() == writes  # judged from the status: nothing written
    reconciler.mark_inputs_changed((NS, "cp-0"))
    w.api.merge_patch(kube.KubeadmConfig, "cp-0", NS, {"spec": {"joinConfiguration": None}})
    assert reconciler.reconcile((NS, "cp-0")).result == "ready"


def test_a_data_secret_of_an_earlier_run_is_adopted_and_someone_elses_refused() -> None:
    w = World()
    with_cluster(V1BETA1, cas, kubeconfig, worker)(w)
    config = w.api.get(kube.KubeadmConfig, "cp-0", NS)
    assert config is not None
    owner = {"kind": "KubeadmConfig", "name": "cp-0", "uid": config["metadata"]["uid"]}
    w.api.put(kube.Secret, {"metadata": {"name": "cp-0", "namespace": NS,
                                         "ownerReferences": [owner]}})  # fmt: skip
    outcome = w.reconciler().reconcile((NS, "cp-0"))
    assert (outcome.result, outcome.reason) == ("ready", "DataSecretAdopted")
    assert w.workload.of(kube.Secret, "kube-system") == []  # no second token minted

    other = World()
    with_cluster(V1BETA1, cas, kubeconfig, worker)(other)
    other.api.put(kube.Secret, {"metadata": {"name": "cp-0", "namespace": NS}})
    outcome = other.reconciler().reconcile((NS, "cp-0"))
    assert (outcome.result, outcome.reason) == ("failed", "DataSecretConflict")


def test_a_joined_node_lets_its_token_expire() -> None:
    w = World()
    with_cluster(V1BETA1, cas, kubeconfig, lambda w: node(w, "cp-0", cp=False, node=True))(w)
    reconciler = w.reconciler()
    assert reconciler.reconcile((NS, "cp-0")).result == "ready"
    writes = w.api.total_writes() + w.workload.total_writes()
    outcome = reconciler.reconcile((NS, "cp-0"))
    assert (outcome.result, outcome.reason, outcome.requeue_after) == ("ready", "NodeJoined", None)
    assert w.api.total_writes() + w.workload.total_writes() == writes


def kcp_created(config: Obj) -> Obj:
    """As KubeadmControlPlane creates a config: its labels and a non-controller ownerRef to
    the KCP; the Machine controller makes the Machine its controller owner later."""
    config["metadata"]["labels"] = {
        "cluster.x-k8s.io/cluster-name": CLUSTER,
        "cluster.x-k8s.io/control-plane": "",
        "cluster.x-k8s.io/control-plane-name": f"{CLUSTER}-cp",
    }
    config["metadata"]["ownerReferences"] = [
        {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane",
         "name": f"{CLUSTER}-cp", "uid": "kcp-uid"}
    ]  # fmt: skip
    return config


def test_a_kcp_config_is_reconciled_once_its_machine_owns_it() -> None:
    w = World()
    w.api.put(kube.Cluster, cluster_doc(NOT_INITIALIZED, kcp=True))
    cas(w)
    machine = w.api.put(kube.Machine, machine_doc("cp-0", cp=True))
    config = kcp_created(config_doc("cp-0", None))
    w.api.put(kube.KubeadmConfig, config)
    reconciler = w.reconciler()
    assert reconciler.reconcile((NS, "cp-0")).reason == "NoMachineOwner"
    owners = [*config["metadata"]["ownerReferences"], {
        "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine", "name": "cp-0",
        "uid": machine["metadata"]["uid"], "controller": True}]  # fmt: skip
    w.api.merge_patch(kube.KubeadmConfig, "cp-0", NS, {"metadata": {"ownerReferences": owners}})
    outcome = reconciler.reconcile((NS, "cp-0"))
    assert (outcome.result, outcome.reason) == ("ready", "DataSecretAvailable")
    assert w.names(kube.Secret) == CA_NAMES | {"cp-0"}  # no CA of ours beside KCP's


@pytest.mark.parametrize(
    "config, reason",
    [
        (lambda m: config_doc("cp-0", None), "NoMachineOwner"),
        (lambda m: config_doc("cp-0", {"metadata": {"name": "gone", "uid": "x"}}),
         "MachineNotFound"),
        (lambda m: kcp_created(config_doc("cp-0", None)), "NoMachineOwner"),
    ],
)  # fmt: skip
def test_configs_that_are_not_ours_yet_are_ignored(
    config: Callable[[Obj], Obj], reason: str
) -> None:
    w = World()
    w.api.put(kube.Cluster, cluster_doc(V1BETA1))
    machine = w.api.put(kube.Machine, machine_doc("cp-0", cp=False))
    w.api.put(kube.KubeadmConfig, config(machine))
    outcome = w.reconciler().reconcile((NS, "cp-0"))
    assert (outcome.result, outcome.reason) == ("ignored", reason)
    assert w.api.total_writes() == 0


def test_a_cluster_change_requeues_machines_naming_it_by_label() -> None:
    """A Cluster's event queues the configs of every Machine the reconcile counts as its own,
    also those naming it only by the cluster-name label."""
    controller = Controller(Options(leader_elect=False, metrics_port=0), client=object())
    machines = controller.caches.machines
    for doc in (machine_doc("by-label", cp=False, by_label=True), machine_doc("by-spec", cp=False)):
        doc["metadata"]["uid"] = doc["metadata"]["name"]
        machines._apply("ADDED", doc)  # type: ignore[attr-defined]
    while len(controller.queue):
        key = controller.queue.get(timeout=0)
        controller.queue.done(key)
    controller._on_cluster("MODIFIED", cluster_doc(V1BETA1), None)
    queued = set()
    while len(controller.queue):
        queued.add(controller.queue.get(timeout=0))
    assert queued == {(NS, "by-label"), (NS, "by-spec")}


def test_a_paused_or_done_config_is_never_failed_by_a_cluster_nodesmith_would_refuse() -> None:
    """Paused means hands off, and a written config is done: neither is judged by a full
    validation of a Cluster edited since into something the render refuses (a bad CIDR)."""
    bad = {"pods": {"cidrBlocks": ["not-a-cidr"]}}
    paused = World()
    with_cluster(V1BETA1, cas, kubeconfig, worker, paused=True)(paused)
    paused.api.merge_patch(kube.Cluster, CLUSTER, NS, {"spec": {"clusterNetwork": bad}})
    writes = paused.api.total_writes()
    assert paused.reconciler().reconcile((NS, "cp-0")).reason == "Paused"
    assert paused.api.total_writes() == writes

    done = World()
    with_cluster(V1BETA1, cas, kubeconfig, worker)(done)
    reconciler = done.reconciler()
    assert reconciler.reconcile((NS, "cp-0")).result == "ready"
    done.api.merge_patch(kube.Cluster, CLUSTER, NS, {"spec": {"clusterNetwork": bad}})
    writes = done.api.total_writes()
    outcome = reconciler.reconcile((NS, "cp-0"))
    assert (outcome.result, outcome.reason) == ("ready", "Unchanged")
    assert done.api.total_writes() == writes
    status = done.api.get(kube.KubeadmConfig, "cp-0", NS)["status"]  # type: ignore[index]
    assert status["initialization"] == {"dataSecretCreated": True}
    assert "failureReason" not in status.get("deprecated", {}).get("v1beta1", {})
