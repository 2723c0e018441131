"""The running controller: leader election, four informers, a work queue, workers, metrics.

Events map to the KubeadmConfigs they concern: a config's own change queues it; a Machine's
change queues its ``spec.bootstrap.configRef``; a Cluster's change queues the configs of its
Machines; a Secret's arrival queues the configs that were waiting for it (recorded when their
reconcile ended waiting). Status-only updates of a config (our own writes) queue nothing.

Each reconcile logs one JSON line (``bootstrap.log``'s schema, event ``reconcile``: config,
result, reason, milliseconds, writes, and ``requeue``: in how many seconds the config will be
looked at again without an event, null for never): never a token, key or userdata, since none
of them is ever put in an outcome.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from lightkube import ApiError

from bootstrap.controller import kube, migrate
from bootstrap.controller.informer import Informer, Key, key_of
from bootstrap.controller.leader import LeaderElector
from bootstrap.controller.metrics import Live, Metrics
from bootstrap.controller.reconcile import Caches, Outcome, Reconciler, Settings
from bootstrap.controller.reports import Credentials, ReportServer, load_key
from bootstrap.controller.workqueue import WorkQueue
from bootstrap.errors import NodesmithError
from bootstrap.log import log_event
from bootstrap.render.objects import Machine, parse_machine, parse_stored

log = logging.getLogger("nodesmith.controller")

Obj = dict[str, Any]

DRAIN_SECONDS = 20.0
EXIT_LOST_LEADERSHIP = 75  # EX_TEMPFAIL: restart me; another replica leads meanwhile


@dataclass
class Options:
    kubeconfig: Path | None = None
    namespace: str | None = None  # watch only this namespace (clusterctl's --namespace); None: all
    workers: int = 4
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 8080  # 0: no metrics endpoint
    leader_elect: bool = True
    lease_namespace: str = "default"
    lease_name: str = "nodesmith-controller"
    lease_duration: float = 15.0
    lease_renew: float = 5.0
    identity: str = ""
    token_ttl: timedelta = timedelta(minutes=15)
    backoff_base: float = 1.0
    backoff_cap: float = 300.0
    report_host: str = "0.0.0.0"
    report_port: int = 0  # 0: no report endpoint
    report_url: str | None = None  # the endpoint as nodes reach it
    report_ttl: timedelta = timedelta(hours=4)
    report_ca: str | None = None  # PEM the nodes trust for the endpoint; None: their store
    report_tls: tuple[str, str] | None = None  # (certificate, key) files
    webhook_host: str = "0.0.0.0"
    webhook_port: int = 0  # 0: no conversion webhook
    webhook_secret: str = "nodesmith-webhook-service-cert"  # in lease_namespace
    webhook_self_signed: bool = False  # make the Secret and inject its CA (no cert-manager)
    webhook_names: tuple[str, ...] = ()  # the serving certificate's names when made here
    webhook_reload: float = 60.0  # seconds between looks at the Secret for a renewal


def serve_webhook(api: kube.Api, options: Options) -> Any:
    """The conversion webhook of ``options`` (its certificate read, or made and injected)."""
    from bootstrap.controller import servingcert, webhook

    namespace, name = options.lease_namespace, options.webhook_secret
    if options.webhook_self_signed:
        cert = servingcert.ensure_self_signed(api, namespace, name, list(options.webhook_names))
        servingcert.inject(api, cert.ca)
    else:
        cert = servingcert.read(api, namespace, name)

    def renewed() -> servingcert.ServingCert:
        """The certificate as it is now; self-signed, its CA kept in the CRDs too (a
        ``kubectl replace`` of a CRD drops the caBundle the controller wrote)."""
        now = servingcert.read(api, namespace, name)
        if options.webhook_self_signed:
            servingcert.inject(api, now.ca)
        return now

    return webhook.serve(
        options.webhook_host, options.webhook_port, cert, renewed, options.webhook_reload
    )


def _machine(doc: Obj) -> Machine | None:
    """The Machine as the reconcile reads it; a malformed one maps to nothing (its config's
    own reconcile says what is wrong with it)."""
    try:
        return parse_machine(doc)
    except NodesmithError:
        return None


def _generation_same(new: Obj, old: Obj | None) -> bool:
    """True when only the status changed (our own write, or a node's report): the spec's
    generation, labels, annotations and owners are what a reconcile judges."""
    if old is None:
        return False
    try:
        n, o = parse_stored(new), parse_stored(old)
    except NodesmithError:
        return False  # reconcile it: its reconcile says what is wrong
    return (n.generation, n.labels, n.annotations, n.owners) == (
        o.generation,
        o.labels,
        o.annotations,
        o.owners,
    )


class Controller:
    def __init__(self, options: Options, client: Any = None) -> None:
        self.options = options
        if client is None and options.kubeconfig is not None:
            client = kube.connect(options.kubeconfig)
        if client is None:
            from lightkube import Client

            client = Client(field_manager="nodesmith")  # in-cluster ServiceAccount
        self.client = client
        self.api = kube.Api(client)
        self.queue = WorkQueue(options.backoff_base, options.backoff_cap)
        self.stop = threading.Event()
        self._elector_stop = threading.Event()  # renewals go on while the workers drain
        self._waiting: dict[Key, set[Key]] = {}  # Secret -> configs waiting for it
        self._waiting_lock = threading.Lock()
        ns = options.namespace
        self.informers = {
            "configs": Informer(client, kube.KubeadmConfig, self._on_config, "kubeadmconfigs", ns),
            "machines": Informer(client, kube.Machine, self._on_machine, "machines", ns),
            "clusters": Informer(client, kube.Cluster, self._on_cluster, "clusters", ns),
            "secrets": Informer(client, kube.Secret, self._on_secret, "secrets", ns),
        }
        caches = Caches(**self.informers)
        self.caches = caches
        self.reconciler = Reconciler(
            self.api,
            caches,
            Settings(
                token_ttl=options.token_ttl,
                report_url=options.report_url,
                report_ttl=options.report_ttl,
                report_ca=options.report_ca,
            ),
        )
        self.metrics = Metrics(
            Live(
                management=self.api,
                workloads=lambda: list(self.reconciler.workloads.writes),
                queue_depth=lambda: len(self.queue),
                leading=lambda: self.elector.leading.is_set(),
            )
        )
        identity = options.identity or f"{socket.gethostname()}_{os.getpid()}"
        # its own connection, timing out within the renew deadline: a hung renewal must not
        # outlive the leadership it is renewing
        elector_api = (
            kube.Api(kube.connect(options.kubeconfig, timeout=max(1.0, options.lease_renew)))
            if options.kubeconfig is not None
            else self.api
        )
        self.elector = LeaderElector(
            elector_api,
            options.lease_namespace,
            options.lease_name,
            identity,
            options.lease_duration,
            options.lease_renew,
        )

    # ------------------------------------------------------------------ event mapping

    def _on_config(self, kind: str, obj: Obj, old: Obj | None) -> None:
        if kind == "DELETED":
            return
        if kind == "MODIFIED" and _generation_same(obj, old):
            return  # a status write (ours, or a node report): nothing to reconcile
        self.queue.add(key_of(obj))

    def _on_machine(self, kind: str, obj: Obj, old: Obj | None) -> None:
        machine = _machine(obj)
        ref = machine.config_ref if machine is not None else None
        if machine is not None and ref is not None and ref.kind == "KubeadmConfig":
            key = (machine.ref.namespace, ref.name)
            self.reconciler.mark_inputs_changed(key)
            self.queue.add(key)

    def _on_cluster(self, kind: str, obj: Obj, old: Obj | None) -> None:
        """Queue the configs of the Cluster's Machines: those naming it by ``spec.clusterName``
        or by the ``cluster.x-k8s.io/cluster-name`` label, as the reconcile reads them."""
        namespace, name = key_of(obj)
        for doc in self.caches.machines.items():
            if key_of(doc)[0] != namespace:
                continue  # a Machine's Cluster is in its own namespace: no need to parse it
            try:  # the facts alone (what objects.Machine's cluster_name is computed from)
                named = parse_stored(doc).cluster_name
            except NodesmithError:
                continue
            if named == name:
                self._on_machine(kind, doc, None)

    def _on_secret(self, kind: str, obj: Obj, old: Obj | None) -> None:
        if kind == "DELETED":  # a config's data Secret gone: write it again
            namespace = key_of(obj)[0]
            owner = parse_stored(obj).controller_of_kind("KubeadmConfig")
            if owner is not None:
                self.queue.add((namespace, owner))
            return
        with self._waiting_lock:
            waiting = self._waiting.pop(key_of(obj), set())
        for key in waiting:
            self.reconciler.mark_inputs_changed(key)
            self.queue.add(key)

    def _find_machine(self, namespace: str, name: str) -> Obj | None:
        """A Machine from the cache, or the API (a standby replica has no caches)."""
        return self.caches.machines.get(namespace, name) or self.api.get(
            kube.Machine, name, namespace
        )

    # ------------------------------------------------------------------ workers

    def _schedule(self, key: Key, outcome: Outcome) -> float | None:
        """Queue ``key`` again as ``outcome`` asks; returns in how many seconds it will be
        looked at again without any event (0: at once), or None: only an event brings it back.
        """
        if outcome.waiting_on:
            with self._waiting_lock:
                for secret in outcome.waiting_on:
                    self._waiting.setdefault(secret, set()).add(key)
            # a Secret that arrived during the reconcile found nobody waiting: look again
            if any(self.caches.secrets.get(*secret) is not None for secret in outcome.waiting_on):
                self.reconciler.mark_inputs_changed(key)
                self.queue.add(key)
                return 0.0
        if outcome.backoff:
            return self.queue.retry(key)
        self.queue.forget(key)
        if outcome.requeue_after is not None:
            self.queue.add_after(key, outcome.requeue_after)
        return outcome.requeue_after

    def _work(self) -> None:
        while not self.stop.is_set():
            item = self.queue.get(timeout=0.5)
            if item is None:
                continue
            key: Key = item  # type: ignore[assignment]
            started = time.monotonic()
            before = kube.thread_writes()
            try:
                outcome = self.reconciler.reconcile(key)
            except Exception as exc:  # a bug must not kill the worker: log it, back off
                log.exception("reconcile of %s/%s crashed", *key)
                outcome = Outcome("error", type(exc).__name__, backoff=True)
            finally:
                self.queue.done(key)
            seconds = time.monotonic() - started
            writes = kube.thread_writes() - before
            self.metrics.observe(outcome, seconds)
            requeue = self._schedule(key, outcome)
            log_event(
                "reconcile",
                config=f"{key[0]}/{key[1]}",
                result=outcome.result,
                reason=outcome.reason,
                ms=round(seconds * 1000, 1),
                writes=writes,
                requeue=requeue,  # seconds until it is looked at again unasked; None: never
            )

    # ------------------------------------------------------------------ run

    def run(self) -> int:
        """Run until ``stop`` is set (SIGTERM) or leadership is lost; returns an exit code."""
        if self.options.webhook_port:  # before anything else: v1beta1 clients wait on it
            serve_webhook(self.api, self.options)
        self.metrics.serve(self.options.metrics_host, self.options.metrics_port)
        if self.options.report_port or self.options.report_url:
            # every replica holds the key (a standby can take over without new credentials)
            key = load_key(self.api, self.options.lease_namespace)
            credentials = Credentials(key)
            self.reconciler.settings.credentials = credentials
            if self.options.report_port:
                ReportServer(self.api, self._find_machine, credentials).serve(
                    self.options.report_host, self.options.report_port, self.options.report_tls
                )
        if self.options.leader_elect:
            threading.Thread(
                target=self.elector.run, args=(self._elector_stop,), name="leader", daemon=True
            ).start()
            while not self.stop.is_set() and not self.elector.leading.is_set():
                self.stop.wait(0.2)
            if self.stop.is_set():
                self._elector_stop.set()
                return 0
        try:  # objects an older release stored as v1beta1, rewritten as v1beta2 once
            migrate.storage(self.api)
        except ApiError as exc:  # the next leader tries again; reconciling does not need it
            log_event("storage-migrated", level="warning", error=f"APIError{exc.status.code}")
        order = ("clusters", "machines", "secrets", "configs")  # configs last: inputs first
        for name in order:
            self.informers[name].start()
        for informer in (self.informers[name] for name in order[:3]):
            while not informer.synced.wait(0.2):
                if self.stop.is_set():
                    return 0
        workers = [
            threading.Thread(target=self._work, name=f"worker-{i}", daemon=True)
            for i in range(self.options.workers)
        ]
        for worker in workers:
            worker.start()
        log.info("controller running with %d workers", len(workers))
        code = 0
        while not self.stop.is_set():
            if self.elector.lost.is_set():
                code = EXIT_LOST_LEADERSHIP
                self.stop.set()
                break
            self.stop.wait(0.2)
        self.queue.close()
        deadline = time.monotonic() + DRAIN_SECONDS  # within the pod's 30 s grace period
        for worker in workers:  # finish the reconcile in hand: no half-written config
            worker.join(timeout=max(0.0, deadline - time.monotonic()))
        self._elector_stop.set()
        if self.options.leader_elect and code == 0:
            self.elector.release()
        return code
