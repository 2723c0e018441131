"""Read ``/proc/<pid>/stat`` for tests that check whether a process (still) runs: Linux only.

One reader, because the "did it exit?" checks must agree on the two edge cases:

- a process that is gone (no ``/proc/<pid>``, or it vanishes while being read) has no state:
  ``stat_fields`` and ``process_state`` return ``None`` and ``is_alive`` returns False;
- a zombie (state ``Z``) has exited but is not yet reaped by its parent: ``process_state``
  says ``"Z"`` and ``is_alive`` returns False, since it runs no code any more.

The command name (field 2) may hold spaces and parentheses, so the fields are split after
its last ``)``.

Example::

    >>> import os
    >>> is_alive(os.getpid())
    True
"""

from __future__ import annotations

from pathlib import Path


def stat_fields(pid: int) -> list[str] | None:
    """The fields after the command name: ``[0]`` is the state, ``[1]`` the parent's pid,
    ``[11]``/``[12]`` utime/stime (``proc(5)`` numbers them from 3). ``None`` if ``pid`` is
    gone or unreadable."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # FileNotFoundError, or ProcessLookupError when it exits mid-read
        return None
    fields = text.rsplit(")", 1)[1].split() if ")" in text else []
    return fields or None


def process_state(pid: int) -> str | None:
    """The one-letter state (``R``, ``S``, ``D``, ``Z``...), or ``None`` if ``pid`` is gone."""
    fields = stat_fields(pid)
    return fields[0] if fields else None


def is_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie: the answer "did it exit?" wants."""
    return process_state(pid) not in (None, "Z")
