"""Work-dir cleanup never deletes through a live mount (a chroot bind-mounts host /dev)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bootstrap.image.workspace import mounts_under, remove_tree


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")
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
