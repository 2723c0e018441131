"""The command line's driver: render one Machine, or several of one bundle as a cluster.

:func:`render_one` is what ``nodesmith render``, ``serve`` and the VM tools call: resolve the
Machine's context, plan, decide (``decide``: role and CAs, under this run's in-memory init
lock), render. The controller drives the same steps with its ConfigMap lock.

An init control plane generates the cluster CAs when the bundle has none; every join of the
same run must pin that CA. So :func:`render_all` renders inits first and adds their generated
Secrets to the bundle before the joins render. This loop is written once, here: ``render
--all``, ``vm cluster`` and ``local-cluster init`` all call it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bootstrap.errors import NodesmithError, TransientError
from bootstrap.render.decide import INIT, decide, init_order
from bootstrap.render.objects import Cluster, Machine
from bootstrap.render.pipeline import plan_for, render_machine
from bootstrap.render.resolve import Bundle, resolve
from bootstrap.render.result import RenderOptions, RenderResult


class RunLock:
    """One run's init lock (:class:`~bootstrap.render.decide.InitLock`), in memory: the first
    control plane of a cluster to ask holds it, and once its init has rendered the rest of
    the run joins that init, as a real cluster's Machines join once it is initialized.

    A failed init keeps the lock: the run's other control planes wait for it, not race it.
    """

    def __init__(self) -> None:
        self.holders: dict[tuple[str, str], str] = {}
        self.done: set[tuple[str, str]] = set()  # clusters whose init rendered in this run

    @staticmethod
    def _key(cluster: Cluster) -> tuple[str, str]:
        return (cluster.ref.namespace, cluster.name)

    def initialized(self, cluster: Cluster) -> bool:
        return self._key(cluster) in self.done

    def acquire(self, cluster: Cluster, machine: Machine) -> str:
        return self.holders.setdefault(self._key(cluster), machine.name)

    def release(self, cluster: Cluster) -> None:
        self.holders.pop(self._key(cluster), None)

    def init_rendered(self, cluster: Cluster) -> None:
        self.done.add(self._key(cluster))


def render_one(
    objects: list[dict[str, Any]] | Bundle,
    machine: str,
    options: RenderOptions | None = None,
    lock: RunLock | None = None,
) -> RenderResult:
    """Render the bootstrap data of ``machine`` ("NAMESPACE/NAME" or "NAME") from ``objects``.

    parse (``Bundle``) -> resolve the Machine's context -> plan -> decide -> render. Raises
    ``MachineNotFound``, ``TerminalError`` (the input is wrong) or ``TransientError``
    (something it needs has not appeared yet).
    """
    options = options or RenderOptions()
    lock = lock if lock is not None else RunLock()
    bundle = objects if isinstance(objects, Bundle) else Bundle(objects)
    ctx = resolve(bundle, machine)
    plan = plan_for(ctx, options)
    result = render_machine(plan, decide(ctx, lock, options.clock()))
    if result.role == INIT:  # the rest of the run joins this init
        lock.init_rendered(ctx.cluster)
    return result


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


def render_all(bundle: Bundle, names: list[str], options: RenderOptions) -> BatchResult:
    """Render ``names`` from ``bundle``, init candidates first; generated CAs join ``bundle``.

    One init per cluster (``decide.role``): the first control plane of a cluster that is not
    initialized inits, later control planes join it, workers join after it.

    Every Machine is attempted, so one run reports every broken Machine, not just the first.
    """
    batch, lock = BatchResult(), RunLock()
    for name in sorted(names, key=lambda n: init_order(bundle, n)):
        try:
            result = render_one(bundle, name, options, lock)
        except NodesmithError as exc:
            batch.failures.append(exc)
            continue
        batch.results.append(result)
        bundle.add(result.generated_secrets)
    return batch
