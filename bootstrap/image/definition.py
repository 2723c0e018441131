"""The image definition (``images/*.yaml``) and the build options, validated up front.

Everything a build depends on is resolved here, before any slow stage runs, so a typo in a
flag or the YAML fails in a second with a message naming the field, not after five minutes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bootstrap.errors import TerminalError, UsageError, bad_usage, invalid
from bootstrap.image.containerd import Choice, parse
from bootstrap.image.defaults import DEFAULTS

FORMATS = ("qcow2", "raw", "box")
OCI_RUNTIMES = ("runc", "crun")
RUNTIMES = ("containerd",)
BUILDERS = ("chroot", "packer-qemu")
#: cloud-init's datasource names (its ``DataSource<Name>`` modules) an image may name.
DATASOURCES = (
    "NoCloud", "ConfigDrive", "OpenStack", "Ec2", "GCE", "Azure", "Oracle", "AliYun",
    "CloudStack", "CloudSigma", "DigitalOcean", "Exoscale", "Hetzner", "IBMCloud", "LXD",
    "MAAS", "OpenNebula", "OVF", "Scaleway", "UpCloud", "Vultr", "VMware",
)  # fmt: skip
_VERSION_RE = re.compile(r"^v\d+\.\d+\.\d+$")
_SIZE_RE = re.compile(r"^(\d+)([MG])$")


@dataclass(frozen=True)
class Definition:
    """One OS image definition as read from YAML."""

    path: Path
    name: str
    os: str
    suite: str
    variant: str
    arch: str
    disk_size_mib: int
    packages: tuple[str, ...]
    components: tuple[str, ...]
    defaults: dict[str, Any]
    text: str
    # The ``containerd:`` mapping as written (see bootstrap.image.containerd.parse).
    containerd: Any = None


@dataclass(frozen=True)
class KubernetesSource:
    """Where kubelet/kubeadm/kubectl come from: pkgs, http, dir (with ``path``) or none."""

    kind: str
    path: Path | None = None

    def __str__(self) -> str:
        return f"dir:{self.path}" if self.kind == "dir" else self.kind


@dataclass(frozen=True)
class Options:
    """The resolved command-line options of one build."""

    kubernetes_version: str
    kubernetes_source: KubernetesSource
    runtime: str
    oci_runtime: str
    formats: tuple[str, ...]
    builder: str
    output: Path
    mirror: str | None
    sandbox_image: str
    cache_dir: Path
    work_parent: Path
    extra: dict[str, str] = field(default_factory=dict)
    # A directory of image archives + SHA256SUMS to import into containerd (air-gapped).
    preload_images: Path | None = None
    containerd: Choice = field(default_factory=Choice)
    datasources: tuple[str, ...] = DEFAULTS.datasources


def _need(raw: dict[str, Any], key: str, src: str) -> Any:
    if key not in raw:
        raise TerminalError(
            "required field is missing", obj=src, field=key, reason="ImageDefinitionInvalid"
        )
    return raw[key]


def parse_size(value: Any, src: str) -> int:
    """``4G`` / ``3072M`` -> MiB."""
    m = _SIZE_RE.match(str(value))
    if not m:
        raise invalid(src, "disk_size", value, "must look like 4G or 3072M")
    n = int(m.group(1))
    mib = n * 1024 if m.group(2) == "G" else n
    if mib < 2048:
        raise invalid(src, "disk_size", value, "must be at least 2G")
    return mib


def load_definition(path: str | Path) -> Definition:
    """Read and check an image definition YAML."""
    p = Path(path)
    src = str(p)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise TerminalError(
            f"cannot read image definition: {exc.strerror}",
            obj=src,
            reason="ImageDefinitionUnreadable",
        ) from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TerminalError(
            f"image definition is not YAML: {exc}", obj=src, reason="ImageDefinitionInvalid"
        ) from None
    if not isinstance(raw, dict):
        raise TerminalError(
            "image definition must be a mapping", obj=src, reason="ImageDefinitionInvalid"
        )
    packages = _need(raw, "packages", src)
    if not isinstance(packages, list) or not all(
        isinstance(x, str) and re.fullmatch(r"[a-z0-9][a-z0-9+.\-]+", x) for x in packages
    ):
        raise invalid(src, "packages", packages, "must be a list of Debian package names")
    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise invalid(src, "defaults", defaults, "must be a mapping")
    parse(raw.get("containerd"), src, {})  # a typo fails here, before any flag is read
    arch = str(raw.get("arch", "amd64"))
    if arch != "amd64":
        raise invalid(src, "arch", arch, "only amd64 is supported")
    return Definition(
        path=p.resolve(),
        name=str(_need(raw, "name", src)),
        os=str(_need(raw, "os", src)),
        suite=str(_need(raw, "suite", src)),
        variant=str(raw.get("variant", "apt")),
        arch=arch,
        disk_size_mib=parse_size(raw.get("disk_size", "4G"), src),
        packages=tuple(packages),
        components=tuple(raw.get("components") or ["main"]),
        defaults=dict(defaults),
        text=text,
        containerd=raw.get("containerd"),
    )


def parse_kubernetes_source(value: str) -> KubernetesSource:
    """``pkgs`` | ``http`` | ``dir:PATH`` | ``none``; a dir must exist and hold SHA256SUMS."""
    if value in ("pkgs", "http", "none"):
        return KubernetesSource(value)
    if value.startswith("dir:"):
        d = Path(value[4:]).expanduser().resolve()
        if not d.is_dir():
            raise UsageError(f"--kubernetes-source {value}: {d} is not a directory")
        if not (d / "SHA256SUMS").is_file():
            raise TerminalError(
                f"{d / 'SHA256SUMS'} is missing; a dir: source needs one",
                obj=f"--kubernetes-source {value}",
                reason="ChecksumsMissing",
            )
        return KubernetesSource("dir", d)
    raise bad_usage("--kubernetes-source", value, "must be pkgs, http, dir:PATH or none")


def check_version(value: str) -> str:
    if not _VERSION_RE.match(value):
        raise bad_usage("--kubernetes-version", value, "must look like v1.31.4")
    return value


def parse_formats(value: str | list[str]) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else list(value)
    out: list[str] = []
    for item in (i.strip() for i in items):
        if item not in FORMATS:
            raise bad_usage("--format", item, f"accepts {', '.join(FORMATS)}")
        if item not in out:
            out.append(item)
    if not out:
        raise UsageError("--format needs at least one format")
    return tuple(out)


def parse_datasources(value: object, field_name: str = "--datasources") -> tuple[str, ...]:
    """The cloud-init datasources the image boots on, in order: a comma list (the flag) or a
    list of names (``defaults.datasources`` in the definition; ``field_name`` says which, for
    the message). cloud-init's ``None`` (boot with no datasource at all) always comes last
    and is added by the role, so it is not named here; one name means cloud-init's
    ds-identify probes nothing at first boot."""
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, list) and all(isinstance(i, str) for i in value):
        items = value
    else:
        raise bad_usage(field_name, value, "must be a list of cloud-init datasource names")
    out: list[str] = []
    for item in (i.strip() for i in items if i.strip()):
        if item == "None":
            raise bad_usage(field_name, item, "needs no None: it is always added last")
        if item not in DATASOURCES:
            near = [n for n in DATASOURCES if n.lower() == item.lower()]
            why = f"means {near[0]}" if near else f"accepts {', '.join(DATASOURCES)}"
            raise bad_usage(field_name, item, why)
        if item not in out:
            out.append(item)
    if not out:
        raise bad_usage(field_name, value, "needs at least one datasource")
    return tuple(out)


def choose(value: str | None, allowed: tuple[str, ...], flag: str, default: str) -> str:
    v = value or default
    if v not in allowed:
        raise bad_usage(flag, v, f"accepts {', '.join(allowed)}")
    return v
