"""Typed views of the Kubernetes objects nodesmith reads, normalised across API versions.

Three generations of Cluster API exist in the wild: the original ``cluster.k8s.io/v1alpha1``,
``cluster.x-k8s.io`` v1beta1 and v1beta2. This module turns each of them into one internal
shape (:class:`Cluster`, :class:`Machine`, :class:`KubeadmConfig`, :class:`Secret`) so the
rest of the pipeline never asks which version it was given.

Validation is by pydantic; a validation failure becomes a terminal error naming the object,
the field path and the value, never a traceback.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from bootstrap.errors import ObjectRef, TerminalError, kind_of, may_be_secret, show_value
from bootstrap.render.names import is_label, is_subdomain

CAPI_GROUP = "cluster.x-k8s.io"
LEGACY_GROUP = "cluster.k8s.io"
BOOTSTRAP_GROUP = "bootstrap.cluster.x-k8s.io"
CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
LEGACY_CLUSTER_NAME_LABEL = "cluster.k8s.io/cluster-name"
# CABPK's IsControlPlaneMachine: the label's presence, whatever its value.
CONTROL_PLANE_LABEL = "cluster.x-k8s.io/control-plane"
CONTROL_PLANE_INITIALIZED = "ControlPlaneInitialized"
# Cluster API's pause: on the Cluster (or the object itself) every controller stands still.
PAUSED_ANNOTATION = "cluster.x-k8s.io/paused"

CLUSTER_VERSIONS = {f"{CAPI_GROUP}/v1beta1", f"{CAPI_GROUP}/v1beta2", f"{LEGACY_GROUP}/v1alpha1"}
CONFIG_VERSIONS = {f"{BOOTSTRAP_GROUP}/v1beta1", f"{BOOTSTRAP_GROUP}/v1beta2"}


class _Strict(BaseModel):
    """Fields we read must have the right type; fields we do not read are ignored."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, strict=True)


class _Closed(_Strict):
    """Spec structures we honour in full: an unknown field there is a typo worth refusing."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)


class Metadata(_Strict):
    name: str = Field(min_length=1, max_length=253)
    namespace: str = "default"
    uid: str | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}

    @field_validator("namespace")
    @classmethod
    def _default_namespace(cls, value: str) -> str:
        return value or "default"


# ---------------------------------------------------------------- Cluster


def _cidr(value: str) -> str:
    """Checked for every role, not only the init that writes it: the Cluster is wrong."""
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ValueError("is not a CIDR") from None
    return value


class _Ranges(_Strict):
    cidr_blocks: list[Annotated[str, AfterValidator(_cidr)]] = Field(default=[], alias="cidrBlocks")


class _ClusterNetwork(_Strict):
    api_server_port: int | None = Field(default=None, alias="apiServerPort")
    services: _Ranges | None = None
    pods: _Ranges | None = None
    service_domain: str | None = Field(
        default=None,
        alias="serviceDomain",
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    )


class _Endpoint(_Strict):
    host: str = Field(default="", max_length=253, pattern=r"^[^\s/]*$")
    port: int = Field(default=0, ge=0, le=65535)


class _ControlPlaneRef(_Strict):
    kind: str = ""
    name: str = ""


class _ClusterSpec(_Strict):
    cluster_network: _ClusterNetwork | None = Field(default=None, alias="clusterNetwork")
    control_plane_endpoint: _Endpoint | None = Field(default=None, alias="controlPlaneEndpoint")
    control_plane_ref: _ControlPlaneRef | None = Field(default=None, alias="controlPlaneRef")
    paused: bool = False


class _Condition(_Strict):
    type: str
    status: str


class _Initialization(_Strict):
    control_plane_initialized: bool = Field(default=False, alias="controlPlaneInitialized")
    infrastructure_provisioned: bool = Field(default=False, alias="infrastructureProvisioned")


class _V1Beta2Status(_Strict):
    conditions: list[_Condition] = []


class _ClusterStatus(_Strict):
    """What says whether the control plane is initialized, in every API version's words."""

    api_endpoints: list[_Endpoint] = Field(default=[], alias="apiEndpoints")  # v1alpha1
    control_plane_initialized: bool = Field(default=False, alias="controlPlaneInitialized")
    infrastructure_ready: bool = Field(default=False, alias="infrastructureReady")  # v1beta1
    conditions: list[_Condition] = []  # v1beta1 (and v1beta2's metav1 conditions)
    initialization: _Initialization | None = None  # v1beta2
    v1beta2: _V1Beta2Status | None = None  # v1beta1 carrying v1beta2 conditions

    def initialized_by(self) -> str | None:
        """The status field that says the control plane is initialized, or None."""
        if self.initialization and self.initialization.control_plane_initialized:
            return "status.initialization.controlPlaneInitialized"
        for path, conditions in (
            ("status.conditions", self.conditions),
            ("status.v1beta2.conditions", self.v1beta2.conditions if self.v1beta2 else []),
        ):
            for condition in conditions:
                if condition.type == CONTROL_PLANE_INITIALIZED and condition.status == "True":
                    return f"{path}[{CONTROL_PLANE_INITIALIZED}]"
        if self.control_plane_initialized:
            return "status.controlPlaneInitialized"
        return None

    def provisioned(self) -> bool:
        """v1beta1's infrastructureReady, v1beta2's initialization.infrastructureProvisioned."""
        return self.infrastructure_ready or bool(
            self.initialization and self.initialization.infrastructure_provisioned
        )


