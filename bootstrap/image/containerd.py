"""Which containerd an image gets, and the config that version reads.

An image definition (or ``--containerd-*``) says where containerd comes from, which version it
must be and which config version to write::

    containerd:
      source: package       # the suite's Debian package; or dir:PATH (.debs + SHA256SUMS)
      version: "1.7"        # the version the source must have (a prefix of the upstream one)
      config_version: 2     # optional: default what that version is made for (1.x: 2, 2.x: 3)

:func:`resolve` checks the choice against what the source really holds *before* anything is
installed, so asking Debian 12 for containerd 2.1, or config version 3 of a 1.x (1.6 runs on
its defaults, 1.7 refuses to start), stops the build in seconds naming the field and what was
found. :func:`config_toml` writes the config:
version 2 (``io.containerd.grpc.v1.cri``) for 1.x, version 3 (CRI split into
``io.containerd.cri.v1.images`` and ``io.containerd.cri.v1.runtime``) for 2.x; both with
systemd cgroups, the pinned sandbox image, ``/etc/containerd/certs.d`` and Debian's CNI
``bin_dir``. It imports nothing heavy: the containerd role reads it inside pyinfra.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bootstrap.errors import TerminalError, bad_usage, invalid

CONFIG_VERSIONS = (2, 3)
CNI_BIN = "/usr/lib/cni"  # where Debian's containernetworking-plugins installs them
_WANT_RE = re.compile(r"^\d+(\.\d+){0,2}$")
_UPSTREAM_RE = re.compile(r"^(?:\d+:)?(\d+\.\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class Choice:
    """What the definition and the flags ask for (nothing checked against a source yet)."""

    source: str = "package"  # "package" | "dir"
    path: Path | None = None
    version: str | None = None  # wanted upstream version prefix; None: the source's
    config_version: int | None = None  # None: the one the found version reads

    def __str__(self) -> str:
        return f"dir:{self.path}" if self.source == "dir" else self.source


@dataclass(frozen=True)
class Resolved:
    """The containerd a build installs: its Debian version, config version and, from a
    ``dir:`` source, the .deb (sha256 checked) the role installs instead of the package."""

    version: str
    config_version: int
    deb: Path | None = None

    @property
    def upstream(self) -> str:
        return upstream(self.version)


def upstream(debian_version: str) -> str:
    """``1.7.24~ds1-6+deb13u1`` -> ``1.7.24``."""
    m = _UPSTREAM_RE.match(debian_version)
    return m.group(1) if m else debian_version


def config_version_for(version: str) -> int:
    """The config version a containerd is made for: 2 for 1.x (3 is 2.0's), 3 for 2.x (which
    still reads a 2, migrating it at every start)."""
    return 3 if int(upstream(version).split(".")[0]) >= 2 else 2


def _bad(src: str, where: str, value: Any, why: str) -> Exception:
    """A flag's bad value is a usage error naming the flag; the definition's, a terminal
    error naming the file and the field."""
    return (
        bad_usage(where, value, why) if where.startswith("--") else invalid(src, where, value, why)
    )


def parse(raw: Any, src: str, flags: dict[str, str | None]) -> Choice:
    """The definition's ``containerd:`` mapping, each key overridden by its flag."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise invalid(src, "containerd", raw, "must be a mapping (source, version, config_version)")
    unknown = sorted(set(raw) - {"source", "version", "config_version"})
    if unknown:
        raise invalid(src, f"containerd.{unknown[0]}", raw[unknown[0]], "is not a known key")
    source = flags.get("source") or str(raw.get("source", "package"))
    where = "--containerd-source" if flags.get("source") else "containerd.source"
    path: Path | None = None
    if source.startswith("dir:"):
        path = Path(source[4:]).expanduser().resolve()
        source = "dir"
    elif source != "package":
        raise _bad(src, where, source, "must be package or dir:PATH")
    # A source given on the command line brings its own version: the definition's version
    # and config version describe the definition's source.
    mine = not flags.get("source") or flags.get("source") == str(raw.get("source", "package"))
    version = flags.get("version") or (str(raw["version"]) if mine and "version" in raw else None)
    if (
        mine
        and "version" in raw
        and not isinstance(raw["version"], str)
        and not flags.get("version")
    ):
        raise _bad(src, "containerd.version", raw["version"], 'must be a quoted string, e.g. "1.7"')
    if version is not None and not _WANT_RE.match(version):
        where = "--containerd-version" if flags.get("version") else "containerd.version"
        raise _bad(src, where, version, "must look like 1.7 or 2.1.4")
    cv_raw = flags.get("config_version") or (raw.get("config_version") if mine else None)
    config_version: int | None = None
    if cv_raw is not None:
        where = (
            "--containerd-config-version"
            if flags.get("config_version")
            else ("containerd.config_version")
        )
        if str(cv_raw) not in ("2", "3"):
            raise _bad(src, where, cv_raw, "must be 2 (containerd 1.x) or 3 (containerd 2.x)")
        config_version = int(str(cv_raw))
    return Choice(source, path, version, config_version)


