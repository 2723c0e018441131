"""Build the kubeadm documents (Init/Cluster/Join configuration, KubeletConfiguration).

Input is the KubeadmConfig's user-written configuration, in either Cluster API shape (v1beta1
maps, v1beta2 lists and ``*Seconds`` timeouts); output is plain kubeadm for the API version the
Machine's Kubernetes version needs. Values owned by the Cluster and Machine (version, name,
networking, endpoint) are always taken from those objects, as CABPK v1beta2 does.
"""

from __future__ import annotations

import copy
import ipaddress
from dataclasses import dataclass, field
from typing import Any

from bootstrap.errors import ObjectRef, TerminalError, invalid
from bootstrap.render.names import is_label_value, is_qualified_name
from bootstrap.render.objects import Cluster
from bootstrap.render.versions import V1BETA2, V1BETA4, KubeVersion

DEFAULT_SERVICE_CIDR = "10.96.0.0/12"
DEFAULT_DNS_DOMAIN = "cluster.local"
UNINITIALIZED_TAINT = {
    "key": "node.cluster.x-k8s.io/uninitialized",
    "effect": "NoSchedule",
}
KUBELET_API = "kubelet.config.k8s.io/v1beta1"
DUAL_STACK_GATE = "IPv6DualStack"
# Components of ClusterConfiguration that carry extraArgs.
_ARG_COMPONENTS = ("apiServer", "controllerManager", "scheduler")
# Fields Cluster API types carry that are not kubeadm's; dropped before rendering.
_TYPE_META = ("apiVersion", "kind")


