"""Bootstrap data: parse objects -> resolve the Machine's context -> build documents -> render.

No argparse and no sockets live here: the CLI (``bootstrap.cli.render``), the HTTP service
(``bootstrap.serve``) and the VM tools call :func:`render_machine` and only differ in how they
present its :class:`RenderResult` or the :class:`~bootstrap.errors.NodesmithError` it raises.

Example::

    from bootstrap.render import RenderOptions, render_machine
    result = render_machine(objects, "default/worker-0", RenderOptions(gzip=True))
"""

from bootstrap.render.pipeline import render_machine
from bootstrap.render.result import RenderOptions, RenderResult

__all__ = ["RenderOptions", "RenderResult", "render_machine"]
