"""What a render takes (:class:`RenderOptions`) and gives (:class:`RenderResult`).

These sit below the pipeline so every caller (the CLI, the HTTP service, the VM tools) can
name them without importing the engine that fills them.
"""

from __future__ import annotations

import gzip
import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from bootstrap.manifest import ImageManifest

AWS_USERDATA_LIMIT = 16 * 1024


@dataclass(frozen=True)
class StatusReport:
    """Where the node reports its phases, and the per-Machine credential it reports with
    (``bootstrap.controller.reports``). Secret: redacted from the node's logs."""

    url: str
    credential: str
    ca: str | None = None  # PEM that signed the endpoint's certificate; None: the node's store

    def __repr__(self) -> str:
        return f"StatusReport(url={self.url!r}, credential=<redacted>, ca={bool(self.ca)})"


@dataclass(frozen=True)
class RenderOptions:
    """Knobs a caller may set; the defaults are what a machine controller wants."""

    unsafe_skip_ca_verification: bool = False
    image_manifest: ImageManifest | None = None
    allow_runtime_install: bool = False
    gzip: bool = False
    token_ttl: timedelta = timedelta(minutes=15)
    now: datetime | None = None
    status_report: StatusReport | None = None

    def clock(self) -> datetime:
        return self.now or datetime.now(UTC)


@dataclass
class RenderResult:
    """What a render produced for one Machine."""

    machine: str  # "namespace/name"
    config_name: str
    namespace: str
    cluster_name: str
    role: str  # "init-control-plane" | "join-control-plane" | "worker-join"
    format: str  # "cloud-config"
    userdata: bytes  # the plain rendered document
    gzipped: bool = False
    warnings: list[str] = field(default_factory=list)
    config_uid: str | None = None
    config_kind: str = "KubeadmConfig"
    config_api_version: str = "bootstrap.cluster.x-k8s.io/v1beta1"
    bootstrap_token_secret: dict[str, Any] | None = None
    generated_secrets: list[dict[str, Any]] = field(default_factory=list)

    @property
    def value(self) -> bytes:
        """The bytes to hand to the machine: gzipped when asked for."""
        return gzip.compress(self.userdata, mtime=0) if self.gzipped else self.userdata

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.value).hexdigest()
