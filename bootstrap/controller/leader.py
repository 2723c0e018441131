"""Leader election on a coordination.k8s.io Lease, as client-go's leaderelection does it.

Only the holder reconciles, so two replicas never write the same config. A candidate takes the
Lease when it is absent or its holder has not renewed within ``leaseDurationSeconds``; every
update carries the resourceVersion it read, so of two candidates racing for an expired Lease
exactly one write succeeds (the other gets 409). The holder renews every ``renew`` seconds
and stops leading (the process exits, as controller-runtime's manager does) when it could not
renew within the renew deadline, 2/3 of the lease duration, so it has stopped before a
standby, timing the lease on its own clock, may take over. A graceful stop releases the Lease
so a standby takes over at once instead of after the lease expires.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime

from lightkube import ApiError

from bootstrap.controller import kube

log = logging.getLogger("nodesmith.controller")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        api: kube.Api,
        namespace: str,
        name: str,
        identity: str,
        duration: float = 15.0,
        renew: float = 5.0,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.duration = duration
        self.renew = renew
        self.leading = threading.Event()
        self.lost = threading.Event()
        # client-go's rules: a leader gives up when it could not renew within the renew
        # deadline (2/3 of the duration), well before a standby may take over; a standby
        # judges expiry by its own clock, from when it first saw the current renewTime, so
        # clock skew between replicas cannot make it take over early.
        self.renew_deadline = duration * 2 / 3
        self._observed: tuple[object, float] | None = None

    def _spec(self, transitions: int, acquired: str | None = None) -> dict[str, object]:
        now = _now()
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(max(1, round(self.duration))),
            "acquireTime": acquired or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    def try_acquire_or_renew(self) -> bool:
        lease = self.api.get(kube.Lease, self.name, self.namespace)
        if lease is None:
            try:
                self.api.create(
                    kube.Lease,
                    {
                        "metadata": {"name": self.name, "namespace": self.namespace},
                        "spec": self._spec(0),
                    },
                )
                return True
            except ApiError:
                return False
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        record = (holder, spec.get("renewTime"))
        if self._observed is None or self._observed[0] != record:
            self._observed = (record, time.monotonic())
        duration = float(spec.get("leaseDurationSeconds") or self.duration)
        expired = time.monotonic() > self._observed[1] + duration
        if holder and holder != self.identity and not expired:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        mine = holder == self.identity
        lease["spec"] = self._spec(
            transitions if mine else transitions + 1,
            spec.get("acquireTime") if mine else None,
        )
        try:
            self.api.replace(kube.Lease, lease)  # carries resourceVersion: 409 if we lost a race
            return True
        except ApiError:
            return False

    def run(self, stop: threading.Event) -> None:
        """Acquire, then renew until ``stop``; sets ``lost`` when leadership slips away."""
        last_renewal = 0.0
        while not stop.is_set():
            try:
                ok = self.try_acquire_or_renew()
            except Exception as exc:  # API unreachable: counts as a failed renewal
                log.warning("leader election: %s", type(exc).__name__)
                ok = False
            now = time.monotonic()
            if ok:
                last_renewal = now
                if not self.leading.is_set():
                    log.info("leader election: %s leads", self.identity)
                    self.leading.set()
            elif self.leading.is_set() and now - last_renewal > self.renew_deadline:
                log.error("leader election: lease lost")
                self.lost.set()
                return
            stop.wait(self.renew if self.leading.is_set() else max(1.0, self.renew / 2))

    def release(self) -> None:
        """Give the Lease up (graceful stop) so a standby needs not wait for it to expire."""
        if not self.leading.is_set():
            return
        try:
            lease = self.api.get(kube.Lease, self.name, self.namespace)
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = None
                lease["spec"]["leaseDurationSeconds"] = 1
                self.api.replace(kube.Lease, lease)
        except Exception as exc:
            log.warning("leader election: release failed: %s", type(exc).__name__)
