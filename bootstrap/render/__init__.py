"""Bootstrap data: parse objects -> resolve the Machine's context -> decide -> build -> render.

No argparse and no sockets live here: the CLI (``bootstrap.cli.render``), the HTTP service
(``bootstrap.serve``) and the VM tools call :func:`render_one` and only differ in how they
present its :class:`RenderResult` or the :class:`~bootstrap.errors.NodesmithError` it raises.
The controller drives the same steps (``decide``, then ``pipeline.render_machine``) with its
own init lock.

Example::

    from bootstrap.render import RenderOptions, render_one
    result = render_one(objects, "default/worker-0", RenderOptions(gzip=True))
"""

from bootstrap.render.batch import render_one
from bootstrap.render.result import RenderOptions, RenderResult

__all__ = ["RenderOptions", "RenderResult", "render_one"]
