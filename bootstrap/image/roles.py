"""Stage 2: apply the pyinfra roles to a root directory (@chroot) or a machine (@ssh).

The role files are ordinary pyinfra deploys (``roles/*.py``); this module only builds the
``pyinfra`` command line and, for a chroot, mounts /proc, /sys and /dev around the run
(pyinfra's chroot connector does not) and keeps services from starting inside it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from bootstrap.errors import TerminalError
from bootstrap.progress import Progress
from bootstrap.resources import data_dir

ROLE_ORDER = ("node", "containerd", "kubernetes", "images", "cloud_init", "sysprep")


@dataclass(frozen=True)
class SSHTarget:
    host: str
    port: int
    user: str
    key: Path | None = None
    password: str | None = None


def pyinfra_bin() -> str:
    """The pyinfra beside this interpreter (the venv's), else the one on PATH."""
    local = Path(sys.executable).parent / "pyinfra"
    if local.is_file():
        return str(local)
    found = shutil.which("pyinfra")
    if not found:
        raise TerminalError("pyinfra is not installed", obj="pyinfra", reason="MissingTool")
    return found


def role_files(roles: tuple[str, ...] = ROLE_ORDER) -> list[Path]:
    base = data_dir("roles")
    return [base / f"{r}.py" for r in roles]


def data_args(data: dict[str, str]) -> list[str]:
    out: list[str] = []
    for k, v in sorted(data.items()):
        out += ["--data", f"{k}={v}"]
    return out


@contextmanager
def chroot_mounts(root: Path) -> Iterator[None]:
    """Mount /proc, /sys, /dev, /dev/pts and a /run tmpfs in ``root``; always unmount."""
    mounts = [
        (["-t", "proc", "proc"], root / "proc"),
        (["-t", "sysfs", "sysfs"], root / "sys"),
        (["--bind", "/dev"], root / "dev"),
        (["-t", "devpts", "devpts"], root / "dev/pts"),
        (["-t", "tmpfs", "tmpfs"], root / "run"),
    ]
    done: list[Path] = []
    policy = root / "usr/sbin/policy-rc.d"
    try:
        for args, target in mounts:
            target.mkdir(parents=True, exist_ok=True)
            subprocess.run(["mount", *args, str(target)], check=True, capture_output=True)
            done.append(target)
        # No service may start inside the chroot (apt would otherwise try).
        policy.write_text("#!/bin/sh\nexit 101\n", encoding="utf-8")
        policy.chmod(0o755)
        yield
    finally:
        policy.unlink(missing_ok=True)
        for target in reversed(done):
            subprocess.run(["umount", "-l", str(target)], check=False, capture_output=True)


def apply_chroot(
    root: Path, data: dict[str, str], progress: Progress, roles: tuple[str, ...] = ROLE_ORDER
) -> None:
    """Run the roles on a root directory through pyinfra's @chroot connector."""
    data = {"live": "false", "apt_update": "false", **data}
    argv = [
        pyinfra_bin(),
        "-y",
        *data_args(data),
        f"@chroot/{root}",
        *[str(p) for p in role_files(roles)],
    ]
    with chroot_mounts(root):
        progress.run(argv, what="pyinfra (chroot)")


def ssh_argv(
    target: SSHTarget, data: dict[str, str], roles: tuple[str, ...] = ROLE_ORDER
) -> list[str]:
    data = {"live": "true", "apt_update": "true", **data}
    argv = [
        pyinfra_bin(),
        "-y",
        "--sudo",
        *data_args(data),
        "--ssh-user",
        target.user,
        "--ssh-port",
        str(target.port),
    ]
    if target.key:
        argv += ["--ssh-key", str(target.key)]
    if target.password:
        argv += ["--ssh-password", target.password]
    return [*argv, target.host, *[str(p) for p in role_files(roles)]]


def apply_ssh(
    target: SSHTarget, data: dict[str, str], progress: Progress, roles: tuple[str, ...] = ROLE_ORDER
) -> None:
    """Run the same roles over SSH (a Packer builder VM or any reachable machine).

    The builder VM's host key is new by construction (Packer just booted it), so it is
    accepted on first contact into a known_hosts file private to this run, never the user's.
    """
    with tempfile.TemporaryDirectory(prefix="nodesmith-ssh-") as tmp:
        data = {
            "ssh_known_hosts_file": f"{tmp}/known_hosts",
            "ssh_strict_host_key_checking": "accept-new",
            **data,
        }
        progress.run(ssh_argv(target, data, roles), what="pyinfra (ssh)")
