"""Kubernetes node binaries: the ``dir:`` source's SHA256SUMS check and version checks.

A wrong hash is terminal and is raised before anything is installed (the build checks the
directory before the root filesystem even exists; the kubernetes role checks it again before
it adds an operation). The message names the file and both hashes.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from bootstrap.checksums import read_sums, sha256_file
from bootstrap.errors import TerminalError

BINARIES = ("kubelet", "kubeadm", "kubectl")
# Tools a ``dir:`` source may carry beside them (kubeadm's preflight looks for crictl; no
# Debian 12 package ships it). They are checked by sha256 too, but have their own versions.
TOOLS = ("crictl",)
HTTP_BASE = "https://dl.k8s.io/release"
PKGS_BASE = "https://pkgs.k8s.io/core:/stable:"


def verify_dir(directory: Path) -> dict[str, Path]:
    """Check every Kubernetes binary in ``directory`` against its SHA256SUMS line.

    Returns the binaries present (a subset of kubelet/kubeadm/kubectl, plus crictl when
    the directory has it), all verified.
    """
    sums_path = directory / "SHA256SUMS"
    if not sums_path.is_file():
        raise TerminalError("SHA256SUMS is missing", obj=str(directory), reason="ChecksumsMissing")
    sums = read_sums(sums_path)
    found: dict[str, Path] = {}
    for name in (*BINARIES, *TOOLS):
        path = directory / name
        if not path.is_file():
            continue
        if name not in sums:
            raise TerminalError(
                f"{path} has no line in {sums_path}", obj=str(path), reason="ChecksumMissing"
            )
        actual = sha256_file(path)
        if actual != sums[name]:
            raise TerminalError(
                f"sha256 mismatch for {path}: SHA256SUMS says {sums[name]}, file has {actual}",
                obj=str(path),
                reason="ChecksumMismatch",
            )
        found[name] = path
    if not set(found) & set(BINARIES):
        raise TerminalError(
            f"none of {', '.join(BINARIES)} is in the directory",
            obj=str(directory),
            reason="NoKubernetesBinaries",
        )
    return found


def binary_version(name: str, path: Path) -> str:
    """The version a kubelet/kubeadm/kubectl binary reports (``v1.31.4``)."""
    argv = {
        "kubectl": [str(path), "version", "--client", "-o", "json"],
        "kubeadm": [str(path), "version", "-o", "short"],
        "kubelet": [str(path), "--version"],
    }[name]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except OSError as exc:
        raise TerminalError(
            f"cannot run {path}: {exc.strerror}", obj=str(path), reason="BinaryUnusable"
        ) from None
    if proc.returncode != 0:
        raise TerminalError(
            f"{path} failed to report its version: {proc.stderr.strip()[:200]}",
            obj=str(path),
            reason="BinaryUnusable",
        )
    if name == "kubectl":
        return str(json.loads(proc.stdout)["clientVersion"]["gitVersion"])
    m = re.search(r"v\d+\.\d+\.\d+\S*", proc.stdout)
    if not m:
        raise TerminalError(
            f"{path} printed no version: {proc.stdout.strip()[:80]!r}",
            obj=str(path),
            reason="BinaryUnusable",
        )
    return m.group(0)


def check_versions(binaries: dict[str, Path], requested: str) -> dict[str, str]:
    """Every binary must be exactly ``requested``; returns name -> version."""
    versions: dict[str, str] = {}
    for name, path in binaries.items():
        if name in TOOLS:
            continue
        got = binary_version(name, path)
        if got != requested:
            raise TerminalError(
                f"{path} is {got}, but --kubernetes-version asks for {requested}",
                obj=str(path),
                field="--kubernetes-version",
                reason="VersionMismatch",
            )
        versions[name] = got
    return versions


def deb_version(version: str) -> str:
    """pkgs.k8s.io package version for ``v1.31.4``: ``1.31.4-1.1``."""
    return f"{version.lstrip('v')}-1.1"


def series(version: str) -> str:
    return ".".join(version.split(".")[:2])
