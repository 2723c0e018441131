"""Prometheus metrics of the controller, on their own registry and HTTP endpoint.

reconciles by result and reason, reconcile latency, API writes by verb and resource (the
management cluster's and the workload clusters' together), the queue depth and whether this
replica leads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from bootstrap.controller.kube import Api
    from bootstrap.controller.reconcile import Outcome


@dataclass(frozen=True)
class Live:
    """What the metrics read at scrape time, and nothing more of the controller."""

    management: Api  # the management cluster's client, its writes counted
    workloads: Callable[[], list[Api]]  # every workload cluster client made so far
    queue_depth: Callable[[], int]
    leading: Callable[[], bool]


class _Live(Collector):
    def __init__(self, live: Live) -> None:
        self.live = live

    def collect(self) -> Iterator[Any]:
        live = self.live
        writes = CounterMetricFamily(
            "nodesmith_controller_api_writes",
            "API writes made, by verb and resource",
            labels=["cluster", "verb", "resource"],
        )
        for (verb, resource), n in sorted(live.management.writes.items()):
            writes.add_metric(["management", verb, resource], n)
        totals: dict[tuple[str, str], int] = {}
        for api in live.workloads():
            for k, n in api.writes.items():
                totals[k] = totals.get(k, 0) + n
        for (verb, resource), n in sorted(totals.items()):
            writes.add_metric(["workload", verb, resource], n)
        yield writes
        depth = GaugeMetricFamily("nodesmith_controller_queue_depth", "Keys queued or delayed")
        depth.add_metric([], live.queue_depth())
        yield depth
        leader = GaugeMetricFamily("nodesmith_controller_leader", "1 while this replica leads")
        leader.add_metric([], 1 if live.leading() else 0)
        yield leader


class Metrics:
    def __init__(self, live: Live) -> None:
        self.registry = CollectorRegistry()
        self.reconciles = Counter(
            "nodesmith_controller_reconciles",
            "Reconciles, by result and reason",
            ["result", "reason"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "nodesmith_controller_reconcile_seconds",
            "Time one reconcile took",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.registry.register(_Live(live))

    def observe(self, outcome: Outcome, seconds: float) -> None:
        self.reconciles.labels(outcome.result, outcome.reason).inc()
        self.latency.observe(seconds)

    def serve(self, host: str, port: int) -> None:
        if port:
            start_http_server(port, addr=host, registry=self.registry)
