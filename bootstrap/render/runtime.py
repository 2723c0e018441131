"""Which CRI runtime a Machine wants, its socket, and whether the image can give it.

The runtime is optional and defaults to containerd. It is named by the v1alpha1
``spec.versions.containerRuntime`` or by the Machine annotation
``bootstrap.nodesmith.dev/container-runtime`` (``containerd`` or ``containerd=1.7.22``).
With an image manifest, a Machine asking for something the image does not have is refused
(terminal), unless ``--allow-runtime-install`` asks for install steps instead.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from bootstrap.errors import TerminalError, invalid, show_value
from bootstrap.manifest import ImageManifest
from bootstrap.render.objects import Machine
from bootstrap.render.versions import KubeVersion

RUNTIME_ANNOTATION = "bootstrap.nodesmith.dev/container-runtime"
SOCKETS = {
    "containerd": "unix:///var/run/containerd/containerd.sock",
    "cri-o": "unix:///var/run/crio/crio.sock",
}
_ALIASES = {"containerd": "containerd", "cri-o": "cri-o", "crio": "cri-o"}


@dataclass(frozen=True)
class RuntimeChoice:
    name: str
    version: str | None
    field: str  # where it was asked for, for messages

    @property
    def socket(self) -> str:
        return SOCKETS[self.name]


def choose_runtime(machine: Machine) -> RuntimeChoice:
    if machine.runtime is not None:
        name, version = machine.runtime.name, machine.runtime.version
        where = "spec.versions.containerRuntime"
    elif RUNTIME_ANNOTATION in machine.annotations:
        raw = machine.annotations[RUNTIME_ANNOTATION]
        name, _, version_text = raw.partition("=")
        version = version_text or None
        where = f"metadata.annotations[{RUNTIME_ANNOTATION}]"
    else:
        return RuntimeChoice("containerd", None, "default")
    canonical = _ALIASES.get(name.strip().lower())
    if canonical is None:
        raise TerminalError(
            f"unknown container runtime {show_value(name)}; nodesmith knows "
            + ", ".join(sorted(SOCKETS)),
            obj=machine.ref,
            field=where,
            reason="UnknownRuntime",
        )
    if version is not None and not _plain_version(version):
        raise invalid(
            machine.ref,
            where,
            version,
            "is not a version like 1.7.22",
            reason="InvalidRuntimeVersion",
        )
    return RuntimeChoice(canonical, version.lstrip("v") if version else None, where)


def _plain_version(text: str) -> bool:
    core = text.lstrip("v")
    parts = core.split(".")
    return bool(core) and core.isascii() and all(p.isdigit() for p in parts) and len(core) < 40


def version_matches(wanted: str, have: str | None) -> bool:
    """``1.7`` matches ``1.7.22``; ``1.7.22`` matches ``1.7.22-1`` (Debian revision)."""
    if have is None:
        return False
    want_parts = wanted.lstrip("v").split(".")
    have_core = have.lstrip("v").split("-")[0].split("+")[0].split("~")[0]
    return have_core.split(".")[: len(want_parts)] == want_parts


def check_image(
    machine: Machine,
    runtime: RuntimeChoice,
    version: KubeVersion,
    manifest: ImageManifest,
    allow_install: bool,
) -> list[str]:
    """Compare the Machine's wishes with the image; return install commands when allowed."""
    install: list[str] = []
    have = manifest.runtime
    if have.name != runtime.name or (
        runtime.version and not version_matches(runtime.version, have.version)
    ):
        wanted = f"{runtime.name} {runtime.version or ''}".strip()
        got = f"{have.name} {have.version or ''}".strip()
        if not allow_install:
            raise TerminalError(
                f"asks for container runtime {wanted} but the image {manifest.name or ''} "
                f"has {got}; use an image with {wanted} or pass --allow-runtime-install",
                obj=machine.ref,
                field=runtime.field,
                reason="RuntimeMismatch",
            )
        install += runtime_install_commands(runtime)
    kubelet = manifest.kubernetes.kubelet
    if not version_matches(str(version).lstrip("v"), kubelet):
        got = kubelet or "no kubelet"
        if not allow_install:
            raise TerminalError(
                f"asks for kubelet {version} but the image {manifest.name or ''} has {got}; "
                "use a matching image or pass --allow-runtime-install",
                obj=machine.ref,
                field=machine.version_field,
                reason="KubeletMismatch",
            )
        install += kubernetes_install_commands(version)
    return install


def runtime_install_commands(runtime: RuntimeChoice) -> list[str]:
    package = {"containerd": "containerd", "cri-o": "cri-o"}[runtime.name]
    spec = f"{package}={runtime.version}*" if runtime.version else package
    return [
        "apt-get update -q",
        f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q {shlex.quote(spec)}",
        f"systemctl enable --now {'crio' if runtime.name == 'cri-o' else 'containerd'}",
    ]


def kubernetes_install_commands(version: KubeVersion) -> list[str]:
    series = f"v{version.major}.{version.minor}"
    repo = f"https://pkgs.k8s.io/core:/stable:/{series}/deb/"
    pin = f"{version.major}.{version.minor}.{version.patch}-*"
    keyring = "/etc/apt/keyrings/kubernetes-apt-keyring.gpg"
    return [
        "install -d -m 0755 /etc/apt/keyrings",
        f"curl -fsSL {repo}Release.key | gpg --dearmor -o {keyring}",
        f"echo 'deb [signed-by={keyring}] {repo} /' > /etc/apt/sources.list.d/kubernetes.list",
        "apt-get update -q",
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
        + " ".join(shlex.quote(f"{p}={pin}") for p in ("kubelet", "kubeadm", "kubectl")),
        "apt-mark hold kubelet kubeadm kubectl",
    ]
