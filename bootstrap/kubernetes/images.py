"""Container image archives for kubeadm's static pods, packed from files on this machine.

Each image is one layer in a ``docker save`` archive (manifest.json + config + layer.tar),
which ``ctr -n k8s.io images import`` reads. A layer holds the binary under /usr/local/bin,
the shared libraries ``ldd`` names for it (etcd and iptables are dynamically linked), and
whatever extra files the image needs. Archives are reproducible: fixed mtimes and owners,
sorted entries, so the same inputs give the same sha256.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import subprocess
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from bootstrap.errors import TerminalError

PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_LDD_LINE = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)")


@dataclass
class ImageSpec:
    """One image: its reference, its files (path in image -> path here) and symlinks."""

    ref: str
    files: dict[str, Path] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    entrypoint: list[str] | None = None

    @property
    def archive_name(self) -> str:
        """``kube-apiserver_v1.20.2.tar``: the repository's last part and the tag."""
        name, _, tag = self.ref.rpartition(":")
        return f"{name.rsplit('/', 1)[-1]}_{tag}.tar"


def shared_libraries(binary: Path) -> list[Path]:
    """The libraries (and loader) ``ldd`` resolves for ``binary``; none for a static one."""
    done = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        if "not a dynamic executable" in done.stdout + done.stderr:
            return []
        raise TerminalError(
            f"ldd failed: {done.stderr.strip() or done.stdout.strip()}",
            obj=str(binary),
            reason="LddFailed",
        )
    return [Path(m.group(1)) for m in map(_LDD_LINE.search, done.stdout.splitlines()) if m]


def add_binary(spec: ImageSpec, binary: Path, dest: str = "/usr/local/bin") -> None:
    """Put ``binary`` at ``dest`` and its libraries at their own paths."""
    spec.files[f"{dest}/{binary.name}"] = binary
    for lib in shared_libraries(binary):
        spec.files[str(lib)] = lib.resolve()


def _dirs_of(paths: Iterable[str]) -> list[str]:
    dirs: set[str] = set()
    for path in paths:
        parent = PurePosixPath(path).parent
        while str(parent) not in ("/", "."):
            dirs.add(str(parent))
            parent = parent.parent
    return sorted(dirs)


def _info(name: str, kind: bytes, mode: int, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name.lstrip("/"))
    info.type, info.mode, info.size = kind, mode, size
    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "root", "root"
    return info


def layer_tar(spec: ImageSpec) -> bytes:
    """The image's single layer as an uncompressed, reproducible tar."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in _dirs_of([*spec.files, *spec.links]):
            tar.addfile(_info(directory, tarfile.DIRTYPE, 0o755))
        for dest in sorted(spec.files):
            source = spec.files[dest]
            data = source.read_bytes()
            mode = source.stat().st_mode & 0o7777
            tar.addfile(_info(dest, tarfile.REGTYPE, mode, len(data)), io.BytesIO(data))
        for dest in sorted(spec.links):
            info = _info(dest, tarfile.SYMTYPE, 0o777)
            info.linkname = spec.links[dest]
            tar.addfile(info)
    return buf.getvalue()


def write_archive(spec: ImageSpec, out: Path) -> Path:
    """Write ``spec`` as a docker-archive tarball in directory ``out``; returns its path."""
    layer = layer_tar(spec)
    layer_id = hashlib.sha256(layer).hexdigest()
    config: dict[str, Any] = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": [PATH_ENV]},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_id}"]},
        "history": [{"created_by": "nodesmith kubernetes build"}],
    }
    if spec.entrypoint:
        config["config"]["Entrypoint"] = spec.entrypoint
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_name = f"{hashlib.sha256(config_bytes).hexdigest()}.json"
    layer_name = f"{layer_id}/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": [spec.ref], "Layers": [layer_name]}]
    members = {
        "manifest.json": json.dumps(manifest, separators=(",", ":")).encode(),
        config_name: config_bytes,
        layer_name: layer,
    }
    path = out / spec.archive_name
    tmp = path.with_name(path.name + ".tmp")
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_info(layer_id, tarfile.DIRTYPE, 0o755))
        for name, data in members.items():
            tar.addfile(_info(name, tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
    tmp.replace(path)
    return path
