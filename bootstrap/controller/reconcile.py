"""One reconcile of one KubeadmConfig: decide, render through the shared pipeline, write, report.

The order, as CABPK's:

1. the config, its owner Machine and that Machine's Cluster, from the caches; a config owned
   by no Machine is ignored (CABPK ignores it too), a paused Cluster is skipped;
2. a terminal failure stays until the spec (or an input) changes: nothing is retried blindly;
3. a config with its data Secret is done, except for keeping its bootstrap token alive until
   the Machine has a Node;
4. the Cluster's infrastructure must be ready; then the role: a control plane inits only while
   the Cluster is not ControlPlaneInitialized and only holding the ``<cluster>-lock`` ConfigMap
   (create is atomic: exactly one Machine wins), later control planes join, workers wait for
   the initialized control plane;
5. the CAs: an init looks them up or generates and creates them (owned by its config); a
   control-plane join only looks them up;
6. render (the same pipeline as ``nodesmith render``); the generated bootstrap token is created
   in the workload cluster reached through ``<cluster>-kubeconfig``; then the data Secret;
7. the status, written only when it differs from what is there, and only over the copy it was
   computed from (resourceVersion): a concurrent write makes it a 409 and a retry.

Failures are classified by what they mean: :class:`~bootstrap.errors.TerminalError` (the input
is wrong) sets ``failureReason``/``failureMessage`` and a False condition with severity Error,
and is not requeued; :class:`~bootstrap.errors.TransientError` (not there yet) sets a False
condition and requeues with backoff; an API error is transient too (the API server may be
restarting), and is retried without touching the status.
"""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from lightkube import ApiError

from bootstrap.controller import kube, status
from bootstrap.controller.informer import Informer, Key
from bootstrap.controller.reports import Credentials
from bootstrap.errors import NodesmithError, TerminalError, TransientError, show_value
from bootstrap.render import pki
from bootstrap.render.objects import CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL
from bootstrap.render.outputs import bootstrap_secret
from bootstrap.render.pipeline import render_machine
from bootstrap.render.resolve import Bundle
from bootstrap.render.result import RenderOptions, RenderResult, StatusReport
from bootstrap.render.tokens import rfc3339

Obj = dict[str, Any]

TOKEN_ID_ANNOTATION = "bootstrap.nodesmith.dev/token-id"
LOCK_KEY = "lock-information"  # CABPK's init-lock ConfigMap key
PAUSED_ANNOTATION = "cluster.x-k8s.io/paused"
CONFIG_API_VERSION = f"{kube.GROUP}/v1beta1"


@dataclass
class Outcome:
    """What one reconcile did: ``result`` is ready | waiting | failed | ignored | retry."""

    result: str
    reason: str
    requeue_after: float | None = None  # seconds; None: wait for an event
    backoff: bool = False  # requeue with the key's exponential backoff instead
    waiting_on: list[Key] = field(default_factory=list)  # Secrets whose arrival may unblock it


@dataclass
class Caches:
    configs: Informer
    machines: Informer
    clusters: Informer
    secrets: Informer


@dataclass
class Settings:
    token_ttl: timedelta = timedelta(minutes=15)
    report_url: str | None = None  # where nodes report their phases (reports.py)
    report_ttl: timedelta = timedelta(hours=4)  # how long a node's report credential lasts
    report_ca: str | None = None  # the CA nodes trust for the endpoint (PEM); None: their store
    credentials: Credentials | None = None


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def machine_owner(config: Obj) -> str | None:
    """The name of the Machine owning ``config`` (CABPK's ``GetOwnerByRef`` on Machine kind)."""
    for ref in _meta(config).get("ownerReferences") or []:
        if (
            isinstance(ref, dict)
            and ref.get("kind") == "Machine"
            and str(ref.get("apiVersion", "")).startswith("cluster.x-k8s.io/")
        ):
            return str(ref.get("name"))
    return None


