"""CABPK's init lock on a management cluster: the ConfigMap ``<cluster>-lock``.

Creating an object is atomic, so of the control planes of a Cluster that is not initialized
exactly one creates the ConfigMap and runs ``kubeadm init``; the others see it exists and wait.
The ConfigMap names its holder (``lock-information: {"machineName": ...}``, CABPK's format) and
is owned by the Cluster, so it goes with it. A lock whose holder Machine is gone (deleted
mid-init) is broken, as CABPK breaks it; once the Cluster is initialized the lock is deleted.

This is the controller's :class:`~bootstrap.render.decide.InitLock`; ``decide.role`` takes it.
"""

from __future__ import annotations

import json

from lightkube import ApiError

from bootstrap.controller import kube
from bootstrap.controller.scope import Cache
from bootstrap.render.objects import CLUSTER_NAME_LABEL, Cluster, Machine

LOCK_KEY = "lock-information"  # CABPK's init-lock ConfigMap key


def lock_name(cluster: Cluster) -> str:
    return f"{cluster.name}-lock"


class ConfigMapLock:
    """The init lock of ``api``'s clusters; ``machines`` tells whether a holder still exists."""

    def __init__(self, api: kube.Api, machines: Cache) -> None:
        self.api = api
        self.machines = machines

    def initialized(self, cluster: Cluster) -> bool:
        return False  # only the Cluster's status says so on a management cluster

    def acquire(self, cluster: Cluster, machine: Machine) -> str:
        namespace = cluster.ref.namespace
        lock = {
            "metadata": {
                "name": lock_name(cluster),
                "namespace": namespace,
                "labels": {CLUSTER_NAME_LABEL: cluster.name},
                "ownerReferences": [
                    {
                        "apiVersion": cluster.api_version,
                        "kind": "Cluster",
                        "name": cluster.name,
                        "uid": cluster.uid,
                    }
                ],
            },
            "data": {LOCK_KEY: json.dumps({"machineName": machine.name})},
        }
        for _ in range(2):
            try:
                self.api.create(kube.ConfigMap, lock)
                return machine.name
            except ApiError as exc:
                if kube.status_code(exc) != 409:
                    raise
            held = self.api.get(kube.ConfigMap, lock_name(cluster), namespace)
            if held is None:
                continue  # released between our create and get: try again
            holder = _holder(held)
            if holder and self.machines.get(namespace, holder) is not None:
                return holder
            # the holder is gone (deleted mid-init): CABPK breaks the stale lock too
            self.api.delete(kube.ConfigMap, lock_name(cluster), namespace)
        return ""

    def release(self, cluster: Cluster) -> None:
        namespace = cluster.ref.namespace
        if self.api.get(kube.ConfigMap, lock_name(cluster), namespace) is not None:
            self.api.delete(kube.ConfigMap, lock_name(cluster), namespace)


def _holder(config_map: dict[str, object]) -> str:
    """The holder CABPK's format names, or '' for a lock nobody can read (broken as stale)."""
    data = config_map.get("data")
    raw = data.get(LOCK_KEY) if isinstance(data, dict) else None
    try:
        info = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return ""
    name = info.get("machineName") if isinstance(info, dict) else None
    return name if isinstance(name, str) else ""
