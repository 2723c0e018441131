"""Render several Machines of one bundle as a coherent cluster.

An init control plane generates the cluster CAs when the bundle has none; every join of the
same run must pin that CA. So inits render first and their generated Secrets join the bundle
before the joins render. This loop is written once, here: ``render --all`` and
``local-cluster init`` both call it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bootstrap.errors import NodesmithError, TransientError
from bootstrap.render.pipeline import render_machine
from bootstrap.render.resolve import Bundle, resolve
from bootstrap.render.result import RenderOptions, RenderResult


@dataclass
class BatchResult:
    """Every Machine's result, or its error; ``worst`` is what the batch as a whole failed of."""

    results: list[RenderResult] = field(default_factory=list)
    failures: list[NodesmithError] = field(default_factory=list)

    @property
    def worst(self) -> NodesmithError | None:
        """Terminal wins over transient: retrying will not fix the wrong ones."""
        if not self.failures:
            return None
        terminal = (e for e in self.failures if not isinstance(e, TransientError))
        return next(terminal, self.failures[-1])


def init_order(bundle: Bundle, name: str) -> int:
    """Who asks for the init lock first: 0 for a control plane whose config is written for
    init (an init or cluster configuration, no ``joinConfiguration.controlPlane``), 1 for the
    other control planes, 2 for workers and Machines that will fail anyway.

    CABPK's lock goes to whichever Machine reconciles first; a run picks the one its author
    wrote for init, so the other control planes join it instead of waiting.
    """
    try:
        ctx = resolve(bundle, name)
    except NodesmithError:
        return 2
    if not ctx.machine.control_plane:
        return 2
    spec = ctx.config.spec
    wrote_init = spec.init_configuration is not None or spec.cluster_configuration is not None
    asks_join = (spec.join_configuration or {}).get("controlPlane") is not None
    return 0 if wrote_init and not asks_join else 1


def render_all(bundle: Bundle, names: list[str], options: RenderOptions) -> BatchResult:
    """Render ``names`` from ``bundle``, init candidates first; generated CAs join ``bundle``.

    One init per cluster (``pipeline.role_of``): the first control plane of a cluster that is
    not initialized inits, later control planes join it, workers join after it.

    Every Machine is attempted, so one run reports every broken Machine, not just the first.
    """
    batch = BatchResult()
    for name in sorted(names, key=lambda n: init_order(bundle, n)):
        try:
            result = render_machine(bundle, name, options)
        except NodesmithError as exc:
            batch.failures.append(exc)
            continue
        batch.results.append(result)
        bundle.add(result.generated_secrets)
    return batch
