"""TEST DOUBLE: an in-memory Kubernetes API (``FakeApi``) and caches that see it at once.

It stands in for a management (or workload) API server in the controller's table tests,
which judge reconcile decisions in milliseconds. It keeps what the reconciler relies on and
nothing else: objects by (resource, namespace, name), a uid and a resourceVersion on each,
409 on a create of an existing object and on a write carrying a stale resourceVersion, 404 as
None from ``get``, writes counted as ``kube.Api`` counts them. What it cannot prove (RBAC, CRD
schemas, watches, a restarting server) the real API servers of ``tests/controller`` prove.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from lightkube import ApiError
from lightkube.models.meta_v1 import Status

from bootstrap.controller import kube
from bootstrap.controller.scope import Caches

Obj = dict[str, Any]

_uids = itertools.count(1)


def api_error(code: int, message: str) -> ApiError:
    return ApiError(status=Status(code=code, message=message))


def _plural(res: Any) -> str:
    return str(res._api_info.plural)


def _merge(target: Obj, patch: Obj) -> None:
    """RFC 7386 merge patch: null deletes, mappings merge, anything else replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            if not isinstance(target.get(key), dict):
                target[key] = {}
            _merge(target[key], value)  # a new mapping's nulls are dropped too
        else:
            target[key] = copy.deepcopy(value)


class FakeApi(kube.Api):
    """TEST DOUBLE of :class:`bootstrap.controller.kube.Api`, in memory."""

    def __init__(self) -> None:
        super().__init__(client=None)  # type: ignore[arg-type]
        self.objects: dict[tuple[str, str, str], Obj] = {}
        self._versions = itertools.count(1)
        self.fail_next: dict[tuple[str, str], ApiError] = {}  # (verb, plural) -> error once

    def _key(self, res: Any, namespace: str | None, name: str) -> tuple[str, str, str]:
        return (_plural(res), namespace or "", name)

    def _injected(self, verb: str, res: Any) -> None:
        error = self.fail_next.pop((verb, _plural(res)), None)
        if error is not None:
            raise error

    def put(self, res: Any, obj: Obj) -> Obj:
        """Store ``obj`` as a test's given state (not counted as a controller write)."""
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", "default")
        meta.setdefault("uid", f"uid-{next(_uids)}")
        meta.setdefault("generation", 1)
        meta["resourceVersion"] = str(next(self._versions))
        self.objects[self._key(res, meta["namespace"], meta["name"])] = obj
        return copy.deepcopy(obj)

    def get(self, res: Any, name: str, namespace: str | None = None) -> Obj | None:
        self._injected("get", res)
        found = self.objects.get(self._key(res, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def create(self, res: Any, obj: Obj) -> Obj:
        self._count("create", res)
        self._injected("create", res)
        meta = obj.get("metadata") or {}
        key = self._key(res, meta.get("namespace", "default"), meta["name"])
        if key in self.objects:
            raise api_error(409, f"{key} already exists")
        return self.put(res, obj)

    def merge_patch(
        self, res: Any, name: str, namespace: str | None, patch: Obj, status: bool = False
    ) -> Obj:
        self._count("patch-status" if status else "patch", res)
        self._injected("patch-status" if status else "patch", res)
        key = self._key(res, namespace, name)
        if key not in self.objects:
            raise api_error(404, f"{key} not found")
        current = self.objects[key]
        patch = copy.deepcopy(patch)
        wanted = (patch.get("metadata") or {}).pop("resourceVersion", None)
        if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
            raise api_error(409, f"{key} was modified")
        if status:
            patch = {"status": patch.get("status")}
        _merge(current, patch)
        current["metadata"]["resourceVersion"] = str(next(self._versions))
        return copy.deepcopy(current)

    def replace(self, res: Any, obj: Obj) -> Obj:
        self._count("update", res)
        meta = obj["metadata"]
        key = self._key(res, meta.get("namespace"), meta["name"])
        if key not in self.objects:
            raise api_error(404, f"{key} not found")
        if meta.get("resourceVersion") != self.objects[key]["metadata"]["resourceVersion"]:
            raise api_error(409, f"{key} was modified")
        return self.put(res, obj)

    def delete(self, res: Any, name: str, namespace: str | None = None) -> None:
        self._count("delete", res)
        self.objects.pop(self._key(res, namespace, name), None)

    def of(self, res: Any, namespace: str) -> list[Obj]:
        """Every stored object of ``res`` in ``namespace``."""
        plural = _plural(res)
        return [
            copy.deepcopy(o)
            for (p, ns, _), o in self.objects.items()
            if (p, ns) == (plural, namespace)
        ]


class FakeCache:
    """TEST DOUBLE of an informer's cache: the fake API's objects, always in sync."""

    def __init__(self, api: FakeApi, res: Any) -> None:
        self.api = api
        self.plural = _plural(res)

    def get(self, namespace: str, name: str) -> Obj | None:
        found = self.api.objects.get((self.plural, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def items(self) -> list[Obj]:
        return [copy.deepcopy(o) for (p, _, _), o in self.api.objects.items() if p == self.plural]


def fake_caches(api: FakeApi) -> Caches:
    return Caches(
        configs=FakeCache(api, kube.KubeadmConfig),
        machines=FakeCache(api, kube.Machine),
        clusters=FakeCache(api, kube.Cluster),
        secrets=FakeCache(api, kube.Secret),
    )
