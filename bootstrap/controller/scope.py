"""One reconcile's view: a KubeadmConfig, its owner Machine and that Machine's Cluster, typed.

The informers hold objects as the API server sends them; a reconcile reads them through the
render pipeline's own model (``bootstrap.render.objects``), so the controller and ``nodesmith
render`` agree on every fact: whether the Cluster is initialized (in any API version's words),
its infrastructure ready, paused, which Cluster a Machine names (``spec.clusterName`` or the
``cluster.x-k8s.io/cluster-name`` label), who owns a config. The objects go into one
:class:`~bootstrap.render.resolve.Bundle`, parsed once, which the render then resolves from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from bootstrap.controller.status import view as status_view
from bootstrap.errors import TerminalError, TransientError, show_value
from bootstrap.render import pki
from bootstrap.render.objects import Cluster, Machine, Stored, parse_stored
from bootstrap.render.resolve import Bundle, Context, resolve

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name)


class Cache(Protocol):
    """What a reconcile reads a resource through (an ``Informer``, or a test's dict)."""

    def get(self, namespace: str, name: str) -> Obj | None: ...

    def items(self) -> list[Obj]: ...


@dataclass
class Caches:
    configs: Cache
    machines: Cache
    clusters: Cache
    secrets: Cache


@dataclass
class Scope:
    """The objects one reconcile works on; ``bundle`` grows as they are found."""

    key: Key
    doc: Obj  # the KubeadmConfig as cached: its status is written over its resourceVersion
    stored: Stored
    machine_name: str
    machine_stored: Stored  # the Machine's facts no validation of its spec can fail
    bundle: Bundle = field(repr=False)

    @property
    def namespace(self) -> str:
        return self.key[0]

    @property
    def name(self) -> str:
        return self.key[1]

    @property
    def stored_status(self) -> Obj:
        """The config's status as stored (v1beta2)."""
        raw = self.doc.get("status")
        return dict(raw) if isinstance(raw, dict) else {}

    @property
    def status(self) -> Obj:
        """The config's status in v1beta1's words (conditions are merged into it, never
        replaced)."""
        return status_view(self.stored_status)

    def machine(self) -> Machine:
        """The owner Machine, typed (a malformed one is terminal, naming its field)."""
        machine = self.bundle.machine(self.namespace, self.machine_name)
        assert machine is not None  # load() put it in the bundle
        return machine

    def context(self) -> Context:
        return resolve(self.bundle, f"{self.namespace}/{self.machine_name}")


def load(caches: Caches, key: Key) -> Scope | str:
    """The scope of ``key``, or why there is nothing to reconcile (CABPK ignores a config no
    Machine owns yet, and one whose Machine is gone: the Machine's event brings it back)."""
    doc = caches.configs.get(*key)
    if doc is None:
        return "NotFound"  # deleted: its Secret goes with its ownerRef
    stored = parse_stored(doc)
    owner = stored.owner_machine
    if owner is None:
        return "NoMachineOwner"
    machine = caches.machines.get(key[0], owner)
    if machine is None:
        return "MachineNotFound"
    return Scope(key, doc, stored, owner, parse_stored(machine), Bundle([machine, doc]))


def cluster(scope: Scope, clusters: Cache) -> Cluster:
    """The Machine's Cluster, in the Machine's namespace: terminal when the Machine names none
    or one in another namespace, waiting (transient) while it does not exist yet."""
    machine, namespace = scope.machine(), scope.namespace
    name = machine.cluster_name
    if not name:
        raise TerminalError(
            "is empty: the Machine names no Cluster",
            obj=machine.ref,
            field=machine.cluster_field,
            reason="InvalidMachine",
        )
    doc = clusters.get(namespace, name)
    if doc is None:
        elsewhere = sorted(
            stored.namespace
            for stored in map(parse_stored, clusters.items())
            if stored.name == name
        )
        if elsewhere:
            raise TerminalError(
                f"names Cluster {show_value(name)}, which is not in namespace "
                f"{show_value(namespace)} (found in {', '.join(elsewhere)}); a Machine's "
                "Cluster must be in its own namespace",
                obj=machine.ref,
                field=machine.cluster_field,
                reason="ClusterInOtherNamespace",
            )
        raise TransientError(
            f"Cluster {namespace}/{name} does not exist yet",
            obj=machine.ref,
            field=machine.cluster_field,
            reason="WaitingForCluster",
        )
    if scope.bundle.cluster(namespace, name) is None:
        scope.bundle.add([doc])
    found = scope.bundle.cluster(namespace, name)
    assert found is not None
    return found


def _strings(value: Any, out: set[str]) -> set[str]:
    if isinstance(value, str):
        out.add(value)
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out)
    return out


def referenced_secrets(scope: Scope, cluster_name: str) -> set[str]:
    """Every Secret the render may read: any name the spec mentions (contentFrom, passwdFrom,
    discovery, external etcd) and the cluster's CAs. A superset is harmless: a name that is
    no Secret is simply not found."""
    names = _strings(scope.doc.get("spec") or {}, set())
    names.update(f"{cluster_name}-{s}" for s in pki.SECRET_SUFFIXES.values())
    return {n for n in names if 0 < len(n) <= 253}


def waiting_on(scope: Scope, secrets: Cache) -> list[Key]:
    """The Secrets a waiting config may be waiting for: those it references that are not there,
    and the cluster's kubeconfig (the workload cluster's way in)."""
    cluster_name = scope.machine_stored.cluster_name or ""
    names = referenced_secrets(scope, cluster_name) | {f"{cluster_name}-kubeconfig"}
    return [(scope.namespace, n) for n in sorted(names) if secrets.get(scope.namespace, n) is None]
