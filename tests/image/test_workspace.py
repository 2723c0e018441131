"""Work-dir cleanup never deletes through a live mount (a chroot bind-mounts host /dev), and a
build that was killed outright has its work directory reclaimed by the next one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bootstrap.image.workspace import LOCK_NAME, mounts_under, reclaim_stale, remove_tree

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")


@needs_root
def test_remove_tree_unmounts_first(tmp_path: Path) -> None:
    keep = tmp_path / "outside"
    keep.mkdir()
    (keep / "precious").write_text("host file")
    work = tmp_path / "work"
    (work / "root/dev").mkdir(parents=True)
    subprocess.run(["mount", "--bind", str(keep), str(work / "root/dev")], check=True)
    assert mounts_under(work) == [work / "root/dev"]
    remove_tree(work)
    assert not work.exists()
    assert (keep / "precious").read_text() == "host file"  # not deleted through the mount


HOLDER = """
import sys, time
from pathlib import Path
from bootstrap.image.workspace import hold
lock = hold(Path(sys.argv[1]), Path(sys.argv[2]))
print("held", flush=True)
time.sleep(600)
"""


def start_build(work: Path, staging: Path) -> subprocess.Popen[str]:
    """A process that owns ``work`` the way a build does, until it is killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(work), str(staging)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def workspace(parent: Path, name: str) -> tuple[Path, Path]:
    work = parent / "var" / f"nodesmith-image-{name}"
    staging = parent / "out" / f".out.partial-{name}"
    (work / "root/dev").mkdir(parents=True)
    staging.mkdir(parents=True)
    return work, staging


@needs_root
def test_a_killed_builds_workspace_is_reclaimed_mounts_first(tmp_path: Path) -> None:
    host = tmp_path / "host-dev"
    host.mkdir()
    (host / "precious").write_text("host file")
    work, staging = workspace(tmp_path, "dead")
    subprocess.run(["mount", "--bind", str(host), str(work / "root/dev")], check=True)
    build = start_build(work, staging)
    build.send_signal(signal.SIGKILL)
    build.wait()
    assert reclaim_stale(tmp_path / "var", "nodesmith-image-") == [work]
    assert not work.exists() and not staging.exists()
    assert mounts_under(tmp_path) == []
    assert (host / "precious").read_text() == "host file"


@pytest.mark.parametrize(
    ("case", "kept"),
    [
        ("build still running", True),
        ("no lock file (not a build that holds one)", True),
        ("lock names a path that is no staging dir", False),
    ],
)
def test_what_reclaim_leaves_alone(tmp_path: Path, case: str, kept: bool) -> None:
    work, staging = workspace(tmp_path, "x")
    build = None
    if case == "build still running":
        build = start_build(work, staging)
    elif case == "lock names a path that is no staging dir":
        staging = tmp_path / "precious-dir"
        staging.mkdir()
        (work / LOCK_NAME).write_text(f"1\n{staging}\n")
    try:
        reclaimed = reclaim_stale(tmp_path / "var", "nodesmith-image-")
    finally:
        if build is not None:
            build.kill()
            build.wait()
    assert work.exists() is kept
    assert reclaimed == ([] if kept else [work])
    assert staging.exists()