class _ClusterDoc(_Strict):
    api_version: str = Field(alias="apiVersion")
    metadata: Metadata
    spec: _ClusterSpec = _ClusterSpec()
    status: _ClusterStatus | None = None


@dataclass(frozen=True)
class Cluster:
    ref: ObjectRef
    api_version: str
    pod_cidrs: tuple[str, ...]
    service_cidrs: tuple[str, ...]
    dns_domain: str | None
    endpoint_host: str
    endpoint_port: int
    endpoint_field: str  # where the endpoint came from, for messages
    provider_config: Any = None
    # The status field saying the control plane is initialized (CABPK's
    # ControlPlaneInitialized), or None: not initialized, or a Cluster with no status.
    initialized_by: str | None = None
    uid: str | None = None
    infrastructure_ready: bool = (
        False  # infrastructureReady / initialization.infrastructureProvisioned
    )
    paused: bool = False  # spec.paused or the paused annotation
    # ``spec.controlPlaneRef`` as "Kind/name" (a KubeadmControlPlane, say), or None: Machines
    # are the control plane. A control-plane provider creates the cluster CAs itself.
    control_plane_provider: str | None = None

    @property
    def initialized(self) -> bool:
        """Cluster API's ControlPlaneInitialized, in whichever API version's words."""
        return self.initialized_by is not None

    @property
    def name(self) -> str:
        return self.ref.name

    @property
    def endpoint(self) -> str | None:
        """``host:port`` when both are set (Cluster API's ``IsValid``), else None."""
        if self.endpoint_host and self.endpoint_port:
            host = self.endpoint_host
            if ":" in host and not host.startswith("["):
                host = f"[{host}]"  # IPv6 literal
            return f"{host}:{self.endpoint_port}"
        return None


def _object_name(value: str) -> str:
    if not is_subdomain(value):
        raise ValueError("must be a lowercase RFC 1123 name")
    return value


def _namespace_name(value: str) -> str:
    if not is_label(value):
        raise ValueError("must be a lowercase RFC 1123 label")
    return value


# A reference to an object that cannot exist is terminal: waiting for it would be forever.
ObjectName = Annotated[str, AfterValidator(_object_name)]
NamespaceName = Annotated[str, AfterValidator(_namespace_name)]


# ---------------------------------------------------------------- Machine


