"""Kubernetes versions and the kubeadm configuration API version each one needs.

kubeadm.k8s.io/v1beta3 serves 1.22 to 1.30; v1beta4 is used from 1.31 (v1beta3 is removed
in 1.37). Older Kubernetes needs v1beta2 or older, which nodesmith does not write.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bootstrap.errors import ObjectRef, TerminalError, show_value

V1BETA3 = "kubeadm.k8s.io/v1beta3"
V1BETA4 = "kubeadm.k8s.io/v1beta4"
OLDEST = (1, 22)
FIRST_V1BETA4 = (1, 31)

_SEMVER = re.compile(
    r"^v?(?P<major>0|[1-9]\d*)\.(?P<minor>0|[1-9]\d*)(?:\.(?P<patch>0|[1-9]\d*))?"
    r"(?P<rest>(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?)$"
)


@dataclass(frozen=True)
class KubeVersion:
    major: int
    minor: int
    patch: int
    rest: str = ""

    def __str__(self) -> str:
        return f"v{self.major}.{self.minor}.{self.patch}{self.rest}"

    @property
    def kubeadm_api(self) -> str:
        return V1BETA4 if (self.major, self.minor) >= FIRST_V1BETA4 else V1BETA3


def parse_version(text: str | None, obj: ObjectRef, field: str) -> KubeVersion:
    """Parse a Machine's version (tolerantly, like semver.ParseTolerant) into ``vX.Y.Z``."""
    if not text:
        raise TerminalError(
            "is required: it picks the kubeadm API version and the kubelet to run",
            obj=obj,
            field=field,
            reason="VersionMissing",
        )
    match = _SEMVER.match(text.strip()) if isinstance(text, str) else None
    if not match:
        raise TerminalError(
            f"is not a Kubernetes version like v1.31.4 (got {show_value(text)})",
            obj=obj,
            field=field,
            reason="InvalidVersion",
        )
    version = KubeVersion(
        int(match["major"]), int(match["minor"]), int(match["patch"] or 0), match["rest"]
    )
    if (version.major, version.minor) < OLDEST:
        raise TerminalError(
            f"Kubernetes {version} is too old: nodesmith writes kubeadm {V1BETA3} (1.22+) and "
            f"{V1BETA4} (1.31+)",
            obj=obj,
            field=field,
            reason="UnsupportedVersion",
        )
    return version
