"""Temporary build directories that never outlive a build and never delete a mount.

A chroot build bind-mounts the host's /dev into the root; deleting the work directory while
such a mount is live would delete host device nodes. ``remove_tree`` unmounts anything below
the directory first and refuses to delete if a mount survives.

A build that is killed outright (SIGKILL, OOM, a lost session) cannot clean up after itself,
so each build holds an exclusive ``flock`` on a lock file in its work directory for as long as
it runs. The kernel drops that lock when the process dies, however it dies: the next build
finds work directories whose lock it can take, knows their owner is gone, and reclaims them
(mounts, work directory and the staging sibling the lock file names). A directory without a
lock file, or whose lock is held, is never touched.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import IO

LOCK_NAME = ".owner.lock"
STAGING_MARK = ".partial-"  # only a path that looks like a staging sibling is ever removed


def mounts_under(path: Path) -> list[Path]:
    base = str(path.resolve())
    found: list[Path] = []
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            point = line.split()[4].encode().decode("unicode_escape")
            if point == base or point.startswith(base + "/"):
                found.append(Path(point))
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def remove_tree(path: Path) -> None:
    if not path.exists():
        return
    for m in mounts_under(path):
        subprocess.run(["umount", "-l", str(m)], check=False, capture_output=True)
    left = mounts_under(path)
    if left:
        raise RuntimeError(f"refusing to delete {path}: still mounted: {left}")
    for _ in range(3):  # a just-stopped child may still have been writing
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            return
        time.sleep(1)


def hold(work: Path, staging: Path) -> IO[str]:
    """Mark ``work`` as owned by this process for as long as the returned file stays open."""
    # Locked and filled under another name, then renamed: a sweeper never sees the lock file
    # before it is held.
    fresh = work / f"{LOCK_NAME}.{os.getpid()}"
    lock = open(fresh, "w", encoding="utf-8")  # noqa: SIM115 - held for the build
    fcntl.flock(lock, fcntl.LOCK_EX)
    lock.write(f"{os.getpid()}\n{staging}\n")
    lock.flush()
    fresh.rename(work / LOCK_NAME)
    return lock


def reclaim_stale(parent: Path, prefix: str) -> list[Path]:
    """Remove the work directories under ``parent`` whose build died; returns them."""
    reclaimed: list[Path] = []
    for work in sorted(parent.glob(f"{prefix}*")):
        lock_path = work / LOCK_NAME
        try:
            lock = open(lock_path, encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError:
            continue  # not a build that holds a lock: not ours to judge
        with lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its build is alive
            lines = lock.read().splitlines()
            staging = Path(lines[1]) if len(lines) > 1 else None
            try:
                remove_tree(work)
            except RuntimeError:
                continue  # a mount that will not go: left to the operator, never deleted through
        if staging is not None and STAGING_MARK in staging.name:
            shutil.rmtree(staging, ignore_errors=True)
        reclaimed.append(work)
    return reclaimed
