"""Bad input stops a build early, with a specific message, and leaves nothing behind."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from image_build import NODESMITH, REPO, kube_dir, kubectl_version, require_build_host
from proc import stat_fields

DEF = str(REPO / "images/debian-12.yaml")


def nodesmith(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [NODESMITH, *args], capture_output=True, text=True, timeout=600, check=False
    )


@pytest.mark.parametrize("builder", ["chroot", "packer-qemu"])
def test_wrong_sha256_stops_before_install(tmp_path: Path, builder: str) -> None:
    """Both builders check a dir: source before any base disk, VM or Packer run."""
    kdir = kube_dir(tmp_path / "k8s", wrong_hash=True)
    out = tmp_path / "out"
    t0 = time.monotonic()
    proc = nodesmith(
        "image",
        "build",
        DEF,
        "--kubernetes-source",
        f"dir:{kdir}",
        "--kubernetes-version",
        kubectl_version(kdir / "kubectl"),
        "--output",
        str(out),
        "--builder",
        builder,
    )
    assert proc.returncode == 65, proc.stderr
    assert time.monotonic() - t0 < 30  # no root filesystem was built, no VM booted
    err = proc.stderr
    assert str(kdir / "kubectl") in err
    expected = (kdir / "SHA256SUMS").read_text().split()[0]
    assert expected in err
    actual = hashlib.sha256((kdir / "kubectl").read_bytes()).hexdigest()
    assert actual in err
    assert "rootfs" not in err and "packer" not in err and "Traceback" not in err
    assert not out.exists()
    assert not list(tmp_path.glob(".out.partial-*"))


def test_version_mismatch_is_terminal(tmp_path: Path) -> None:
    kdir = kube_dir(tmp_path / "k8s")
    proc = nodesmith(
        "image",
        "build",
        DEF,
        "--kubernetes-source",
        f"dir:{kdir}",
        "--kubernetes-version",
        "v1.0.0",
        "--output",
        str(tmp_path / "out"),
    )
    assert proc.returncode == 65
    assert "--kubernetes-version asks for v1.0.0" in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--format", "qcow2,iso"], "--format accepts"),
        (["--kubernetes-source", "ftp"], "--kubernetes-source must be"),
        (["--kubernetes-version", "1.31"], "--kubernetes-version must look like"),
        (["--oci-runtime", "youki"], "--oci-runtime accepts"),
        (["--datasources", "NoCloud,Ec3"], "--datasources accepts NoCloud, "),
        (["--datasources", "NoCloud,nocloud"], "--datasources means NoCloud (got 'nocloud')"),
        (["--datasources", "NoCloud,None"], "--datasources needs no None: it is always added"),
        (["--datasources", ","], "--datasources needs at least one datasource (got ',')"),
    ],
)
def test_usage_errors(tmp_path: Path, args: list[str], needle: str) -> None:
    proc = nodesmith("image", "build", DEF, "--output", str(tmp_path / "out"), *args)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr


def test_missing_sha256sums(tmp_path: Path) -> None:
    (tmp_path / "k8s").mkdir()
    proc = nodesmith(
        "image",
        "build",
        DEF,
        "--kubernetes-source",
        f"dir:{tmp_path / 'k8s'}",
        "--output",
        str(tmp_path / "out"),
    )
    assert proc.returncode == 65 and "SHA256SUMS" in proc.stderr


def test_existing_output_refused(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    proc = nodesmith("image", "build", DEF, "--output", str(tmp_path / "out"))
    assert proc.returncode == 65 and "--force" in proc.stderr


@pytest.mark.image
def test_failed_build_leaves_nothing(tmp_path: Path) -> None:
    """A package that does not exist makes mmdebstrap fail after the build started."""
    require_build_host()
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        Path(DEF).read_text().replace("  - containerd\n", "  - containerd\n  - no-such-package-x\n")
    )
    before = set(Path("/var/tmp").glob("nodesmith-image-*"))
    out = tmp_path / "out"
    proc = subprocess.run(
        [NODESMITH, "image", "build", str(bad), "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode != 0
    assert "mmdebstrap failed" in proc.stderr and "no-such-package-x" in proc.stderr
    assert not out.exists()
    assert not list(tmp_path.glob(".out.partial-*"))
    assert set(Path("/var/tmp").glob("nodesmith-image-*")) == before


@pytest.mark.image
def test_interrupted_build_leaves_nothing(tmp_path: Path) -> None:
    """SIGTERM in the middle of mmdebstrap: no output, no staging dir, no work dir, no mount."""
    require_build_host()
    from bootstrap.image.workspace import mounts_under

    before = set(Path("/var/tmp").glob("nodesmith-image-*"))
    mounted_before = set(mounts_under(Path("/var/tmp")))
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [NODESMITH, "image", "build", DEF, "--format", "qcow2", "--output", str(out)],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    for line in proc.stderr:
        if "rootfs ..." in line:
            break
    time.sleep(15)
    proc.send_signal(signal.SIGTERM)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 128 + signal.SIGTERM, rest
    assert not out.exists()
    assert not list(tmp_path.glob(".out.partial-*"))
    assert set(Path("/var/tmp").glob("nodesmith-image-*")) <= before
    assert set(mounts_under(Path("/var/tmp"))) - mounted_before == set()


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        fields = stat_fields(int(entry.name))
        if fields is None:  # exited since the listing
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL a process and all its descendants at once, as an OOM kill of a whole cgroup or
    a lost machine would: stopped first, so none can fork or be reparented meanwhile."""
    tree = {pid}
    while True:
        for p in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGSTOP)
        grown = {pid} | _descendants(pid)
        if grown == tree:
            break
        tree = grown
    for p in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)