@dataclass
class Builder:
    """Shared state of one document build: where errors point, warnings collected."""

    obj: ObjectRef
    version: KubeVersion
    warnings: list[str] = field(default_factory=list)
    # v1beta3 keeps the control-plane health-check timeout in ClusterConfiguration.
    control_plane_timeout: str | None = None
    # kubeadm command-line flags that carry settings the target API has no field for.
    flags: list[str] = field(default_factory=list)

    @property
    def api(self) -> str:
        return self.version.kubeadm_api

    def mapping(self, value: Any, path: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.bad(path, value, "must be a mapping")
        return value

    def bad(self, path: str, value: Any, why: str) -> TerminalError:
        return invalid(self.obj, path, value, why)

    def args(self, value: Any, path: str) -> Any:
        """extraArgs / kubeletExtraArgs: a map in v1beta3, a ``[{name, value}]`` list in v1beta4."""
        pairs: list[tuple[str, str]] = []
        if isinstance(value, dict):
            for k, v in value.items():
                if not isinstance(k, str) or not isinstance(v, str):
                    raise self.bad(f"{path}.{k}", v, "argument values must be strings")
                pairs.append((k, v))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if (
                    not isinstance(item, dict)
                    or set(item) - {"name", "value"}
                    or not isinstance(item.get("name"), str)
                    or not isinstance(item.get("value", ""), str)
                ):
                    raise self.bad(f"{path}[{i}]", item, "must be {name: string, value: string}")
                pairs.append((item["name"], item.get("value", "")))
        else:
            raise self.bad(path, value, "must be a map or a list of {name, value}")
        if self.api == V1BETA4:
            return [{"name": k, "value": v} for k, v in pairs]
        names = [k for k, _ in pairs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise self.bad(
                path,
                dupes,
                f"repeats arguments, which {self.api} (Kubernetes < 1.31) cannot hold",
            )
        return dict(pairs)


def _strip_type_meta(doc: dict[str, Any]) -> dict[str, Any]:
    for key in _TYPE_META:
        doc.pop(key, None)
    return doc


def _seconds_to_durations(b: Builder, timeouts: dict[str, Any], path: str) -> dict[str, Any]:
    """Cluster API v1beta2 writes ``fooSeconds: 30``; kubeadm wants ``foo: 30s``."""
    out: dict[str, Any] = {}
    for key, value in timeouts.items():
        if key.endswith("Seconds"):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise b.bad(f"{path}.{key}", value, "must be a non-negative number of seconds")
            out[key[: -len("Seconds")]] = f"{value}s"
        else:
            out[key] = value
    return out


def _fields_as_flags(b: Builder, doc: dict[str, Any], path: str) -> None:
    """Carry what kubeadm v1beta2 has no field for (Kubernetes 1.15-1.21) on its command line.

    ``skipPhases`` becomes ``--skip-phases``, and ``patches.directory`` becomes
    ``--experimental-patches`` (kubeadm 1.19-1.21), as CABPK's v1beta2-era releases did.
    What has neither a field nor a flag there is dropped with a warning naming it.
    """
    if b.api != V1BETA2:
        return
    phases = doc.pop("skipPhases", None)
    if phases:
        if not isinstance(phases, list) or not all(
            isinstance(p, str) and p and "," not in p for p in phases
        ):
            raise b.bad(f"{path}.skipPhases", phases, "must be a list of phase names")
        b.flags.append(f"--skip-phases={','.join(phases)}")
    patches = doc.pop("patches", None)
    if patches:
        directory = b.mapping(patches, f"{path}.patches").get("directory")
        if isinstance(directory, str) and directory and b.version.minor >= 19:
            b.flags.append(f"--experimental-patches={directory}")
        else:
            b.warnings.append(
                f"{path}.patches dropped: kubeadm {b.version} has neither the field nor "
                "the --experimental-patches flag"
            )
    registration = doc.get("nodeRegistration")
    if isinstance(registration, dict) and "imagePullPolicy" in registration:
        del registration["imagePullPolicy"]
        b.warnings.append(
            f"{path}.nodeRegistration.imagePullPolicy dropped: {V1BETA2} has no such field"
        )


TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _check_taints(b: Builder, taints: Any, path: str) -> None:
    """As the API server's validateNodeTaints: a wrong taint otherwise renders fine and fails
    on the node, when kubeadm's kubelet registers the Node."""
    if not isinstance(taints, list):
        raise b.bad(path, taints, "must be a list")
    for index, taint in enumerate(taints):
        at = f"{path}[{index}]"
        if not isinstance(taint, dict):
            raise b.bad(at, taint, "must be a mapping with key and effect")
        key, value, effect = taint.get("key"), taint.get("value"), taint.get("effect")
        value = "" if value is None else value
        if not isinstance(key, str) or not is_qualified_name(key):
            raise b.bad(
                f"{at}.key", key, "must be a qualified name ([prefix/]name, at most 63 characters)"
            )
        if not isinstance(value, str) or not is_label_value(value):
            raise b.bad(f"{at}.value", value, "must be empty or a label value")
        if effect not in TAINT_EFFECTS:
            raise b.bad(f"{at}.effect", effect, "must be one of " + ", ".join(TAINT_EFFECTS))


def node_registration(
    b: Builder, value: Any, path: str, cri_socket: str | None, worker: bool
) -> dict[str, Any]:
    reg = copy.deepcopy(b.mapping(value, path))
    if cri_socket:  # only when the runtime is known; kubeadm detects it otherwise
        reg.setdefault("criSocket", cri_socket)
    if "kubeletExtraArgs" in reg:
        reg["kubeletExtraArgs"] = b.args(reg["kubeletExtraArgs"], f"{path}.kubeletExtraArgs")
    if reg.get("taints") is not None:
        _check_taints(b, reg["taints"], f"{path}.taints")
    if worker:
        taints = reg.get("taints")
        if taints is None:
            taints = []
        if not any(
            isinstance(t, dict) and t.get("key") == UNINITIALIZED_TAINT["key"] for t in taints
        ):
            taints = [*taints, dict(UNINITIALIZED_TAINT)]
        reg["taints"] = taints
    return reg


def _networking(cluster: Cluster) -> dict[str, str]:
    """The Cluster's networking; its CIDRs were validated when the Cluster was parsed."""
    net: dict[str, str] = {}
    if cluster.service_cidrs:
        net["serviceSubnet"] = ",".join(cluster.service_cidrs)
    if cluster.pod_cidrs:
        net["podSubnet"] = ",".join(cluster.pod_cidrs)
    if cluster.dns_domain:
        net["dnsDomain"] = cluster.dns_domain
    return net


def cluster_dns(b: Builder, networking: dict[str, Any]) -> str:
    """kubeadm's GetDNSIP: the first service CIDR's base address + 10.

    ``networking`` is the ClusterConfiguration's, after the Cluster's values were laid over
    the config's, so the kubelet and kubeadm agree whoever set the subnet.
    """
    subnet = networking.get("serviceSubnet") or DEFAULT_SERVICE_CIDR
    field_ = "spec.clusterConfiguration.networking.serviceSubnet"
    cidr = str(subnet).split(",")[0].strip()
    try:
        network = ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        raise b.bad(field_, subnet, "is not a CIDR (or a comma-separated list of them)") from None
    if network.num_addresses <= 10:
        raise b.bad(field_, subnet, "is too small to hold the cluster DNS address (base + 10)")
    return str(network.network_address + 10)


def cluster_configuration(
    b: Builder, user: dict[str, Any] | None, cluster: Cluster, init: dict[str, Any]
) -> dict[str, Any]:
    """ClusterConfiguration for ``kubeadm init``; may move timeouts into ``init`` (v1beta4)."""
    path = "spec.clusterConfiguration"
    doc = _strip_type_meta(copy.deepcopy(b.mapping(user, path)))
    for component in _ARG_COMPONENTS:
        part = b.mapping(doc.get(component), f"{path}.{component}")
        if "extraArgs" in part:
            part["extraArgs"] = b.args(part["extraArgs"], f"{path}.{component}.extraArgs")
    etcd = b.mapping(doc.get("etcd"), f"{path}.etcd")
    local = b.mapping(etcd.get("local"), f"{path}.etcd.local")
    if "extraArgs" in local:
        local["extraArgs"] = b.args(local["extraArgs"], f"{path}.etcd.local.extraArgs")
    api_server = b.mapping(doc.get("apiServer"), f"{path}.apiServer")
    for days_key, key in (
        ("certificateValidityPeriodDays", "certificateValidityPeriod"),
        ("caCertificateValidityPeriodDays", "caCertificateValidityPeriod"),
    ):
        if days_key in doc:
            days = doc.pop(days_key)
            if not isinstance(days, int) or isinstance(days, bool) or days <= 0:
                raise b.bad(f"{path}.{days_key}", days, "must be a positive number of days")
            doc[key] = f"{days * 24}h0m0s"
    if b.api != V1BETA4 and b.control_plane_timeout is not None:
        api_server.setdefault("timeoutForControlPlane", b.control_plane_timeout)
        doc["apiServer"] = api_server
    if b.api == V1BETA4 and "timeoutForControlPlane" in api_server:
        init.setdefault("timeouts", {}).setdefault(
            "controlPlaneComponentHealthCheck", api_server.pop("timeoutForControlPlane")
        )
    doc.update(
        {
            "apiVersion": b.api,
            "kind": "ClusterConfiguration",
            "kubernetesVersion": str(b.version),
            "clusterName": cluster.name,
        }
    )
    endpoint = cluster.endpoint
    if endpoint and not doc.get("controlPlaneEndpoint"):
        doc["controlPlaneEndpoint"] = endpoint
    networking = b.mapping(doc.get("networking"), f"{path}.networking")
    networking.update(_networking(cluster))
    if networking:
        doc["networking"] = networking
    if _dual_stack_gate_needed(b, cluster):
        gates = b.mapping(doc.get("featureGates"), f"{path}.featureGates")
        if gates.get(DUAL_STACK_GATE) is False:
            raise b.bad(
                f"{path}.featureGates.{DUAL_STACK_GATE}",
                False,
                f"must not be false: the Cluster is dual-stack, which Kubernetes {b.version} "
                "only runs with this gate",
            )
        if DUAL_STACK_GATE not in gates:
            b.warnings.append(
                f"{path}.featureGates.{DUAL_STACK_GATE} set to true: the Cluster is dual-stack "
                f"and Kubernetes {b.version} (< 1.21) refuses two CIDRs without it"
            )
        gates[DUAL_STACK_GATE] = True
        doc["featureGates"] = gates
    return doc


def _dual_stack_gate_needed(b: Builder, cluster: Cluster) -> bool:
    """Dual-stack CIDRs before 1.21 need the IPv6DualStack gate (alpha, off by default)."""
    dual = len(cluster.service_cidrs) > 1 or len(cluster.pod_cidrs) > 1
    return dual and (b.version.major, b.version.minor) < (1, 21)


def _timeouts(b: Builder, doc: dict[str, Any], path: str) -> None:
    """Normalise ``timeouts`` for the target API; v1beta2/3 have only two of them elsewhere."""
    if "timeouts" not in doc:
        return
    timeouts = _seconds_to_durations(
        b, b.mapping(doc["timeouts"], f"{path}.timeouts"), f"{path}.timeouts"
    )
    if b.api == V1BETA4:
        doc["timeouts"] = timeouts
        return
    del doc["timeouts"]
    if "controlPlaneComponentHealthCheck" in timeouts and doc.get("kind") == "InitConfiguration":
        b.control_plane_timeout = timeouts.pop("controlPlaneComponentHealthCheck")
    if "discovery" in timeouts and doc.get("kind") == "JoinConfiguration":
        b.mapping(doc.setdefault("discovery", {}), f"{path}.discovery").setdefault(
            "timeout", timeouts.pop("discovery")
        )
    if timeouts:
        b.warnings.append(
            f"{path}.timeouts ({', '.join(sorted(timeouts))}) dropped: {b.api} has no such settings"
        )


def _bootstrap_tokens(b: Builder, doc: dict[str, Any], path: str) -> None:
    """Cluster API v1beta2's ``bootstrapTokens[].ttlSeconds`` is kubeadm's ``ttl`` duration."""
    tokens = doc.get("bootstrapTokens")
    if not isinstance(tokens, list):
        return  # the schema check names what is wrong with it
    for index, token in enumerate(tokens):
        if isinstance(token, dict) and "ttlSeconds" in token:
            seconds = token.pop("ttlSeconds")
            if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < 0:
                raise b.bad(
                    f"{path}.bootstrapTokens[{index}].ttlSeconds",
                    seconds,
                    "must be a non-negative number of seconds",
                )
            token.setdefault("ttl", f"{seconds}s")


def init_configuration(
    b: Builder, user: dict[str, Any] | None, cri_socket: str | None
) -> dict[str, Any]:
    path = "spec.initConfiguration"
    doc = _strip_type_meta(copy.deepcopy(b.mapping(user, path)))
    doc["nodeRegistration"] = node_registration(
        b, doc.get("nodeRegistration"), f"{path}.nodeRegistration", cri_socket, worker=False
    )
    _bootstrap_tokens(b, doc, path)
    doc = {"apiVersion": b.api, "kind": "InitConfiguration", **doc}
    _timeouts(b, doc, path)
    _fields_as_flags(b, doc, path)
    return doc


def join_configuration(
    b: Builder,
    user: dict[str, Any] | None,
    cri_socket: str | None,
    control_plane: bool,
    discovery: dict[str, Any],
    uninitialized_taint: bool = True,
) -> dict[str, Any]:
    """JoinConfiguration; ``discovery`` holds the token-discovery values resolved by the caller.

    A worker gets CAPI's ``node.cluster.x-k8s.io/uninitialized`` taint unless
    ``uninitialized_taint`` is off: a 2018 management cluster has no controller to remove it.
    """
    path = "spec.joinConfiguration"
    doc = _strip_type_meta(copy.deepcopy(b.mapping(user, path)))
    doc["nodeRegistration"] = node_registration(
        b,
        doc.get("nodeRegistration"),
        f"{path}.nodeRegistration",
        cri_socket,
        worker=not control_plane and uninitialized_taint,
    )
    disc = b.mapping(doc.get("discovery"), f"{path}.discovery")
    if b.api == V1BETA4 and "timeout" in disc:
        doc.setdefault("timeouts", {}).setdefault("discovery", disc.pop("timeout"))
    if isinstance(disc.get("file"), dict):  # its kubeConfig is written as a file, by path
        disc["file"] = {k: v for k, v in disc["file"].items() if k != "kubeConfig"}
    if "file" not in disc:
        token = b.mapping(disc.get("bootstrapToken"), f"{path}.discovery.bootstrapToken")
        for key, value in discovery.items():
            if not token.get(key):
                token[key] = value
        disc["bootstrapToken"] = token
    doc["discovery"] = disc
    if control_plane:
        doc["controlPlane"] = b.mapping(doc.get("controlPlane"), f"{path}.controlPlane") or {}
    doc = {"apiVersion": b.api, "kind": "JoinConfiguration", **doc}
    _timeouts(b, doc, path)
    _fields_as_flags(b, doc, path)
    return doc


def kubelet_configuration(
    b: Builder, cluster: Cluster, cluster_doc: dict[str, Any]
) -> dict[str, Any]:
    """The KubeletConfiguration kubeadm init hands every node.

    Its DNS agrees with the networking of ``cluster_doc`` (the rendered ClusterConfiguration):
    a config with serviceSubnet 10.100.0.0/16 and dnsDomain corp.local gets clusterDNS
    10.100.0.10 and clusterDomain corp.local, as kubeadm's own defaulting would give.
    """
    networking = cluster_doc.get("networking") or {}
    doc: dict[str, Any] = {
        "apiVersion": KUBELET_API,
        "kind": "KubeletConfiguration",
        "cgroupDriver": "systemd",
        "clusterDNS": [cluster_dns(b, networking)],
        "clusterDomain": networking.get("dnsDomain") or DEFAULT_DNS_DOMAIN,
    }
    if _dual_stack_gate_needed(b, cluster):
        doc["featureGates"] = {DUAL_STACK_GATE: True}
    return doc
