"""Temporary build directories that never outlive a build and never delete a mount.

A chroot build bind-mounts the host's /dev into the root; deleting the work directory while
such a mount is live would delete host device nodes. ``remove_tree`` unmounts anything below
the directory first and refuses to delete if a mount survives.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path


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
