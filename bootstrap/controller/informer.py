"""A watched, in-memory copy of one resource: list, then watch, and list again after a break.

The reconciler reads only these caches, so a steady state costs the API server nothing but the
open watches. When a watch breaks (the API server restarted, the connection dropped, the
resourceVersion expired) the informer backs off, lists again, replaces its copy and reports
every object once more: reconciles are idempotent, so the replay costs reads, not writes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from lightkube import ALL_NS, Client

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace, name)
Handler = Callable[[str, Obj, Obj | None], None]  # (event type, object, previous copy)

log = logging.getLogger("nodesmith.controller")


def key_of(obj: Obj) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class Informer:
    """The objects of ``res`` in every namespace (or one), kept current by a watch thread."""

    def __init__(
        self, client: Client, res: Any, handler: Handler, name: str, namespace: str | None = None
    ) -> None:
        self.client = client
        self.namespace = namespace or ALL_NS  # one namespace (``--namespace``), or all
        self.res = res
        self.handler = handler
        self.name = name
        self._objects: dict[Key, Obj] = {}
        self._lock = threading.Lock()
        self.synced = threading.Event()
        self.relists = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"informer-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def get(self, namespace: str, name: str) -> Obj | None:
        with self._lock:
            return self._objects.get((namespace, name))

    def items(self) -> list[Obj]:
        with self._lock:
            return list(self._objects.values())

    def _apply(self, kind: str, obj: Obj) -> None:
        key = key_of(obj)
        with self._lock:
            old = self._objects.get(key)
            if kind == "DELETED":
                self._objects.pop(key, None)
            else:
                self._objects[key] = obj
        self.handler(kind, obj, old)

    def _list(self) -> str | None:
        listing = self.client.list(self.res, namespace=self.namespace, chunk_size=500)
        info = self.res._api_info.resource
        api_version = f"{info.group}/{info.version}" if info.group else info.version
        fresh: dict[Key, Obj] = {}
        for item in listing:  # a list's items carry no kind: the render pipeline needs it
            obj = dict(item)
            obj.setdefault("kind", info.kind)
            obj.setdefault("apiVersion", api_version)
            fresh[key_of(obj)] = obj
        with self._lock:
            gone = [o for k, o in self._objects.items() if k not in fresh]
            self._objects = fresh
        for obj in gone:
            self.handler("DELETED", obj, obj)
        for obj in fresh.values():
            self.handler("ADDED", obj, None)
        self.relists += 1
        return listing.resourceVersion

    def _run(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            try:
                version = self._list()
                self.synced.set()
                delay = 0.5
                for kind, obj in self.client.watch(
                    self.res, namespace=self.namespace, resource_version=version
                ):
                    if self._stop.is_set():
                        return
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        self._apply(kind, dict(obj))
            except Exception as exc:  # the watch broke: back off, list again
                log.warning(
                    "watch of %s broke (%s); listing again in %.1fs",
                    self.name,
                    type(exc).__name__,
                    delay,
                )
                self._stop.wait(delay)
                delay = min(delay * 2, 10.0)
