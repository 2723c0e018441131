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
    """A work dir and staging dir as a build makes them (mkdtemp: 0700)."""
    work = parent / "var" / f"nodesmith-image-{name}"
    staging = parent / "out" / f".out.partial-{name}"
    (work / "root/dev").mkdir(parents=True)
    staging.mkdir(parents=True)
    work.chmod(0o700)
    staging.chmod(0o700)
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


def dead_build(work: Path, staging: Path) -> None:
    build = start_build(work, staging)
    build.kill()
    build.wait()


@pytest.mark.parametrize(
    ("case", "kept"),
    [
        ("build still running", True),
        ("no lock file (not a build that holds one)", True),
        ("build dead, but a step it started still works in the directory", True),
        ("work dir readable by others (not made by mkdtemp)", True),
        ("work dir owned by another user (a planted lock file)", True),
        ("lock names a path that is no staging dir", False),
        ("lock names a staging dir through a symlinked parent", False),
    ],
)
def test_what_reclaim_leaves_alone(tmp_path: Path, case: str, kept: bool) -> None:
    work, staging = workspace(tmp_path, "x")
    running: list[subprocess.Popen[str] | subprocess.Popen[bytes]] = []
    if case == "build still running":
        running.append(start_build(work, staging))
    elif case.startswith("build dead"):
        dead_build(work, staging)
        running.append(subprocess.Popen(["sleep", "600"], cwd=work / "root"))
    elif case.startswith("work dir readable"):
        dead_build(work, staging)
        work.chmod(0o755)
    elif case.startswith("work dir owned"):
        if os.geteuid() != 0:
            pytest.skip("chown needs root")
        dead_build(work, staging)
        os.chown(work, 65534, 65534)
        os.chown(work / LOCK_NAME, 65534, 65534)
    elif case == "lock names a path that is no staging dir":
        staging = tmp_path / "precious-dir"
        staging.mkdir(mode=0o700)
        dead_build(work, staging)
    elif case.startswith("lock names a staging dir through"):
        link = tmp_path / "link"
        link.symlink_to(staging.parent)
        dead_build(work, link / staging.name)
    try:
        reclaimed = reclaim_stale(tmp_path / "var", "nodesmith-image-")
    finally:
        for proc in running:
            proc.kill()
            proc.wait()
    assert work.exists() is kept
    assert reclaimed == ([] if kept else [work])
    assert staging.exists()


def test_a_dead_builds_staging_dir_goes_with_its_work_dir(tmp_path: Path) -> None:
    work, staging = workspace(tmp_path, "y")
    dead_build(work, staging)
    assert reclaim_stale(tmp_path / "var", "nodesmith-image-") == [work]
    assert not work.exists() and not staging.exists()
