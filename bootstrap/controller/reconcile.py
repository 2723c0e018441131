"""One reconcile of one KubeadmConfig: a switch over its typed scope, as CABPK's.

1. the config, its owner Machine and that Machine's Cluster (``scope``); a config owned by no
   Machine is ignored (CABPK ignores it too), a paused Cluster or config is skipped;
2. a terminal failure stays until the spec (or an input) changes: nothing is retried blindly;
3. a config with its data Secret is done, except for keeping its bootstrap token alive until
   the Machine has a Node (``workload``);
4. the Cluster's infrastructure must be ready; a data Secret that is ours already (an earlier
   run stopped before its status) is adopted;
5. plan and decide, exactly as ``nodesmith render`` does (``render.pipeline.plan_for``,
   ``render.decide``): the role under the ``<cluster>-lock`` ConfigMap (``initlock``), the
   CAs looked up or, for an init, generated and created owned by the config (``store``);
6. render; the generated bootstrap token is created in the workload cluster; the data Secret;
7. the status, computed once from what happened and written once, only when it differs from
   what is there, and only over the copy it was computed from (resourceVersion): a concurrent
   write makes it a 409 and a retry.

Failures are classified by what they mean: :class:`~bootstrap.errors.TerminalError` (the input
is wrong) sets ``failureReason``/``failureMessage`` and a False condition with severity Error,
and is not requeued; :class:`~bootstrap.errors.TransientError` (not there yet) sets a False
condition and requeues with backoff; an API error is transient too (the API server may be
restarting), and is retried without touching the status.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from lightkube import ApiError

from bootstrap.controller import kube, scope, status
from bootstrap.controller.initlock import ConfigMapLock
from bootstrap.controller.reports import Credentials
from bootstrap.controller.scope import Caches, Key, Scope
from bootstrap.controller.store import TOKEN_ID_ANNOTATION, SecretStore
from bootstrap.controller.workload import Workloads
from bootstrap.errors import NodesmithError, TerminalError, TransientError
from bootstrap.render.decide import decide
from bootstrap.render.objects import Cluster, parse_stored
from bootstrap.render.pipeline import plan_for, render_machine
from bootstrap.render.result import RenderOptions, StatusReport

Obj = dict[str, Any]

__all__ = ["Caches", "Outcome", "Reconciler", "Settings"]


@dataclass
class Outcome:
    """What one reconcile did: ``result`` is ready | waiting | failed | ignored | retry."""

    result: str
    reason: str
    requeue_after: float | None = None  # seconds; None: wait for an event
    backoff: bool = False  # requeue with the key's exponential backoff instead
    waiting_on: list[Key] = field(default_factory=list)  # Secrets whose arrival may unblock it
    status: Obj | None = field(default=None, repr=False)  # the status to write, if any


@dataclass
class Settings:
    token_ttl: timedelta = timedelta(minutes=15)
    report_url: str | None = None  # where nodes report their phases (reports.py)
    report_ttl: timedelta = timedelta(hours=4)  # how long a node's report credential lasts
    report_ca: str | None = None  # the CA nodes trust for the endpoint (PEM); None: their store
    credentials: Credentials | None = None


class Reconciler:
    """Reconciles KubeadmConfigs against the management API ``api`` with ``caches``."""

    def __init__(self, api: kube.Api, caches: Caches, settings: Settings) -> None:
        self.api = api
        self.caches = caches
        self.settings = settings
        self.workloads = Workloads(caches.secrets)
        self.secrets = SecretStore(api, caches.secrets)
        self.lock = ConfigMapLock(api, caches.machines)
        self.inputs_changed: set[Key] = set()
        self._lock = threading.Lock()

    def mark_inputs_changed(self, key: Key) -> None:
        """An input of ``key`` changed (its Machine, Cluster or a Secret it waited for): a
        latched terminal failure is judged again."""
        with self._lock:
            self.inputs_changed.add(key)

    def _take_inputs_changed(self, key: Key) -> bool:
        with self._lock:
            if key in self.inputs_changed:
                self.inputs_changed.discard(key)
                return True
            return False

    # ------------------------------------------------------------------ the switch

    def reconcile(self, key: Key) -> Outcome:
        inputs_changed = self._take_inputs_changed(key)
        try:
            found = scope.load(self.caches, key)
        except NodesmithError as exc:  # metadata the API server should never have let by
            return Outcome("ignored", exc.reason)
        if isinstance(found, str):
            return Outcome("ignored", found)
        try:
            outcome = self._outcome(found, inputs_changed)
            if outcome.status is not None:
                self._write_status(found, outcome.status)
            return outcome
        except ApiError as exc:  # the API refused or is restarting: retry on a fresh copy
            if inputs_changed:  # still true for the retry: a latched failure is re-judged
                self.mark_inputs_changed(key)
            return Outcome("retry", f"APIError{kube.status_code(exc)}", backoff=True)

    def _outcome(self, sc: Scope, inputs_changed: bool) -> Outcome:
        """What to do and which status to write; raises only ``ApiError``."""
        generation = sc.stored.generation
        try:
            settled = self._settled(sc, inputs_changed)
            if settled is not None:
                return settled
            cluster = scope.cluster(sc, self.caches.clusters)
            if not cluster.infrastructure_ready:
                raise TransientError(
                    "the Cluster's infrastructure is not ready yet",
                    obj=cluster.ref,
                    field="status.infrastructureReady",
                    reason="WaitingForClusterInfrastructure",
                )
            if self.secrets.data_secret(sc) is not None:
                # Written already (an earlier run stopped before its status, or our cache lags
                # our own write): adopt it. Rendering again would mint a second token.
                return self._ready(sc, "DataSecretAdopted")
            return self._render(sc, cluster)
        except TerminalError as exc:
            return Outcome(
                "failed", exc.reason, status=status.not_ready(sc.status, generation, exc)
            )
        except TransientError as exc:
            return Outcome(
                "waiting",
                exc.reason,
                backoff=True,
                waiting_on=scope.waiting_on(sc, self.caches.secrets),
                status=status.not_ready(sc.status, generation, exc),
            )

    def _settled(self, sc: Scope, inputs_changed: bool) -> Outcome | None:
        """What is decided before the inputs are validated in full, from the facts the API
        server guarantees: a paused Cluster (or config) is left alone, a latched terminal
        failure stays, a config with its data Secret only keeps its token alive. A Cluster
        edited into something nodesmith would refuse must not fail a config that is paused
        or done. None: judge it in full (a missing Cluster, too, which that judges)."""
        cluster_name = sc.machine_stored.cluster_name
        cluster_doc = self.caches.clusters.get(sc.namespace, cluster_name) if cluster_name else None
        if cluster_doc is None:
            return None
        if parse_stored(cluster_doc).paused or sc.stored.paused:
            return Outcome("ignored", "Paused")
        if sc.stored.latched_failure and not inputs_changed:
            return Outcome("failed", str(sc.stored.failure_reason))
        if sc.stored.ready and sc.stored.data_secret_name:
            secret = self.caches.secrets.get(sc.namespace, sc.stored.data_secret_name)
            if secret is not None:
                return self._keep_token(sc, str(cluster_name), secret)
        return None

    def _render(self, sc: Scope, cluster: Cluster) -> Outcome:
        """Plan, decide and render as ``nodesmith render`` does; store what it made."""
        sc.bundle.add(self.secrets.inputs(sc, cluster))
        ctx = sc.context()
        options = RenderOptions(
            token_ttl=self.settings.token_ttl,
            status_report=self._status_report(sc.namespace, sc.machine_name),
        )
        plan = plan_for(ctx, options)
        decision = decide(ctx, self.lock, options.clock())
        if decision.generated:
            self.secrets.create_cas(sc, decision.generated)
        result = render_machine(plan, decision)
        if result.bootstrap_token_secret is not None:
            self.workloads.create_token(sc.namespace, cluster.name, result.bootstrap_token_secret)
        self.secrets.store_data(sc, result)
        refresh = (
            self.settings.token_ttl.total_seconds() / 3
            if result.bootstrap_token_secret is not None
            else None
        )
        return self._ready(sc, "DataSecretAvailable", refresh)

    def _ready(self, sc: Scope, reason: str, requeue_after: float | None = None) -> Outcome:
        desired = status.ready(sc.status, sc.stored.generation, sc.name)
        return Outcome("ready", reason, requeue_after=requeue_after, status=desired)

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

    def _keep_token(self, sc: Scope, cluster: str, secret: Obj) -> Outcome:
        """A written config: keep its token alive while the Machine has no Node (CABPK)."""
        token = parse_token_id(secret)
        if not token:
            return Outcome("ready", "Unchanged")
        if sc.machine_stored.has_node:
            return Outcome("ready", "NodeJoined")  # let the token expire
        reason, after = self.workloads.keep_alive(
            sc.namespace, cluster, token, self.settings.token_ttl
        )
        return Outcome("ready", reason, requeue_after=after)

    # ------------------------------------------------------------------ the one write

    def _write_status(self, sc: Scope, desired: Obj) -> None:
        change = status.patch(sc.stored_status, desired)
        if change is None:
            return
        # Guarded by the resourceVersion this status was computed from: the conditions list is
        # replaced whole, so a write from a stale cache would drop what a node's report (or
        # another replica) recorded since. A 409 retries on a fresher copy.
        self.api.merge_patch(
            kube.KubeadmConfig,
            sc.name,
            sc.namespace,
            {"metadata": {"resourceVersion": sc.stored.resource_version}, "status": change},
            status=True,
        )


def parse_token_id(secret: Obj) -> str:
    """The bootstrap token id a data Secret was written with ('' for none)."""
    return parse_stored(secret).annotations.get(TOKEN_ID_ANNOTATION, "")
