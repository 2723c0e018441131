"""Render several Machines of one bundle as a coherent cluster.

An init control plane generates the cluster CAs when the bundle has none; every join of the
same run must pin that CA. So inits render first and their generated Secrets join the bundle
before the joins render. This loop is written once, here: ``render --all`` and
``local-cluster init`` both call it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bootstrap.errors import NodesmithError, TransientError
from bootstrap.render.pipeline import INIT, render_machine, role_of
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


def is_init(bundle: Bundle, name: str) -> bool:
    """Whether ``name`` renders an init control plane (errors are left to the render)."""
    try:
        return role_of(resolve(bundle, name)) == INIT
    except NodesmithError:
        return False


def render_all(bundle: Bundle, names: list[str], options: RenderOptions) -> BatchResult:
    """Render ``names`` from ``bundle``, inits first; their generated CAs join ``bundle``.

    Every Machine is attempted, so one run reports every broken Machine, not just the first.
    """
    batch = BatchResult()
    for name in sorted(names, key=lambda n: not is_init(bundle, n)):
        try:
            result = render_machine(bundle, name, options)
        except NodesmithError as exc:
            batch.failures.append(exc)
            continue
        batch.results.append(result)
        bundle.add(result.generated_secrets)
    return batch
