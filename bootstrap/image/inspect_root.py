"""Read back what a built root holds (OS, kernel, packages) for the manifest."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from bootstrap.manifest import OSInfo


def os_release(root: Path) -> OSInfo:
    fields: dict[str, str] = {}
    for name in ("etc/os-release", "usr/lib/os-release"):
        p = root / name
        if p.is_file():
            for line in p.read_text(encoding="utf-8").splitlines():
                k, sep, v = line.partition("=")
                if sep:
                    fields[k] = v.strip().strip('"')
            break
    return OSInfo(
        id=fields.get("ID", "unknown"),
        versionId=fields.get("VERSION_ID", ""),
        prettyName=fields.get("PRETTY_NAME", ""),
    )


def packages(root: Path) -> dict[str, str]:
    """name -> version of every installed package, as dpkg sees the root's database.

    The host's dpkg-query reads it (``--admindir``), so ``root`` may be a full root or the
    few files ``diskfs.extract`` copied out of a disk.
    """
    out = subprocess.run(
        [
            "dpkg-query",
            f"--admindir={root / 'var/lib/dpkg'}",
            "-W",
            "-f",
            "${db:Status-Abbrev}\t${Package}\t${Version}\n",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    pkgs: dict[str, str] = {}
    for line in out.splitlines():
        status, name, version = line.split("\t")
        if status[1:2] == "i":  # installed; the first letter is the wish (h = held)
            pkgs[name] = version
    return dict(sorted(pkgs.items()))


def kernel(root: Path) -> str | None:
    """The release the /vmlinuz symlink points at, e.g. ``6.1.0-57-cloud-amd64``."""
    link = root / "vmlinuz"
    target = link.resolve() if link.is_symlink() else None
    name = target.name if target else ""
    if not name:
        found = sorted((root / "boot").glob("vmlinuz-*"))
        name = found[-1].name if found else ""
    m = re.match(r"vmlinuz-(.+)", name)
    return m.group(1) if m else None