class _ConfigRef(_Strict):
    api_version: str | None = Field(default=None, alias="apiVersion")
    api_group: str | None = Field(default=None, alias="apiGroup")
    kind: str = "KubeadmConfig"
    name: ObjectName
    namespace: NamespaceName | None = None


class _Bootstrap(_Strict):
    config_ref: _ConfigRef | None = Field(default=None, alias="configRef")
    data_secret_name: ObjectName | None = Field(default=None, alias="dataSecretName")


class _RuntimeVersion(_Strict):
    name: str = Field(min_length=1)
    version: str | None = None


class _LegacyVersions(_Strict):
    kubelet: str = Field(min_length=1)
    control_plane: str | None = Field(default=None, alias="controlPlane")
    container_runtime: _RuntimeVersion | None = Field(default=None, alias="containerRuntime")


class _MachineSpec(_Strict):
    cluster_name: ObjectName | None = Field(default=None, alias="clusterName")
    bootstrap: _Bootstrap | None = None
    version: str | None = None
    versions: _LegacyVersions | None = None
    # v1alpha1's opaque provider blob: providerConfig (2018), renamed providerSpec later in 2018
    provider_config: Any = Field(default=None, alias="providerConfig")
    provider_spec: Any = Field(default=None, alias="providerSpec")
    failure_domain: str | None = Field(default=None, alias="failureDomain")


class _MachineStatus(_Strict):
    node_ref: dict[str, Any] | None = Field(default=None, alias="nodeRef")


class _MachineDoc(_Strict):
    api_version: str = Field(alias="apiVersion")
    metadata: Metadata
    spec: _MachineSpec
    status: _MachineStatus | None = None


@dataclass(frozen=True)
class Machine:
    ref: ObjectRef
    api_version: str
    cluster_name: str | None
    cluster_field: str
    version: str | None
    version_field: str
    config_ref: _ConfigRef | None
    runtime: _RuntimeVersion | None
    annotations: dict[str, str]
    provider_config: Any = None
    uid: str | None = None
    control_plane: bool = False  # CABPK's IsControlPlaneMachine
    control_plane_version: str | None = None  # v1alpha1 ``spec.versions.controlPlane``
    has_node: bool = False  # ``status.nodeRef``: the node joined; its bootstrap token may expire

    @property
    def name(self) -> str:
        return self.ref.name

    @property
    def seed(self) -> bool:
        """A ``cluster.k8s.io/v1alpha1`` Machine: the 2018 API, which had no bootstrap config;
        it renders from its own ``spec.versions`` and its Cluster."""
        return self.api_version.startswith(LEGACY_GROUP + "/")


# ---------------------------------------------------------------- KubeadmConfig


class SecretKeyRef(_Closed):
    name: ObjectName
    key: str = Field(min_length=1)


class _SecretSource(_Closed):
    secret: SecretKeyRef


class File(_Closed):
    path: str = Field(min_length=1, max_length=512)
    owner: str | None = None
    permissions: str | None = None
    encoding: Literal["base64", "gzip", "gzip+base64"] | None = None
    append: bool | None = None
    content: str | None = None
    content_from: _SecretSource | None = Field(default=None, alias="contentFrom")
    content_format: Literal["Raw", ""] | None = Field(default=None, alias="contentFormat")

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or "\x00" in value or "\n" in value:
            raise ValueError("must be an absolute path on one line")
        return value

    @field_validator("permissions")
    @classmethod
    def _octal(cls, value: str | None) -> str | None:
        if value is None:
            return value
        digits = value[1:] if value.startswith("0o") else value
        if not (3 <= len(digits) <= 4) or any(c not in "01234567" for c in digits):
            raise ValueError("must be an octal mode such as '0644'")
        return "0" + digits[-3:] if len(digits) == 3 else digits

    @field_validator("owner")
    @classmethod
    def _owner(cls, value: str | None) -> str | None:
        if value is not None and (not value or any(c in value for c in " \n\t\x00")):
            raise ValueError("must be 'user' or 'user:group'")
        return value


