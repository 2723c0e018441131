"""Request metrics for ``nodesmith serve``, shared by all worker processes.

Workers are forked from one master, and a Prometheus scrape lands on whichever worker accepts
it, so every worker must be able to report the totals of all of them. The master allocates one
shared-memory array before forking; each worker writes only its own slot (no locks: one event
loop thread per worker, and aligned 8-byte stores are atomic), and ``/metrics`` sums the slots.
A respawned worker reuses its slot, so counters never go backwards. ``prometheus_client`` only
formats the text exposition.
"""

from __future__ import annotations

import multiprocessing.sharedctypes
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

ROUTES = ("userdata", "healthz", "metrics", "openapi", "other")
STATUSES = (200, 400, 401, 404, 405, 413, 415, 422, 499, 500, 503)
OTHER_STATUS = len(STATUSES)  # index of the catch-all status column
# Latency buckets in seconds: a worker-join render is well under 1 ms.
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

_N_STATUS = len(STATUSES) + 1
_N_HIST = len(BUCKETS) + 3  # bucket counts, +Inf count, sum
_COUNTS = len(ROUTES) * _N_STATUS
_SLOT = _COUNTS + len(ROUTES) * _N_HIST

_STATUS_INDEX = {code: i for i, code in enumerate(STATUSES)}
_ROUTE_INDEX = {name: i for i, name in enumerate(ROUTES)}

CONTENT_TYPE = CONTENT_TYPE_LATEST


class SharedMetrics:
    """Counters and a latency histogram per route, one slot per worker."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._data: Any = multiprocessing.sharedctypes.RawArray("d", slots * _SLOT)
        self._base = 0

    def use_slot(self, index: int) -> None:
        """Called once in a worker: from now on ``observe`` writes to slot ``index``."""
        if not 0 <= index < self.slots:
            raise ValueError(f"slot {index} out of range 0..{self.slots - 1}")
        self._base = index * _SLOT

    def observe(self, route: str, status: int, seconds: float) -> None:
        """Count one finished request."""
        r = _ROUTE_INDEX.get(route, len(ROUTES) - 1)
        s = _STATUS_INDEX.get(status, OTHER_STATUS)
        data, base = self._data, self._base
        data[base + r * _N_STATUS + s] += 1
        h = base + _COUNTS + r * _N_HIST
        for i, bound in enumerate(BUCKETS):
            if seconds <= bound:
                data[h + i] += 1
                break
        else:
            data[h + len(BUCKETS)] += 1
        data[h + len(BUCKETS) + 1] += seconds

    def _sum(self) -> list[float]:
        data = self._data
        total = [0.0] * _SLOT
        for slot in range(self.slots):
            base = slot * _SLOT
            for i in range(_SLOT):
                total[i] += data[base + i]
        return total

    def count(self, route: str, status: int) -> int:
        """Requests seen so far with this route and status, over all workers."""
        r = _ROUTE_INDEX[route]
        return int(self._sum()[r * _N_STATUS + _STATUS_INDEX.get(status, OTHER_STATUS)])

    def exposition(self) -> bytes:
        """The Prometheus text format of the current totals."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Collector(self._sum()))
        return generate_latest(registry)


class _Collector(Collector):
    def __init__(self, totals: list[float]) -> None:
        self.totals = totals

    def collect(self) -> Iterator[Metric]:
        t = self.totals
        requests = CounterMetricFamily(
            "nodesmith_http_requests",
            "HTTP requests answered, by route and status code.",
            labels=["route", "status"],
        )
        for r, route in enumerate(ROUTES):
            for s in range(_N_STATUS):
                value = t[r * _N_STATUS + s]
                if value:
                    code = str(STATUSES[s]) if s < len(STATUSES) else "other"
                    requests.add_metric([route, code], value)
        yield requests
        latency = HistogramMetricFamily(
            "nodesmith_http_request_duration_seconds",
            "Time from request start to the last response byte handed to the server.",
            labels=["route"],
        )
        for r, route in enumerate(ROUTES):
            h = _COUNTS + r * _N_HIST
            cumulative = 0.0
            buckets: list[tuple[str, float]] = []
            for i, bound in enumerate(BUCKETS):
                cumulative += t[h + i]
                buckets.append((repr(bound), cumulative))
            cumulative += t[h + len(BUCKETS)]
            buckets.append(("+Inf", cumulative))
            latency.add_metric([route], buckets, sum_value=t[h + len(BUCKETS) + 1])
        yield latency
