"""The controller's container image (``nodesmith controller image``), built for real with
mmdebstrap and umoci, then opened as a runtime would open it: the archive against its sha256,
the OCI config (user, entrypoint), and the root unpacked by umoci from the archive alone,
where nodesmith runs as the non-root user and no compiler exists."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bootstrap import __version__
from bootstrap.errors import NodesmithError
from bootstrap.image.container import ARCHIVE, build

pytestmark = [
    pytest.mark.image,
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("mmdebstrap") or not shutil.which("umoci"),
        reason="needs root, mmdebstrap and umoci (scripts/setup installs them)",
    ),
]
NODESMITH = str(Path(sys.executable).parent / "nodesmith")
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"


@pytest.fixture(scope="module")
def built(controller_image: Path) -> Path:
    """The session's one real build (tests/image_build.py), shared with the VM cluster test."""
    return controller_image


def _unpacked(built: Path, tmp_path: Path) -> tuple[Path, dict[str, object]]:
    """The archive alone, unpacked by umoci as a runtime would: (rootfs, OCI runtime config)."""
    layout = tmp_path / "layout"
    layout.mkdir()
    subprocess.run(["tar", "-xf", str(built / ARCHIVE), "-C", str(layout)], check=True)
    bundle = tmp_path / "bundle"
    subprocess.run(["umoci", "unpack", "--image", f"{layout}:test", str(bundle)],
                   check=True, capture_output=True)  # fmt: skip
    return bundle / "rootfs", json.loads((bundle / "config.json").read_text())


def test_the_archive_matches_its_sha256(built: Path) -> None:
    digest, name = (built / f"{ARCHIVE}.sha256").read_text().split()
    assert name == ARCHIVE
    proc = subprocess.run(["sha256sum", str(built / ARCHIVE)], capture_output=True, text=True)
    assert proc.stdout.split()[0] == digest
    info = json.loads((built / "image.json").read_text())
    assert (info["sha256"], info["tag"], info["version"]) == (digest, "test", __version__)
    assert (built / "build.log").is_file()


def test_it_runs_nodesmith_as_the_non_root_user(built: Path, tmp_path: Path) -> None:
    rootfs, config = _unpacked(built, tmp_path)
    process = config["process"]
    assert isinstance(process, dict)
    assert process["user"]["uid"] == 65532 and process["user"]["gid"] == 65532
    assert process["args"] == ["/opt/nodesmith/bin/nodesmith", "controller", "run"]
    started = time.monotonic()
    proc = subprocess.run(
        [CHROOT, "--userspec=65532:65532", str(rootfs), "/opt/nodesmith/bin/nodesmith",
         "controller", "run", "--help"],
        capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "--leader-election-namespace" in proc.stdout
    assert time.monotonic() - started < 60
    passwd = (rootfs / "etc/passwd").read_text()
    assert "nonroot:x:65532:65532:" in passwd  # its group is 65532 too


def test_no_compiler_and_nothing_left_from_the_build(built: Path, tmp_path: Path) -> None:
    rootfs, _ = _unpacked(built, tmp_path)
    compilers = [p for name in ("gcc", "cc", "c++", "g++", "clang", "x86_64-linux-gnu-gcc")
                 for p in (rootfs / "usr/bin" / name,) if p.exists()]  # fmt: skip
    assert compilers == []
    assert not (rootfs / "tmp/wheels").exists()
    assert not any((rootfs / "var/lib/apt/lists").glob("*Packages*"))
    assert (rootfs / "opt/nodesmith/bin/python3").exists()


def test_a_missing_package_names_the_step_and_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(NodesmithError) as caught:
        build(out, tag="t", cache_dir=tmp_path / "cache",
              extra_packages=("nodesmith-no-such-package",))  # fmt: skip
    assert "mmdebstrap failed" in str(caught.value)
    assert "nodesmith-no-such-package" in str(caught.value)
    assert not out.exists()
    assert not list(tmp_path.glob(".out.partial-*"))