class User(_Closed):
    name: str = Field(min_length=1, max_length=32, pattern=r"^[a-z_][a-z0-9_.-]*\$?$")
    gecos: str | None = None
    groups: str | None = None
    home_dir: str | None = Field(default=None, alias="homeDir")
    inactive: bool | None = None
    shell: str | None = None
    passwd: str | None = None
    passwd_from: _SecretSource | None = Field(default=None, alias="passwdFrom")
    primary_group: str | None = Field(default=None, alias="primaryGroup")
    lock_password: bool | None = Field(default=None, alias="lockPassword")
    sudo: str | None = None
    ssh_authorized_keys: list[str] = Field(default=[], alias="sshAuthorizedKeys")


class NTP(_Closed):
    servers: list[str] = []
    enabled: bool | None = None


class _DiskLayout(_Closed):
    percentage: int = Field(ge=0, le=100)
    partition_type: str | None = Field(default=None, alias="partitionType")


class Partition(_Closed):
    device: str = Field(min_length=1)
    layout: bool = False
    disk_layout: list[_DiskLayout] = Field(default=[], alias="diskLayout")
    overwrite: bool | None = None
    table_type: Literal["mbr", "gpt"] | None = Field(default=None, alias="tableType")


class Filesystem(_Closed):
    device: str = Field(min_length=1)
    filesystem: str = Field(min_length=1)
    label: str | None = None
    partition: str | None = None
    overwrite: bool | None = None
    replace_fs: str | None = Field(default=None, alias="replaceFS")
    extra_opts: list[str] = Field(default=[], alias="extraOpts")


class DiskSetup(_Closed):
    partitions: list[Partition] = []
    filesystems: list[Filesystem] = []


class KubeadmConfigSpec(_Closed):
    cluster_configuration: dict[str, Any] | None = Field(default=None, alias="clusterConfiguration")
    init_configuration: dict[str, Any] | None = Field(default=None, alias="initConfiguration")
    join_configuration: dict[str, Any] | None = Field(default=None, alias="joinConfiguration")
    files: list[File] = Field(default=[], max_length=200)
    disk_setup: DiskSetup | None = Field(default=None, alias="diskSetup")
    mounts: list[list[str]] = Field(default=[], max_length=100)
    boot_commands: list[str] = Field(default=[], alias="bootCommands", max_length=1000)
    pre_kubeadm_commands: list[str] = Field(default=[], alias="preKubeadmCommands", max_length=1000)
    post_kubeadm_commands: list[str] = Field(
        default=[], alias="postKubeadmCommands", max_length=1000
    )
    users: list[User] = Field(default=[], max_length=100)
    ntp: NTP | None = None
    format: Literal["cloud-config", "ignition", ""] | None = None
    verbosity: int | None = Field(default=None, ge=0, le=10)
    use_experimental_retry_join: bool | None = Field(default=None, alias="useExperimentalRetryJoin")
    ignition: dict[str, Any] | None = None

    @field_validator("boot_commands", "pre_kubeadm_commands", "post_kubeadm_commands")
    @classmethod
    def _command_length(cls, value: list[str]) -> list[str]:
        for command in value:
            if len(command) > 10240:
                raise ValueError("each command is at most 10240 characters")
        return value


class _ConfigDoc(_Strict):
    api_version: str = Field(alias="apiVersion")
    metadata: Metadata
    spec: KubeadmConfigSpec = KubeadmConfigSpec()


@dataclass(frozen=True)
class KubeadmConfig:
    ref: ObjectRef
    api_version: str
    uid: str | None
    spec: KubeadmConfigSpec
    jinja: bool = False  # the spec uses cloud-init's Jinja ({{ ds.meta_data.local_hostname }})


_JINJA_MARKS = ("{{", "{%")