@pytest.mark.image
def test_a_killed_build_is_cleaned_up_by_the_next(tmp_path: Path) -> None:
    """SIGKILL (no cleanup possible) while the chroot's mounts are live: the next build
    unmounts and removes what the dead one left, before it starts its own."""
    require_build_host()
    from bootstrap.image.workspace import mounts_under

    before = set(Path("/var/tmp").glob("nodesmith-image-*"))
    first = subprocess.Popen(
        [NODESMITH, "image", "build", DEF, "--output", str(tmp_path / "first")],
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    work: set[Path] = set()
    while not any(mounts_under(w) for w in work):
        assert time.monotonic() < deadline and first.poll() is None, "the build never mounted"
        time.sleep(0.5)
        work = set(Path("/var/tmp").glob("nodesmith-image-*")) - before
    kill_tree(first.pid)  # the build and every step it started (each in its own session)
    first.wait()
    (dead,) = work
    assert mounts_under(dead) and list(tmp_path.glob(".first.partial-*"))

    second = subprocess.Popen(
        [NODESMITH, "image", "build", DEF, "--output", str(tmp_path / "second")],
        stderr=subprocess.PIPE,
        text=True,
    )
    assert second.stderr is not None
    said = ""
    for line in second.stderr:
        said += line
        if "rootfs ..." in line:
            break
    second.send_signal(signal.SIGTERM)
    said += second.stderr.read()
    assert second.wait(timeout=120) == 128 + signal.SIGTERM, said
    assert f"removed {dead}: left by a build that was killed" in said
    assert not dead.exists() and mounts_under(dead) == []
    assert not list(tmp_path.glob(".*.partial-*"))
    assert set(Path("/var/tmp").glob("nodesmith-image-*")) <= before


@pytest.mark.parametrize(
    ("definition", "flags", "named", "found"),
    [
        ("debian-12", ["--containerd-version", "2.1"], "containerd.version wants 2.1",
         "suite bookworm has containerd 1.6."),
        ("debian-13", ["--containerd-config-version", "3"], "containerd.config_version 3",
         "cannot be read by containerd 1.7."),
        ("debian-12", ["--containerd-source", "dir:{sid}", "--containerd-version", "1.6"],
         "containerd.version wants 1.6", "has containerd 2."),
        ("debian-12", ["--containerd-source", "dir:{missing}"], "containerd.source",
         "is not a directory"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("builder", ["chroot", "packer-qemu"])
def test_a_containerd_the_source_lacks_stops_before_install(
    tmp_path: Path, builder: str, definition: str, flags: list[str], named: str, found: str
) -> None:
    """Asked of the suite's fresh apt lists (or the dir: .deb) before any root or VM."""
    from image_build import containerd_dir

    args = [f.format(sid=containerd_dir("sid"), missing=tmp_path / "none") for f in flags]
    out = tmp_path / "out"
    t0 = time.monotonic()
    proc = nodesmith("image", "build", str(REPO / f"images/{definition}.yaml"), *args,
                     "--output", str(out), "--builder", builder)  # fmt: skip
    assert proc.returncode == 65, proc.stderr
    assert time.monotonic() - t0 < 60  # at most an apt-get update: no root, no VM
    assert named in proc.stderr and found in proc.stderr, proc.stderr
    assert "rootfs" not in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists() and not list(tmp_path.glob(".out.partial-*"))