def check(choice: Choice, found: str | None, where: str) -> int:
    """The config version to write for ``found`` (the source's containerd version), or a
    terminal error naming the field and what the source has."""
    if found is None:
        raise TerminalError(
            f"{where} has no containerd package",
            obj="image definition",
            field="containerd.source",
            reason="ContainerdMissing",
        )
    have = upstream(found)
    if choice.version and not (have == choice.version or have.startswith(choice.version + ".")):
        raise TerminalError(
            f"containerd.version wants {choice.version}, but {where} has containerd {found}",
            obj="image definition",
            field="containerd.version",
            reason="ContainerdVersionUnavailable",
        )
    native = config_version_for(found)
    if choice.config_version is None:
        return native
    if choice.config_version > native:
        # Given a version 3 file, containerd 1.6 runs on its own defaults (cgroupfs, its own
        # pause image, /opt/cni/bin) and 1.7 refuses to start: a node that never works.
        raise TerminalError(
            f"containerd.config_version {choice.config_version} cannot be read by containerd "
            f"{found} from {where}: it reads version {native}",
            obj="image definition",
            field="containerd.config_version",
            reason="ContainerdConfigVersionUnreadable",
        )
    return choice.config_version  # 2 on containerd 2.x: read (and migrated) at every start


def run_tool(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run an apt/dpkg tool; one that is not installed is named, not a traceback."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise TerminalError(
            f"cannot run {argv[0]}: {exc.strerror} (scripts/setup installs it)",
            obj="image build",
            reason="ToolMissing",
        ) from None


def package_candidate(options: list[str]) -> str | None:
    """The containerd version apt would install from the build's lists (``apt-cache
    policy``), or None when the suite has none."""
    out = run_tool(["apt-cache", *options, "policy", "containerd"]).stdout
    m = re.search(r"^\s*Candidate:\s*(\S+)", out, re.M)
    return m.group(1) if m and m.group(1) != "(none)" else None


def dir_package(path: Path) -> tuple[Path, str]:
    """A ``dir:`` source's containerd .deb and its version, its sha256 checked first."""
    from bootstrap.checksums import read_sums, sha256_file

    if not path.is_dir():
        raise TerminalError(
            f"{path} is not a directory",
            obj="image definition",
            field="containerd.source",
            reason="ContainerdSourceMissing",
        )
    debs = sorted(path.glob("containerd_*.deb"))
    if len(debs) != 1:
        raise TerminalError(
            f"{path} must hold exactly one containerd_*.deb (found {len(debs)})",
            obj="image definition",
            field="containerd.source",
            reason="ContainerdSourceInvalid",
        )
    sums = path / "SHA256SUMS"
    want = read_sums(sums).get(debs[0].name) if sums.is_file() else None
    got = sha256_file(debs[0])
    if want != got:
        raise TerminalError(
            f"{debs[0].name}: sha256 {got} does not match {sums} ({want or 'no entry'})",
            obj="image definition",
            field="containerd.source",
            reason="ChecksumMismatch",
        )
    version = run_tool(["dpkg-deb", "--field", str(debs[0]), "Version"]).stdout.strip()
    if not version:
        raise TerminalError(
            f"{debs[0]} is not a Debian package",
            obj="image definition",
            field="containerd.source",
            reason="ContainerdSourceInvalid",
        )
    return debs[0], version


def config_toml(config_version: int, sandbox: str, binary: str = "", version: str = "") -> str:
    """``/etc/containerd/config.toml`` in the version the installed containerd reads.

    ``version``: the containerd it is for, when known. Version 3's CNI directories are the
    list ``bin_dirs`` from 2.1 on; 2.0 knows only ``bin_dir`` (which 2.1 still reads), so an
    unknown 2.x gets ``bin_dir``."""
    parts = [int(x) for x in upstream(version).split(".")[:2]] if version else []
    cni = (
        f'bin_dirs = ["{CNI_BIN}"]'
        if len(parts) == 2 and parts >= [2, 1]
        else f'bin_dir = "{CNI_BIN}"'
    )
    if config_version == 2:
        return f"""# Written by nodesmith (roles/containerd.py). containerd 1.x: config version 2.
version = 2
imports = ["/etc/containerd/conf.d/*.toml"]

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox}"

[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
  BinaryName = "{binary}"

[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "/etc/containerd/certs.d"

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "{CNI_BIN}"
  conf_dir = "/etc/cni/net.d"
"""
    return f"""# Written by nodesmith (roles/containerd.py). containerd 2.x: config version 3.
version = 3
imports = ["/etc/containerd/conf.d/*.toml"]

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "{sandbox}"

[plugins."io.containerd.cri.v1.images".registry]
  config_path = "/etc/containerd/certs.d"

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  SystemdCgroup = true
  BinaryName = "{binary}"

[plugins."io.containerd.cri.v1.runtime".cni]
  {cni}
  conf_dir = "/etc/cni/net.d"
"""
