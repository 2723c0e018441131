"""Kubernetes versions and the kubeadm configuration API version each one needs.

kubeadm.k8s.io/v1beta2 serves 1.15 to 1.21 (as CABPK's older releases wrote it), v1beta3
1.22 to 1.30, and v1beta4 is used from 1.31 (v1beta3 is removed in 1.37). Kubernetes older
than 1.15 only reads v1beta1, which nodesmith does not write.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bootstrap.errors import ObjectRef, TerminalError, invalid

V1BETA2 = "kubeadm.k8s.io/v1beta2"
V1BETA3 = "kubeadm.k8s.io/v1beta3"
V1BETA4 = "kubeadm.k8s.io/v1beta4"
OLDEST = (1, 15)
FIRST_V1BETA3 = (1, 22)
FIRST_V1BETA4 = (1, 31)

_SEMVER = re.compile(
    r"^v?(?P<major>0|[1-9]\d{0,8})\.(?P<minor>0|[1-9]\d{0,8})(?:\.(?P<patch>0|[1-9]\d{0,8}))?"
    r"(?P<rest>(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?)$",
    re.ASCII,  # \d is 0-9 only; at most 9 digits a part, so int() is cheap and cannot fail
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
        minor = (self.major, self.minor)
        if minor >= FIRST_V1BETA4:
            return V1BETA4
        return V1BETA3 if minor >= FIRST_V1BETA3 else V1BETA2


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
        raise invalid(
            obj,
            field,
            text,
            "is not a Kubernetes version like v1.31.4",
            reason="InvalidVersion",
        )
    version = KubeVersion(
        int(match["major"]), int(match["minor"]), int(match["patch"] or 0), match["rest"]
    )
    if (version.major, version.minor) < OLDEST:
        raise TerminalError(
            f"Kubernetes {version} is too old: nodesmith writes kubeadm {V1BETA2} (1.15+), "
            f"{V1BETA3} (1.22+) and {V1BETA4} (1.31+)",
            obj=obj,
            field=field,
            reason="UnsupportedVersion",
        )
    return version