def uses_jinja(value: Any) -> bool:
    """Whether any string in ``value`` holds a Jinja expression or statement.

    CAPI templates for AWS, Azure, OpenStack and vSphere write ``{{ ds.meta_data.* }}`` and
    ``{{ v1.local_hostname }}`` into kubeadm fields and commands; cloud-init expands them only
    under a ``## template: jinja`` header.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if any(mark in item for mark in _JINJA_MARKS):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


# ---------------------------------------------------------------- Secret


class _SecretDoc(_Strict):
    metadata: Metadata
    type: str | None = None
    data: dict[str, str] | None = None
    string_data: dict[str, str] | None = Field(default=None, alias="stringData")


@dataclass(frozen=True)
class Secret:
    ref: ObjectRef
    data: dict[str, bytes] = field(repr=False)
    type: str | None = None

    def tls(self, needs_key: bool = True) -> tuple[bytes, bytes | None]:
        """``tls.crt`` and ``tls.key``; one that is needed and absent is terminal, naming it."""
        cert, key = self.data.get("tls.crt"), self.data.get("tls.key")
        if not cert or (needs_key and not key):
            missing = "tls.crt" if not cert else "tls.key"
            raise TerminalError(
                f"has no {missing}", obj=self.ref, field=f"data[{missing}]", reason="InvalidSecret"
            )
        return cert, key


# ---------------------------------------------------------------- parsing


def _ref_of(doc: dict[str, Any], kind: str) -> ObjectRef:
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    ns = meta.get("namespace") if isinstance(meta, dict) else None
    return ObjectRef(
        kind,
        ns if isinstance(ns, str) and ns else "default",
        name if isinstance(name, str) and name else "<unnamed>",
    )


def _validate(model: type[_Strict], doc: dict[str, Any], ref: ObjectRef) -> Any:
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        raise validation_error(exc, ref) from None
    except RecursionError:
        raise TerminalError("object nests too deeply", obj=ref, reason="InvalidObject") from None


def validation_error(exc: ValidationError, ref: ObjectRef) -> TerminalError:
    """The first pydantic error as a terminal error: field path, reason, offending value."""
    first = exc.errors(include_url=False)[0]
    path = ""
    for part in first["loc"]:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        # A typo'd field can be any field, a password too: name it, never show its value.
        return TerminalError("unknown field", obj=ref, field=path, reason="InvalidField")
    if first["type"] == "missing":
        return TerminalError(message, obj=ref, field=path, reason="InvalidField")
    value = first.get("input")
    # A reference's name (contentFrom.secret.name) is not a secret; what it sits under may be.
    if first["loc"][-1] != "name" and any(may_be_secret(part) for part in first["loc"]):
        message = f"{message} (got {kind_of(value)}, not shown: it may be secret)"
    else:
        message = f"{message} (got {show_value(value)})"
    return TerminalError(message, obj=ref, field=path, reason="InvalidField")


def parse_cluster(doc: dict[str, Any]) -> Cluster:
    ref = _ref_of(doc, "Cluster")
    parsed: _ClusterDoc = _validate(_ClusterDoc, doc, ref)
    spec = parsed.spec
    net = spec.cluster_network or _ClusterNetwork()
    if parsed.api_version.startswith(LEGACY_GROUP + "/"):
        endpoints = parsed.status.api_endpoints if parsed.status else []
        ep = endpoints[0] if endpoints else _Endpoint()
        endpoint_field = "status.apiEndpoints[0]"
        raw_spec = doc.get("spec") or {}
        provider_config = raw_spec.get("providerConfig") or raw_spec.get("providerSpec")
    else:
        ep = spec.control_plane_endpoint or _Endpoint()
        endpoint_field = "spec.controlPlaneEndpoint"
        provider_config = None
    return Cluster(
        ref=ObjectRef("Cluster", parsed.metadata.namespace, parsed.metadata.name),
        api_version=parsed.api_version,
        pod_cidrs=tuple(net.pods.cidr_blocks) if net.pods else (),
        service_cidrs=tuple(net.services.cidr_blocks) if net.services else (),
        dns_domain=net.service_domain or None,
        endpoint_host=ep.host,
        endpoint_port=ep.port,
        endpoint_field=endpoint_field,
        provider_config=provider_config,
        initialized_by=parsed.status.initialized_by() if parsed.status else None,
        uid=parsed.metadata.uid,
        infrastructure_ready=bool(parsed.status and parsed.status.provisioned()),
        paused=spec.paused or PAUSED_ANNOTATION in parsed.metadata.annotations,
        control_plane_provider=(
            f"{spec.control_plane_ref.kind or 'control plane'}/{spec.control_plane_ref.name}"
            if spec.control_plane_ref is not None and spec.control_plane_ref.name
            else None
        ),
    )


def parse_machine(doc: dict[str, Any]) -> Machine:
    ref = _ref_of(doc, "Machine")
    parsed: _MachineDoc = _validate(_MachineDoc, doc, ref)
    meta, spec = parsed.metadata, parsed.spec
    ref = ObjectRef("Machine", meta.namespace, meta.name)
    control_plane_version = None
    if parsed.api_version.startswith(LEGACY_GROUP + "/"):
        if spec.bootstrap is not None:
            # v1alpha2 brought bootstrap.configRef; a v1alpha1 Machine carrying it is a
            # hybrid no API server ever stored, and which of the two to honour is a guess.
            raise TerminalError(
                f"{parsed.api_version} has no spec.bootstrap (it came with v1alpha2): a "
                "seed-era Machine renders from its spec.versions and its Cluster; remove the "
                "field, or write the Machine as cluster.x-k8s.io/v1beta1 or v1beta2",
                obj=ref,
                field="spec.bootstrap",
                reason="InvalidField",
            )
        cluster_name = meta.labels.get(LEGACY_CLUSTER_NAME_LABEL)
        cluster_field = f"metadata.labels[{LEGACY_CLUSTER_NAME_LABEL}]"
        version = spec.versions.kubelet if spec.versions else None
        version_field = "spec.versions.kubelet"
        runtime = spec.versions.container_runtime if spec.versions else None
        # The 2018 API's control plane: a Machine with versions.controlPlane.
        control_plane_version = spec.versions.control_plane if spec.versions else None
        control_plane = bool(control_plane_version)
        config_ref = None
        provider_config = spec.provider_config or spec.provider_spec
    else:
        cluster_name = cluster_name_of(spec.cluster_name, meta.labels)
        cluster_field = "spec.clusterName"
        version = spec.version
        version_field = "spec.version"
        runtime = None
        control_plane = CONTROL_PLANE_LABEL in meta.labels
        config_ref = spec.bootstrap.config_ref if spec.bootstrap else None
        provider_config = None
    return Machine(
        ref=ref,
        api_version=parsed.api_version,
        cluster_name=cluster_name,
        cluster_field=cluster_field,
        version=version,
        version_field=version_field,
        config_ref=config_ref,
        runtime=runtime,
        annotations=dict(meta.annotations),
        provider_config=provider_config,
        uid=meta.uid,
        control_plane=control_plane,
        control_plane_version=control_plane_version,
        has_node=bool(parsed.status and parsed.status.node_ref),
    )


def cluster_name_of(spec_name: str | None, labels: dict[str, str]) -> str | None:
    """A Machine's Cluster: ``spec.clusterName``, else the ``cluster.x-k8s.io/cluster-name``
    label (both the render and the controller's event mapping read it here)."""
    return spec_name or labels.get(CLUSTER_NAME_LABEL)


def seed_config(machine: Machine) -> KubeadmConfig:
    """The bootstrap config a seed-era Machine never had: an empty spec under the Machine's
    own name, so what the render says and owns points at the Machine. Everything comes from
    the Machine (versions, runtime) and its Cluster (networking, endpoint, CA Secret)."""
    return KubeadmConfig(
        ref=machine.ref,
        api_version=machine.api_version,
        uid=machine.uid,
        spec=KubeadmConfigSpec(),
    )


# A drive-letter path (``c:/k/azure.json``, ``C:\k``) or a Windows CRI socket: a config for a
# Windows node (CAPZ's Windows templates, run by cloudbase-init), which nodesmith never renders.
_WINDOWS_PATH = re.compile(r"^[A-Za-z]:[\\/]")


def windows_marker(spec: Any) -> tuple[str, str] | None:
    """The first field saying ``spec`` is for a Windows node, and its value, or None."""
    if not isinstance(spec, dict):
        return None
    files = spec.get("files")
    for index, file in enumerate(files if isinstance(files, list) else []):
        path = file.get("path") if isinstance(file, dict) else None
        if isinstance(path, str) and _WINDOWS_PATH.match(path):
            return f"spec.files[{index}].path", path
    for section in ("initConfiguration", "joinConfiguration"):
        conf = spec.get(section)
        registration = conf.get("nodeRegistration") if isinstance(conf, dict) else None
        socket = registration.get("criSocket") if isinstance(registration, dict) else None
        if isinstance(socket, str) and socket.startswith("npipe:"):
            return f"spec.{section}.nodeRegistration.criSocket", socket
    return None


def parse_config(doc: dict[str, Any]) -> KubeadmConfig:
    ref = _ref_of(doc, "KubeadmConfig")
    windows = windows_marker(doc.get("spec"))
    if windows is not None:
        field_, value = windows
        raise TerminalError(
            f"is {show_value(value)}, a Windows node's: nodesmith renders Linux nodes only "
            "(cloud-init or Ignition); Windows nodes (cloudbase-init) are not supported",
            obj=ref,
            field=field_,
            reason="WindowsNotSupported",
        )
    parsed: _ConfigDoc = _validate(_ConfigDoc, doc, ref)
    meta = parsed.metadata
    return KubeadmConfig(
        ref=ObjectRef("KubeadmConfig", meta.namespace, meta.name),
        api_version=parsed.api_version,
        uid=meta.uid,
        spec=parsed.spec,
        jinja=uses_jinja(doc.get("spec")),
    )


def parse_secret(doc: dict[str, Any]) -> Secret:
    ref = _ref_of(doc, "Secret")
    parsed: _SecretDoc = _validate(_SecretDoc, doc, ref)
    data: dict[str, bytes] = {}
    for key, value in (parsed.data or {}).items():
        try:
            data[key] = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise TerminalError(
                "is not valid base64", obj=ref, field=f"data[{key}]", reason="InvalidField"
            ) from None
    for key, text in (parsed.string_data or {}).items():
        data[key] = text.encode()
    return Secret(ref=ref, data=data, type=parsed.type)


# ---------------------------------------------------------------- what a controller reads


class _OwnerRef(_Strict):
    api_version: str = Field(default="", alias="apiVersion")
    kind: str = ""
    name: str = ""
    uid: str | None = None
    controller: bool | None = None


class _Meta(_Strict):
    name: str = ""
    namespace: str = ""
    uid: str | None = None
    generation: int | None = None
    resource_version: str | None = Field(default=None, alias="resourceVersion")
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    owner_references: list[_OwnerRef] = Field(default=[], alias="ownerReferences")


class _StoredSpec(_Strict):
    paused: bool = False  # a Cluster's
    cluster_name: str | None = Field(default=None, alias="clusterName")  # a Machine's


class _ConfigInitialization(_Strict):
    data_secret_created: bool = Field(default=False, alias="dataSecretCreated")


class _FailureV1Beta1(_Strict):
    failure_reason: str | None = Field(default=None, alias="failureReason")


class _Deprecated(_Strict):
    v1beta1: _FailureV1Beta1 = _FailureV1Beta1()


class _Status(_Strict):
    """A KubeadmConfig's status in either contract's words (v1beta1: ``ready`` and
    ``failureReason``; v1beta2: ``initialization.dataSecretCreated`` and the failure kept under
    ``deprecated.v1beta1``), and a Machine's node."""

    node_ref: dict[str, Any] | None = Field(default=None, alias="nodeRef")
    ready: bool = False
    initialization: _ConfigInitialization = _ConfigInitialization()
    data_secret_name: str | None = Field(default=None, alias="dataSecretName")
    failure_reason: str | None = Field(default=None, alias="failureReason")
    deprecated: _Deprecated = _Deprecated()
    observed_generation: int | None = Field(default=None, alias="observedGeneration")


class _StoredDoc(_Strict):
    metadata: _Meta = _Meta()
    spec: _StoredSpec = _StoredSpec()
    status: _Status = _Status()


@dataclass(frozen=True)
class Stored:
    """What the API server says of a stored object, before (and apart from) its spec.

    A controller needs these facts for objects whose spec it has not validated yet, or never
    will: who owns a KubeadmConfig (a config owned by no Machine is not ours to judge), which
    generation its status speaks of, which resourceVersion a write must be guarded by, and
    whether a Cluster is paused or a Machine has its Node (a paused Cluster, or a config done
    already, must never be judged by a full validation of what it no longer uses).
    """

    namespace: str
    name: str
    uid: str | None
    generation: int | None
    resource_version: str | None
    labels: dict[str, str]
    annotations: dict[str, str]
    owners: tuple[_OwnerRef, ...]
    ready: bool
    data_secret_name: str | None
    failure_reason: str | None
    observed_generation: int | None
    spec_paused: bool = False
    spec_cluster_name: str | None = None
    has_node: bool = False

    @property
    def cluster_name(self) -> str | None:
        """A Machine's Cluster, by the same rule as :class:`Machine`'s."""
        return cluster_name_of(self.spec_cluster_name, self.labels)

    @property
    def owner_machine(self) -> str | None:
        """The Machine owning this object (CABPK's ``GetOwnerByRef`` on kind Machine)."""
        for ref in self.owners:
            if ref.kind == "Machine" and ref.api_version.startswith(CAPI_GROUP + "/"):
                return ref.name
        return None

    def owned_by(self, uid: str | None) -> bool:
        return uid is not None and any(ref.uid == uid for ref in self.owners)

    def controller_of_kind(self, kind: str) -> str | None:
        """The name of the object of ``kind`` that is this object's controller, or None."""
        for ref in self.owners:
            if ref.kind == kind and ref.controller:
                return ref.name
        return None

    @property
    def paused(self) -> bool:
        """``spec.paused`` (a Cluster's) or the paused annotation (on any object)."""
        return self.spec_paused or PAUSED_ANNOTATION in self.annotations

    @property
    def latched_failure(self) -> bool:
        """A terminal failure recorded for this very generation: it stays until an input
        changes (retrying the same input cannot help)."""
        return bool(self.failure_reason) and self.observed_generation == self.generation


def parse_stored(doc: dict[str, Any]) -> Stored:
    """The :class:`Stored` facts of an object from an API server (malformed ones: terminal)."""
    ref = _ref_of(doc, str(doc.get("kind") or "object"))
    parsed: _StoredDoc = _validate(_StoredDoc, doc, ref)
    meta, status = parsed.metadata, parsed.status
    return Stored(
        namespace=meta.namespace or "default",
        name=meta.name,
        uid=meta.uid,
        generation=meta.generation,
        resource_version=meta.resource_version,
        labels=dict(meta.labels),
        annotations=dict(meta.annotations),
        owners=tuple(meta.owner_references),
        ready=status.ready or status.initialization.data_secret_created,
        data_secret_name=status.data_secret_name,
        failure_reason=status.failure_reason or status.deprecated.v1beta1.failure_reason,
        observed_generation=status.observed_generation,
        spec_paused=parsed.spec.paused,
        spec_cluster_name=parsed.spec.cluster_name,
        has_node=bool(status.node_ref),
    )
