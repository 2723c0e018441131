"""The workload cluster's side of a join: its bootstrap token, created and kept alive.

A worker (or a control-plane join) authenticates its ``kubeadm join`` with a bootstrap token
that must exist in the *workload* cluster, reached through the ``<cluster>-kubeconfig`` Secret
the control-plane provider writes. The token is created before the data Secret that carries
it; while the Machine has no Node its expiry is pushed out (CABPK's refresh), and once the
Node joined it is left to expire.
"""

from __future__ import annotations

import base64
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

from lightkube import ApiError

from bootstrap.controller import kube
from bootstrap.controller.scope import Cache
from bootstrap.errors import TransientError
from bootstrap.render.objects import parse_stored
from bootstrap.render.tokens import rfc3339

Obj = dict[str, Any]


def _parse_time(text: str) -> datetime | None:
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


class Workloads:
    """API clients for workload clusters, from their ``<cluster>-kubeconfig`` Secrets (one
    per Secret version: a rotated kubeconfig gets a new client)."""

    def __init__(self, secrets: Cache) -> None:
        self.secrets = secrets
        self._clients: dict[tuple[str, str, str], kube.Api] = {}
        self._lock = threading.Lock()
        self.writes: list[kube.Api] = []  # every client made, for the write metrics

    def api(self, namespace: str, cluster: str) -> kube.Api | None:
        secret = self.secrets.get(namespace, f"{cluster}-kubeconfig")
        if secret is None:
            return None
        key = (namespace, cluster, parse_stored(secret).resource_version or "")
        with self._lock:
            if key not in self._clients:
                raw = (secret.get("data") or {}).get("value")
                if not raw:
                    return None
                try:
                    config = kube.yaml_kubeconfig(base64.b64decode(raw))
                    self._clients[key] = kube.Api(kube.connect(config))
                except Exception as exc:  # its text may quote the key: name the type only
                    raise TransientError(
                        f"the Secret's value is not a usable kubeconfig ({type(exc).__name__})",
                        obj=f"Secret {namespace}/{cluster}-kubeconfig",
                        field="data[value]",
                        reason="InvalidWorkloadKubeconfig",
                    ) from None
                self.writes.append(self._clients[key])
            return self._clients[key]

    def create_token(self, namespace: str, cluster: str, secret: Obj) -> None:
        """Create the bootstrap token Secret in the workload cluster (transient until it is
        reachable and accepts it)."""
        workload = self.api(namespace, cluster)
        if workload is None:
            raise TransientError(
                f"the workload cluster is not reachable yet: no Secret {namespace}/"
                f"{cluster}-kubeconfig to create the bootstrap token with",
                obj=f"Cluster {namespace}/{cluster}",
                reason="WaitingForWorkloadCluster",
            )
        try:
            workload.create(kube.Secret, secret)
        except ApiError as exc:
            raise TransientError(
                f"the workload cluster refused the bootstrap token Secret "
                f"(HTTP {kube.status_code(exc)})",
                obj=f"Cluster {namespace}/{cluster}",
                reason="BootstrapTokenNotCreated",
            ) from None
        except Exception as exc:  # unreachable (connection refused, TLS, timeout)
            raise TransientError(
                f"the workload cluster is not reachable: {type(exc).__name__}",
                obj=f"Cluster {namespace}/{cluster}",
                reason="WaitingForWorkloadCluster",
            ) from None

    def keep_alive(
        self, namespace: str, cluster: str, token: str, ttl: timedelta
    ) -> tuple[str, float | None]:
        """Push token ``token``'s expiry out to ``ttl`` from now once less than 5/6 of it is
        left; returns what happened and when to look again."""
        period = ttl.total_seconds() / 3
        workload = self.api(namespace, cluster)
        if workload is None:
            return "WorkloadUnreachable", period
        try:
            current = workload.get(kube.Secret, f"bootstrap-token-{token}", "kube-system")
            if current is None:
                return "BootstrapTokenGone", None
            raw = (current.get("data") or {}).get("expiration", "")
            expires = _parse_time(base64.b64decode(raw).decode()) if raw else None
            now = datetime.now(UTC)
            if expires is not None and expires - now > ttl * 5 / 6:
                return "Unchanged", period
            new = rfc3339(now + ttl)
            workload.merge_patch(
                kube.Secret,
                f"bootstrap-token-{token}",
                "kube-system",
                {"data": {"expiration": base64.b64encode(new.encode()).decode()}},
            )
        except Exception:  # unreachable workload: try again at the next period
            return "WorkloadUnreachable", period
        return "BootstrapTokenRefreshed", period
