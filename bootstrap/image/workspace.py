"""Temporary build directories that never outlive a build and never delete a mount.

A chroot build bind-mounts the host's /dev into the root; deleting the work directory while
such a mount is live would delete host device nodes. ``remove_tree`` unmounts anything below
the directory first and refuses to delete if a mount survives.

A build that is killed outright (SIGKILL, OOM, a lost session) cannot clean up after itself,
so each build holds an exclusive ``flock`` on a lock file in its work directory for as long as
it runs. The kernel drops that lock when the process dies, however it dies: the next build
finds work directories whose lock it can take and reclaims them (mounts, work directory and
the staging sibling the lock file names). It leaves alone a directory without a lock file, one
whose lock is held, one that any process still uses (the build's steps run in their own
sessions and can outlive it: a chroot, a working directory or an open file below it), and one
not created by this user (0700, owned by us: /var/tmp is world-writable, and a lock file
planted there must not make root delete anything).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
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


def in_use(path: Path) -> bool:
    """Whether any process has its root, working directory or an open file below ``path``."""
    base = str(path.resolve())
    me = str(os.getpid())  # we hold its lock file open ourselves
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or proc.name == me:
            continue
        links = [proc / "root", proc / "cwd"]
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to read
            links += list((proc / "fd").iterdir())
        for link in links:
            try:
                target = os.readlink(link)
            except OSError:
                continue
            if target == base or target.startswith(base + "/"):
                return True
    return False


def _ours(path: Path, private: bool = False) -> bool:
    """A real directory or file (no symlink) owned by us and writable by nobody else;
    ``private``: a directory nobody else may even read (what mkdtemp makes, 0700)."""
    try:
        st = path.lstat()
    except OSError:
        return False
    if st.st_uid != os.geteuid() or stat.S_ISLNK(st.st_mode):
        return False
    if private:
        return stat.S_ISDIR(st.st_mode) and not st.st_mode & 0o077
    return not st.st_mode & 0o022


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
        if not (_ours(work, private=True) and _ours(lock_path)):
            continue  # not a work dir this user's build made (mkdtemp: 0700)
        try:
            lock = open(lock_path, encoding="utf-8")  # noqa: SIM115 - closed below
        except OSError:
            continue  # not a build that holds a lock: not ours to judge
        with lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its build is alive
            if in_use(work):
                continue  # the build died, a step it started did not (yet)
            lines = lock.read().splitlines()
            staging = Path(lines[1]) if len(lines) > 1 else None
            try:
                remove_tree(work)
            except RuntimeError:
                continue  # a mount that will not go: left to the operator, never deleted through
            if work.exists():
                continue  # something kept writing: try again next time
        if staging is not None and _is_staging(staging):
            shutil.rmtree(staging, ignore_errors=True)
        reclaimed.append(work)
    return reclaimed


def _is_staging(path: Path) -> bool:
    """A build's staging sibling: ``.<output>.partial-*``, a real 0700 directory of ours whose
    parents are no symlinks (rmtree must not be steered elsewhere)."""
    return (
        path.is_absolute()
        and path.name.startswith(".")
        and STAGING_MARK in path.name
        and _ours(path, private=True)
        and path.parent.resolve() == path.parent
    )
