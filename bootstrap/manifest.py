"""The image manifest: what a built node image holds, as the image builder records it.

``nodesmith image build`` writes ``manifest.json`` beside its artifacts and
``nodesmith render --image-manifest`` reads it, so a Machine that asks for a runtime or
kubelet the image does not have is refused before it boots. Both sides use this one model;
``docs/image-manifest.md`` documents the schema.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bootstrap.errors import TerminalError

SCHEMA_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class OSInfo(_Model):
    id: str
    version_id: str = Field(alias="versionId")
    pretty_name: str = Field(default="", alias="prettyName")


class OCIRuntime(_Model):
    name: str
    version: str | None = None


class Runtime(_Model):
    name: str
    version: str | None = None
    oci_runtime: OCIRuntime | None = Field(default=None, alias="ociRuntime")
    # Added by the image builder (optional, so older manifests still load).
    sandbox_image: str | None = Field(default=None, alias="sandboxImage")
    cri_socket: str | None = Field(default=None, alias="criSocket")
    # The containerd config version written (2 for containerd 1.x, 3 for 2.x).
    config_version: int | None = Field(default=None, alias="configVersion")


class KubernetesBinaries(_Model):
    kubelet: str | None = None
    kubeadm: str | None = None
    kubectl: str | None = None
    source: str = "none"


class PreloadedImage(_Model):
    """A container image imported into containerd's ``k8s.io`` namespace at build time."""

    ref: str
    digest: str
    archive: str = ""
    archive_sha256: str = Field(default="", alias="archiveSha256")


class Artifact(_Model):
    path: str
    sha256: str
    size: int


class CloudInit(_Model):
    """The datasources the image's cloud-init tries at first boot, in order (then None)."""

    datasources: list[str] = []


class ImageManifest(_Model):
    schema_version: int = Field(default=SCHEMA_VERSION, alias="schemaVersion")
    name: str = ""
    os: OSInfo | None = None
    kernel: str | None = None
    runtime: Runtime
    kubernetes: KubernetesBinaries = KubernetesBinaries()
    # Optional, so older manifests still load.
    cloud_init: CloudInit | None = Field(default=None, alias="cloudInit")
    packages: dict[str, str] = {}
    images: list[PreloadedImage] = []
    artifacts: dict[str, Artifact] = {}
    inputs_hash: str | None = Field(default=None, alias="inputsHash")
    timings: dict[str, float] = {}
    built_at: str | None = Field(default=None, alias="builtAt")

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, indent=2)

    def require_datasource(self, name: str, source: str) -> None:
        """Refuse to boot an image whose cloud-init would never read ``name`` (the NoCloud
        seed nodesmith's VMs and Vagrant boxes get): it would come up without its userdata
        and be waited on until a timeout. A manifest recording no datasources says nothing."""
        wanted = self.cloud_init.datasources if self.cloud_init else []
        if wanted and name not in wanted:
            raise TerminalError(
                f"the image's cloud-init reads {', '.join(wanted)} only, but this boot gives "
                f"it a {name} seed; build it with --datasources {name}",
                obj=source,
                field="cloudInit.datasources",
                reason="ImageDatasourceMismatch",
            )


def load_manifest(path: str | Path) -> ImageManifest:
    """Read and validate a manifest; a bad file is a terminal error naming the field."""
    source = str(path)
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise TerminalError(
            f"cannot read image manifest: {exc.strerror}",
            obj=source,
            reason="ImageManifestUnreadable",
        ) from None
    except ValueError as exc:
        raise TerminalError(
            f"image manifest is not JSON: {exc}", obj=source, reason="ImageManifestInvalid"
        ) from None
    try:
        manifest = ImageManifest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise TerminalError(
            first["msg"], obj=source, field=field, reason="ImageManifestInvalid"
        ) from None
    if manifest.schema_version != SCHEMA_VERSION:
        raise TerminalError(
            f"unsupported schemaVersion {manifest.schema_version}; this nodesmith reads "
            f"{SCHEMA_VERSION}",
            obj=source,
            field="schemaVersion",
            reason="ImageManifestInvalid",
        )
    return manifest
