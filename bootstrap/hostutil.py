"""Small facts about this machine's processes and ports, shared by the VM and image code."""

from __future__ import annotations

import socket
from pathlib import Path


def alive(pid: int) -> bool:
    """True for a running process; a zombie (exited, not yet reaped) counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    state = stat.rsplit(") ", 1)[-1][:1]
    return state not in ("Z", "X")


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1 (the caller binds it; a race is retried there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
