"""File discovery: the kubeconfig a join reads at ``discovery.file.kubeConfigPath``.

Cluster API lets a KubeadmConfig describe that kubeconfig instead of shipping it
(``discovery.file.kubeConfig``: a cluster and a user with an ``exec`` plugin or an
``authProvider``, as EKS-style IAM authenticators need). As CABPK does, nodesmith writes the
kubeconfig to ``kubeConfigPath`` (0640) and hands kubeadm only the path; the server defaults to
the Cluster's control-plane endpoint and the CA to the cluster CA Secret's certificate.
"""

from __future__ import annotations

import base64
import posixpath
from typing import Any

from bootstrap.errors import ObjectRef, TransientError, invalid
from bootstrap.render.yamlio import dump

PATH = "spec.joinConfiguration.discovery.file"
_CLUSTER_FIELDS = {
    "server": "server",
    "tlsServerName": "tls-server-name",
    "insecureSkipTLSVerify": "insecure-skip-tls-verify",
    "certificateAuthorityData": "certificate-authority-data",
    "proxyURL": "proxy-url",
}
_EXEC_FIELDS = {"command", "args", "env", "apiVersion", "provideClusterInfo"}


def _mapping(obj: ObjectRef, value: Any, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise invalid(obj, path, value, "must be a mapping")
    return value


def kubeconfig_file(
    obj: ObjectRef,
    file: dict[str, Any],
    cluster_name: str,
    endpoint: str | None,
    ca_cert: bytes | None,
    exec_v1: bool = True,
) -> dict[str, Any] | None:
    """The write_files entry for ``file.kubeConfig``, or None when the config ships none.

    Raises TerminalError for a wrong description, TransientError when the server or the CA
    must come from the Cluster and it has none yet. ``exec_v1``: the node's client knows
    ``client.authentication.k8s.io/v1`` (Kubernetes 1.24+); older ones get ``v1beta1``.
    """
    described = file.get("kubeConfig")
    if described is None:
        return None
    described = _mapping(obj, described, f"{PATH}.kubeConfig")
    target = file.get("kubeConfigPath")
    if not isinstance(target, str) or not target.startswith("/") or target.endswith("/"):
        raise invalid(obj, f"{PATH}.kubeConfigPath", target, "must be an absolute file path")
    cluster = _cluster(obj, described.get("cluster") or {}, cluster_name, endpoint, ca_cert)
    user = _user(obj, described.get("user"), exec_v1)
    unknown = sorted(set(described) - {"cluster", "user"})
    if unknown:
        raise invalid(obj, f"{PATH}.kubeConfig.{unknown[0]}", unknown[0], "unknown field")
    context = f"kubelet-bootstrap@{cluster_name}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster_name, "cluster": cluster}],
        "contexts": [
            {"name": context, "context": {"cluster": cluster_name, "user": "kubelet-bootstrap"}}
        ],
        "current-context": context,
        "users": [{"name": "kubelet-bootstrap", "user": user}],
    }
    return {
        "path": "/" + posixpath.normpath(target).lstrip("/"),
        "owner": "root:root",
        "permissions": "0640",
        "content": dump(config),
    }


def _cluster(
    obj: ObjectRef, given: Any, cluster_name: str, endpoint: str | None, ca_cert: bytes | None
) -> dict[str, Any]:
    given = _mapping(obj, given, f"{PATH}.kubeConfig.cluster")
    out: dict[str, Any] = {}
    for key, value in given.items():
        if key not in _CLUSTER_FIELDS:
            raise invalid(obj, f"{PATH}.kubeConfig.cluster.{key}", key, "unknown field")
        expected = bool if key == "insecureSkipTLSVerify" else str
        if not isinstance(value, expected):
            raise invalid(
                obj, f"{PATH}.kubeConfig.cluster.{key}", value, f"must be a {expected.__name__}"
            )
        out[_CLUSTER_FIELDS[key]] = value
    if not out.get("server"):
        if endpoint is None:
            raise TransientError(
                f"{PATH}.kubeConfig.cluster.server is empty and the Cluster has no "
                "control-plane endpoint yet",
                obj=obj,
                reason="WaitingForControlPlaneEndpoint",
            )
        out["server"] = f"https://{endpoint}"
    if not out.get("certificate-authority-data") and not out.get("insecure-skip-tls-verify"):
        if ca_cert is None:
            raise TransientError(
                f"{PATH}.kubeConfig.cluster.certificateAuthorityData is empty and Secret "
                f"{cluster_name}-ca is not in the input yet",
                obj=obj,
                reason="CANotFound",
            )
        out["certificate-authority-data"] = base64.b64encode(ca_cert).decode("ascii")
    return dict(sorted(out.items(), key=lambda item: item[0] != "server"))


def _user(obj: ObjectRef, given: Any, exec_v1: bool) -> dict[str, Any]:
    path = f"{PATH}.kubeConfig.user"
    given = _mapping(obj, given, path)
    kinds = [k for k in ("exec", "authProvider") if given.get(k) is not None]
    if len(kinds) != 1 or set(given) - {"exec", "authProvider"}:
        raise invalid(obj, path, sorted(given), "must hold exactly one of exec, authProvider")
    if kinds == ["authProvider"]:
        provider = _mapping(obj, given["authProvider"], f"{path}.authProvider")
        if not isinstance(provider.get("name"), str) or not provider["name"]:
            raise invalid(obj, f"{path}.authProvider.name", provider.get("name"), "is required")
        return {"auth-provider": provider}
    plugin = dict(_mapping(obj, given["exec"], f"{path}.exec"))
    unknown = sorted(set(plugin) - _EXEC_FIELDS)
    if unknown:
        raise invalid(obj, f"{path}.exec.{unknown[0]}", unknown[0], "unknown field")
    if not isinstance(plugin.get("command"), str) or not plugin["command"]:
        raise invalid(obj, f"{path}.exec.command", plugin.get("command"), "is required")
    plugin.setdefault(
        "apiVersion", f"client.authentication.k8s.io/{'v1' if exec_v1 else 'v1beta1'}"
    )
    if plugin["apiVersion"] == "client.authentication.k8s.io/v1":
        plugin.setdefault("interactiveMode", "Never")  # v1 requires it; a node has no tty
    return {"exec": plugin}


__all__ = ["kubeconfig_file"]
