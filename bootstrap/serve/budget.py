"""A CPU-time budget for the synchronous parse + render of one request.

Parse and render run on the worker's event loop thread (a worker-join render costs well
under a millisecond, far less than a thread hop), so one pathological body, such as an alias
bomb that some code walks element by element, would stall every other request on that worker
for as long as it takes. ``cpu_budget`` arms a process CPU-time timer (``ITIMER_PROF``); if it
fires while the budget is active, the handler raises ``BudgetExceeded`` at the next Python
bytecode, which the request turns into a terminal 422. The flag is cleared before the timer
is disarmed, so a late signal outside the block does nothing. C code (``json.loads``) is not
interrupted, but it is bounded by the body size limit.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from bootstrap.errors import TerminalError


class BudgetExceeded(TerminalError):
    """The body took more CPU to parse and render than any real bundle does (HTTP 422)."""


_active = False
_installed = False


def _on_timer(signum: int, frame: FrameType | None) -> None:
    if _active:
        raise BudgetExceeded(
            "the bundle took too long to process; it is far more complex than a real one",
            reason="TooComplex",
        )


def install() -> bool:
    """Install the timer handler; only possible (and only needed) on the main thread."""
    global _installed
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGPROF, _on_timer)
        _installed = True
    return _installed


@contextmanager
def cpu_budget(seconds: float) -> Iterator[None]:
    """Raise ``BudgetExceeded`` inside the block once it has used ``seconds`` of CPU."""
    global _active
    if not _installed or seconds <= 0:
        yield
        return
    _active = True
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        _active = False
        signal.setitimer(signal.ITIMER_PROF, 0)
