"""Write files so that a reader never sees half of one, with private modes for secrets."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import tempfile
from pathlib import Path


def atomic_write(path: str | Path, data: bytes, mode: int = 0o600) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it into place."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def replace_dir(staging: Path, target: Path) -> None:
    """Move a finished ``staging`` directory to ``target``, replacing an old one last.

    Both must be on one filesystem. The old ``target`` is renamed aside before the new one
    moves in, so ``target`` is at every moment either the old complete tree or the new one;
    SIGTERM and SIGINT are held back over the swap, since one landing between the two renames
    would leave no ``target`` at all.
    """
    if not target.exists():
        staging.rename(target)
        return
    old = target.with_name(f".{target.name}.old-{os.getpid()}")
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        target.rename(old)
        staging.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)  # a held-back signal arrives now


def private_dir_name(parent: Path, prefix: str) -> Path:
    """A fresh name in ``parent`` for a directory this process alone will create.

    Choosing the name before creating the directory lets the caller create it inside its
    ``try``: a signal between ``mkdtemp``'s mkdir and the ``try`` would leak the directory.
    """
    return parent / f"{prefix}{os.getpid()}-{secrets.token_hex(6)}"


def default_cache_dir() -> Path:
    """``$NODESMITH_CACHE``, else ``$XDG_CACHE_HOME/nodesmith`` or ``~/.cache/nodesmith``."""
    env = os.environ.get("NODESMITH_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nodesmith"
