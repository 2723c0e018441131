"""The Kubernetes API as the controller uses it: lightkube, raw objects, counted writes.

Every resource is a lightkube *generic* resource, so objects stay plain dicts from the wire to
the render pipeline (which parses them itself) and no model class has to match the server's
version. Every write goes through :class:`Api`, which counts it per verb and resource: the
benchmark's "writes per config" and the idempotency tests read those counters.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import httpx2
from lightkube import ApiError, Client, KubeConfig
from lightkube.generic_resource import create_global_resource, create_namespaced_resource
from lightkube.types import PatchType

GROUP = "bootstrap.cluster.x-k8s.io"
CORE_GROUP = "cluster.x-k8s.io"

KubeadmConfig = create_namespaced_resource(GROUP, "v1beta2", "KubeadmConfig", "kubeadmconfigs")
# the same objects in the v1beta1 contract's words, converted by the webhook: what a Cluster API
# v1beta1 reader sees (the tests read it to prove the conversion end to end)
KubeadmConfigV1Beta1 = create_namespaced_resource(
    GROUP, "v1beta1", "KubeadmConfig", "kubeadmconfigs"
)
Cluster = create_namespaced_resource(CORE_GROUP, "v1beta1", "Cluster", "clusters")
Machine = create_namespaced_resource(CORE_GROUP, "v1beta1", "Machine", "machines")
Secret = create_namespaced_resource("", "v1", "Secret", "secrets")
ConfigMap = create_namespaced_resource("", "v1", "ConfigMap", "configmaps")
Lease = create_namespaced_resource("coordination.k8s.io", "v1", "Lease", "leases")
Namespace = create_global_resource("", "v1", "Namespace", "namespaces")
CRD = create_global_resource(
    "apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions"
)

Obj = dict[str, Any]

_local = threading.local()


def thread_writes() -> int:
    """Writes made by this thread so far, to every API server: one reconcile's cost."""
    return int(getattr(_local, "writes", 0))


def connect(kubeconfig: Path | dict[str, Any], timeout: float = 30) -> Client:
    """A client for the kubeconfig's current context."""
    config = (
        KubeConfig.from_dict(kubeconfig)
        if isinstance(kubeconfig, dict)
        else KubeConfig.from_file(str(kubeconfig))
    )
    return Client(
        config, timeout=httpx2.Timeout(timeout), field_manager="nodesmith", trust_env=False
    )


def status_code(exc: ApiError) -> int:
    return int(exc.status.code or 0)


class Api:
    """One API server, with each write counted (``writes[(verb, resource)]``)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.writes: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def _count(self, verb: str, res: Any) -> None:
        with self._lock:
            self.writes[(verb, res._api_info.plural)] += 1
        _local.writes = thread_writes() + 1

    def _written(self, verb: str, res: Any) -> None:
        """Fault injection for the restart tests (``NODESMITH_FAULT_EXIT_AFTER=verb:resource:N``):
        the process dies at once after its N-th such write, as a crash or SIGKILL would leave
        it, between two writes of one reconcile. Unset in every real run."""
        fault = os.environ.get("NODESMITH_FAULT_EXIT_AFTER")
        if not fault:
            return
        want_verb, want_res, count = fault.split(":")
        if (verb, res._api_info.plural) == (want_verb, want_res):
            with self._lock:
                done = sum(n for (v, r), n in self.writes.items() if (v, r) == (verb, want_res))
            if done >= int(count):
                os._exit(70)

    def get(self, res: Any, name: str, namespace: str | None = None) -> Obj | None:
        """The object, or None when it does not exist."""
        try:
            return dict(self.client.get(res, name, namespace=namespace))
        except ApiError as exc:
            if status_code(exc) == 404:
                return None
            raise

    def create(self, res: Any, obj: Obj) -> Obj:
        """Create; raises ``ApiError`` 409 when it exists already."""
        self._count("create", res)
        created = dict(self.client.create(res(obj)))
        self._written("create", res)
        return created

    def merge_patch(
        self, res: Any, name: str, namespace: str | None, patch: Obj, status: bool = False
    ) -> Obj:
        self._count("patch-status" if status else "patch", res)
        target = res.Status if status else res
        return dict(
            self.client.patch(target, name, patch, namespace=namespace, patch_type=PatchType.MERGE)
        )

    def replace(self, res: Any, obj: Obj) -> Obj:
        """Update with the object's resourceVersion: 409 when someone else wrote first."""
        self._count("update", res)
        return dict(self.client.replace(res(obj)))

    def delete(self, res: Any, name: str, namespace: str | None = None) -> None:
        self._count("delete", res)
        try:
            self.client.delete(res, name, namespace=namespace)
        except ApiError as exc:
            if status_code(exc) != 404:
                raise

    def total_writes(self) -> int:
        with self._lock:
            return sum(self.writes.values())


def yaml_kubeconfig(raw: bytes) -> dict[str, Any]:
    """A kubeconfig from a ``<cluster>-kubeconfig`` Secret's ``value``."""
    import yaml

    doc = yaml.safe_load(raw)
    if not isinstance(doc, dict):
        raise ValueError("the kubeconfig is not a mapping")
    return doc