def is_initialized(cluster: Obj) -> bool:
    st = cluster.get("status") or {}
    if (st.get("initialization") or {}).get("controlPlaneInitialized") is True:
        return True
    if st.get("controlPlaneInitialized") is True:
        return True
    return any(
        c.get("type") == "ControlPlaneInitialized" and c.get("status") == "True"
        for c in st.get("conditions") or []
        if isinstance(c, dict)
    )


def infrastructure_ready(cluster: Obj) -> bool:
    st = cluster.get("status") or {}
    return bool(
        st.get("infrastructureReady")
        or (st.get("initialization") or {}).get("infrastructureProvisioned")
    )


def paused(cluster: Obj, config: Obj) -> bool:
    return bool((cluster.get("spec") or {}).get("paused")) or any(
        PAUSED_ANNOTATION in (_meta(o).get("annotations") or {}) for o in (cluster, config)
    )


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


def _owner_ref(config: Obj) -> Obj:
    meta = _meta(config)
    return {
        "apiVersion": config.get("apiVersion", CONFIG_API_VERSION),
        "kind": "KubeadmConfig",
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _parse_time(text: str) -> datetime | None:
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None


class Workloads:
    """API clients for workload clusters, from their ``<cluster>-kubeconfig`` Secrets."""

    def __init__(self, secrets: Informer) -> None:
        self.secrets = secrets
        self._clients: dict[tuple[str, str, str], kube.Api] = {}
        self._lock = threading.Lock()
        self.writes: list[kube.Api] = []

    def api(self, namespace: str, cluster: str) -> kube.Api | None:
        secret = self.secrets.get(namespace, f"{cluster}-kubeconfig")
        if secret is None:
            return None
        version = str(_meta(secret).get("resourceVersion", ""))
        key = (namespace, cluster, version)
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


class Reconciler:
    """Reconciles KubeadmConfigs against the management API ``api`` with ``caches``."""

    def __init__(self, api: kube.Api, caches: Caches, settings: Settings) -> None:
        self.api = api
        self.caches = caches
        self.settings = settings
        self.workloads = Workloads(caches.secrets)
        self.inputs_changed: set[Key] = set()
        self._lock = threading.Lock()

    def mark_inputs_changed(self, key: Key) -> None:
        with self._lock:
            self.inputs_changed.add(key)

    def _take_inputs_changed(self, key: Key) -> bool:
        with self._lock:
            if key in self.inputs_changed:
                self.inputs_changed.discard(key)
                return True
            return False

    # ------------------------------------------------------------------ entry point

    def reconcile(self, key: Key) -> Outcome:
        namespace, name = key
        config = self.caches.configs.get(namespace, name)
        inputs_changed = self._take_inputs_changed(key)
        if config is None:
            return Outcome("ignored", "NotFound")  # deleted: its Secret goes with its ownerRef
        owner = machine_owner(config)
        if owner is None:
            return Outcome("ignored", "NoMachineOwner")  # as CABPK: not ours to act on yet
        machine = self.caches.machines.get(namespace, owner)
        if machine is None:
            return Outcome("ignored", "MachineNotFound")  # its watch event brings us back
        try:
            return self._decide(config, machine, inputs_changed)
        except ApiError as exc:  # the API refused or is restarting: retry on a fresh copy
            if inputs_changed:  # still true for the retry: a latched failure is re-judged
                self.mark_inputs_changed(key)
            return Outcome("retry", f"APIError{kube.status_code(exc)}", backoff=True)

    def _decide(self, config: Obj, machine: Obj, inputs_changed: bool) -> Outcome:
        namespace = str(_meta(config).get("namespace"))
        st = config.get("status") or {}
        generation = _meta(config).get("generation")
        try:
            cluster = self._cluster(config, machine)
            if paused(cluster, config):
                return Outcome("ignored", "Paused")
            latched = st.get("failureReason") and st.get("observedGeneration") == generation
            if latched and not inputs_changed:
                return Outcome("failed", str(st.get("failureReason")))
            if st.get("ready") and st.get("dataSecretName"):
                secret = self.caches.secrets.get(namespace, str(st["dataSecretName"]))
                if secret is not None:
                    return self._keep_token(cluster, machine, secret)
            if not infrastructure_ready(cluster):
                raise TransientError(
                    "the Cluster's infrastructure is not ready yet",
                    obj=f"Cluster {namespace}/{_meta(cluster).get('name')}",
                    field="status.infrastructureReady",
                    reason="WaitingForClusterInfrastructure",
                )
            return self._render_and_store(config, machine, cluster)
        except TerminalError as exc:
            self._write_status(config, failure=exc)
            return Outcome("failed", exc.reason)
        except TransientError as exc:
            self._write_status(config, waiting=exc)
            return Outcome(
                "waiting",
                exc.reason,
                backoff=True,
                waiting_on=self._missing_secrets(config, machine),
            )

    # ------------------------------------------------------------------ inputs

    def _cluster(self, config: Obj, machine: Obj) -> Obj:
        namespace = str(_meta(config).get("namespace"))
        name = (machine.get("spec") or {}).get("clusterName") or (
            _meta(machine).get("labels") or {}
        ).get(CLUSTER_NAME_LABEL)
        if not isinstance(name, str) or not name:
            raise TerminalError(
                "is empty: the Machine names no Cluster",
                obj=f"Machine {namespace}/{_meta(machine).get('name')}",
                field="spec.clusterName",
                reason="InvalidMachine",
            )
        cluster = self.caches.clusters.get(namespace, name)
        if cluster is not None:
            return cluster
        elsewhere = sorted(
            str(_meta(c).get("namespace"))
            for c in self.caches.clusters.items()
            if _meta(c).get("name") == name
        )
        if elsewhere:
            raise TerminalError(
                f"names Cluster {show_value(name)}, which is not in namespace "
                f"{show_value(namespace)} (found in {', '.join(elsewhere)}); a Machine's Cluster "
                "must be in its own namespace",
                obj=f"Machine {namespace}/{_meta(machine).get('name')}",
                field="spec.clusterName",
                reason="ClusterInOtherNamespace",
            )
        raise TransientError(
            f"Cluster {namespace}/{name} does not exist yet",
            obj=f"Machine {namespace}/{_meta(machine).get('name')}",
            field="spec.clusterName",
            reason="WaitingForCluster",
        )

    def _referenced(self, config: Obj, cluster_name: str) -> set[str]:
        names = _strings(config.get("spec") or {}, set())
        names.update(f"{cluster_name}-{s}" for s in pki.SECRET_SUFFIXES.values())
        return names

    def _missing_secrets(self, config: Obj, machine: Obj) -> list[Key]:
        """The Secrets this config may be waiting for: any name its spec mentions, the
        cluster's CAs and its kubeconfig (the workload cluster's way in)."""
        namespace = str(_meta(config).get("namespace"))
        cluster = str((machine.get("spec") or {}).get("clusterName") or "")
        names = self._referenced(config, cluster) | {f"{cluster}-kubeconfig"}
        return [
            (namespace, n)
            for n in names
            if 0 < len(n) <= 253 and self.caches.secrets.get(namespace, n) is None
        ]

    # ------------------------------------------------------------------ the init lock

    def _lock_name(self, cluster: Obj) -> str:
        return f"{_meta(cluster).get('name')}-lock"

    def _acquire_init_lock(self, cluster: Obj, machine: str) -> str:
        """Take ``<cluster>-lock`` for ``machine``; returns the Machine holding it."""
        namespace = str(_meta(cluster).get("namespace"))
        lock = {
            "metadata": {
                "name": self._lock_name(cluster),
                "namespace": namespace,
                "labels": {CLUSTER_NAME_LABEL: str(_meta(cluster).get("name"))},
                "ownerReferences": [
                    {
                        "apiVersion": cluster.get("apiVersion"),
                        "kind": "Cluster",
                        "name": _meta(cluster).get("name"),
                        "uid": _meta(cluster).get("uid"),
                    }
                ],
            },
            "data": {LOCK_KEY: json.dumps({"machineName": machine})},
        }
        for _ in range(2):
            try:
                self.api.create(kube.ConfigMap, lock)
                return machine
            except ApiError as exc:
                if kube.status_code(exc) != 409:
                    raise
            held = self.api.get(kube.ConfigMap, self._lock_name(cluster), namespace)
            if held is None:
                continue  # released between our create and get: try again
            try:
                holder = str(json.loads((held.get("data") or {})[LOCK_KEY])["machineName"])
            except (KeyError, ValueError, TypeError):
                holder = ""
            if holder and self.caches.machines.get(namespace, holder) is not None:
                return holder
            # the holder is gone (deleted mid-init): CABPK breaks the stale lock too
            self.api.delete(kube.ConfigMap, self._lock_name(cluster), namespace)
        return ""

    def _release_init_lock(self, cluster: Obj) -> None:
        namespace = str(_meta(cluster).get("namespace"))
        if self.api.get(kube.ConfigMap, self._lock_name(cluster), namespace) is not None:
            self.api.delete(kube.ConfigMap, self._lock_name(cluster), namespace)

    # ------------------------------------------------------------------ CAs

    def _ensure_cas(self, config: Obj, cluster: Obj) -> None:
        """Look up the four CA Secrets; generate and create the missing ones (init only)."""
        namespace = str(_meta(cluster).get("namespace"))
        cluster_name = str(_meta(cluster).get("name"))
        missing = [
            kind
            for kind, suffix in pki.SECRET_SUFFIXES.items()
            if self.caches.secrets.get(namespace, f"{cluster_name}-{suffix}") is None
            and self.api.get(kube.Secret, f"{cluster_name}-{suffix}", namespace) is None
        ]
        if not missing:
            return
        fresh = pki.generate_cluster_pki(cluster_name)
        wanted = {f"{cluster_name}-{pki.SECRET_SUFFIXES[k]}" for k in missing}
        for secret in pki.pki_secrets(cluster_name, namespace, fresh):
            if secret["metadata"]["name"] not in wanted:
                continue
            secret["metadata"]["ownerReferences"] = [_owner_ref(config)]
            try:
                self.api.create(kube.Secret, secret)
            except ApiError as exc:  # created by an earlier run or a rival: use theirs
                if kube.status_code(exc) != 409:
                    raise

    def _secrets_for(self, config: Obj, cluster_name: str) -> list[Obj]:
        namespace = str(_meta(config).get("namespace"))
        out = []
        for name in self._referenced(config, cluster_name):
            if not 0 < len(name) <= 253:
                continue
            secret = self.caches.secrets.get(namespace, name)
            if secret is None and name.startswith(cluster_name + "-"):
                secret = self.api.get(kube.Secret, name, namespace)  # just created: no event yet
            if secret is not None:
                out.append(secret)
        return out

    # ------------------------------------------------------------------ render and store

    def _render_and_store(self, config: Obj, machine: Obj, cluster: Obj) -> Outcome:
        namespace = str(_meta(config).get("namespace"))
        machine_name = str(_meta(machine).get("name"))
        cluster_name = str(_meta(cluster).get("name"))
        name = str(_meta(config).get("name"))
        # Written already (an earlier run stopped before its status, or our cache lags our own
        # write): adopt it. Rendering again would mint a second token for nothing.
        existing = self.caches.secrets.get(namespace, name) or self.api.get(
            kube.Secret, name, namespace
        )
        if existing is not None and self._owned(existing, config):
            self._write_status(config, ready_secret=name)
            return Outcome("ready", "DataSecretAdopted")
        control_plane = CONTROL_PLANE_LABEL in (_meta(machine).get("labels") or {})
        initialized = is_initialized(cluster)
        bundle_lock: str | None = None
        if control_plane and not initialized:
            holder = self._acquire_init_lock(cluster, machine_name)
            if holder != machine_name:
                raise TransientError(
                    f"the control plane is not initialized yet and Machine {namespace}/"
                    f"{holder or '?'} holds the init lock; this control plane joins after it",
                    obj=f"Cluster {namespace}/{cluster_name}",
                    field="status.conditions",
                    reason="WaitingForControlPlaneInitialized",
                )
            bundle_lock = machine_name
            self._ensure_cas(config, cluster)
        elif control_plane:
            self._release_init_lock(cluster)
        objects = [cluster, machine, config, *self._secrets_for(config, cluster_name)]
        bundle = Bundle(objects)
        if bundle_lock:
            bundle.init_lock[(namespace, cluster_name)] = bundle_lock
        options = RenderOptions(
            token_ttl=self.settings.token_ttl,
            status_report=self._status_report(namespace, machine_name),
        )
        result = render_machine(bundle, f"{namespace}/{machine_name}", options)
        if result.generated_secrets:  # the CAs were created above; never generate here
            raise TransientError(
                "the cluster CA Secrets are not visible yet",
                obj=f"Cluster {namespace}/{cluster_name}",
                reason="WaitingForCertificates",
            )
        if result.bootstrap_token_secret is not None:
            self._create_token(namespace, cluster_name, result.bootstrap_token_secret)
        self._store(config, result)
        return Outcome("ready", "DataSecretAvailable", requeue_after=self._refresh_period(result))

    def _status_report(self, namespace: str, machine: str) -> StatusReport | None:
        """The node's report endpoint and its credential for this Machine alone."""
        base, credentials = self.settings.report_url, self.settings.credentials
        if not base or credentials is None:
            return None
        ttl = self.settings.report_ttl.total_seconds()
        return StatusReport(
            url=f"{base.rstrip('/')}/v1/reports/{namespace}/{machine}",
            credential=credentials.issue(namespace, machine, ttl),
            ca=self.settings.report_ca,
        )

    def _refresh_period(self, result: RenderResult) -> float | None:
        if result.bootstrap_token_secret is None:
            return None
        return self.settings.token_ttl.total_seconds() / 3

    def _create_token(self, namespace: str, cluster: str, secret: Obj) -> None:
        workload = self.workloads.api(namespace, cluster)
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

    def _store(self, config: Obj, result: RenderResult) -> None:
        namespace = str(_meta(config).get("namespace"))
        name = str(_meta(config).get("name"))
        secret = bootstrap_secret(result)
        if result.bootstrap_token_secret is not None:
            token_name = str(result.bootstrap_token_secret["metadata"]["name"])
            secret["metadata"]["annotations"] = {
                TOKEN_ID_ANNOTATION: token_name.removeprefix("bootstrap-token-")
            }
        try:
            self.api.create(kube.Secret, secret)
        except ApiError as exc:
            if kube.status_code(exc) != 409:
                raise
            existing = self.api.get(kube.Secret, name, namespace)
            if existing is None:  # deleted between our create and get: try again
                raise TransientError(
                    f"Secret {namespace}/{name} came and went while being written",
                    obj=f"KubeadmConfig {namespace}/{name}",
                    reason="DataSecretRace",
                ) from None
            if not self._owned(existing, config):
                raise TerminalError(
                    f"Secret {namespace}/{name} exists and is not owned by this KubeadmConfig; "
                    "the data Secret must carry the config's name",
                    obj=f"KubeadmConfig {namespace}/{name}",
                    field="status.dataSecretName",
                    reason="DataSecretConflict",
                ) from None
            # written by an earlier run that stopped before its status: adopt it, no rewrite
        self._write_status(config, ready_secret=name)

    @staticmethod
    def _owned(secret: Obj, config: Obj) -> bool:
        owners = {r.get("uid") for r in _meta(secret).get("ownerReferences") or []}
        return _meta(config).get("uid") in owners

    # ------------------------------------------------------------------ the token

    def _keep_token(self, cluster: Obj, machine: Obj, secret: Obj) -> Outcome:
        """Push the token's expiration out while the Machine has no Node (CABPK)."""
        token = (_meta(secret).get("annotations") or {}).get(TOKEN_ID_ANNOTATION)
        if not token:
            return Outcome("ready", "Unchanged")
        if (machine.get("status") or {}).get("nodeRef"):
            return Outcome("ready", "NodeJoined")  # let the token expire
        namespace = str(_meta(cluster).get("namespace"))
        workload = self.workloads.api(namespace, str(_meta(cluster).get("name")))
        period = self.settings.token_ttl.total_seconds() / 3
        if workload is None:
            return Outcome("ready", "WorkloadUnreachable", requeue_after=period)
        ttl = self.settings.token_ttl
        try:
            current = workload.get(kube.Secret, f"bootstrap-token-{token}", "kube-system")
            if current is None:
                return Outcome("ready", "BootstrapTokenGone")
            raw = (current.get("data") or {}).get("expiration", "")
            expires = _parse_time(base64.b64decode(raw).decode()) if raw else None
            now = datetime.now(UTC)
            if expires is not None and expires - now > ttl * 5 / 6:
                return Outcome("ready", "Unchanged", requeue_after=period)
            new = rfc3339(now + ttl)
            workload.merge_patch(
                kube.Secret,
                f"bootstrap-token-{token}",
                "kube-system",
                {"data": {"expiration": base64.b64encode(new.encode()).decode()}},
            )
        except Exception:  # unreachable workload: try again at the next period
            return Outcome("ready", "WorkloadUnreachable", requeue_after=period)
        return Outcome("ready", "BootstrapTokenRefreshed", requeue_after=period)

    # ------------------------------------------------------------------ status

    def _write_status(
        self,
        config: Obj,
        *,
        ready_secret: str | None = None,
        failure: NodesmithError | None = None,
        waiting: NodesmithError | None = None,
    ) -> None:
        current = dict(config.get("status") or {})
        updates: list[Obj] = []
        desired: Obj = {"observedGeneration": _meta(config).get("generation")}
        if ready_secret is not None:
            desired |= {
                "ready": True,
                "dataSecretName": ready_secret,
                "failureReason": None,
                "failureMessage": None,
            }
            updates = [
                status.condition(status.DATA_SECRET_AVAILABLE, True),
                status.condition(status.CERTIFICATES_AVAILABLE, True),
            ]
        else:
            error = failure or waiting
            assert error is not None
            terminal = failure is not None
            message = str(error)
            if terminal:
                desired |= {"failureReason": error.reason, "failureMessage": message}
            else:
                desired |= {"failureReason": None, "failureMessage": None}
            certs = error.reason in ("InvalidSecret", "CANotFound", "WaitingForCertificates")
            updates = [
                status.condition(
                    status.CERTIFICATES_AVAILABLE if certs else status.DATA_SECRET_AVAILABLE,
                    False,
                    error.reason,
                    message,
                    terminal,
                )
            ]
        desired["conditions"] = status.merge_conditions(current.get("conditions") or [], updates)
        if not status.changed(current, desired):
            return
        meta = _meta(config)
        # Guarded by the resourceVersion this status was computed from: the conditions list is
        # replaced whole, so a write from a stale cache would drop what a node's report (or
        # another replica) recorded since. A 409 retries on a fresher copy.
        self.api.merge_patch(
            kube.KubeadmConfig,
            str(meta.get("name")),
            str(meta.get("namespace")),
            {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "status": desired},
            status=True,
        )
