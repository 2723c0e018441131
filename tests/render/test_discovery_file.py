"""File discovery: the kubeconfig a ``discovery.file.kubeConfig`` describes, written where the
join reads it, and read back by the real kubectl v1.20.2."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from bootstrap.errors import ObjectRef, TerminalError, TransientError
from bootstrap.render.discovery_file import kubeconfig_file

OBJ = ObjectRef("KubeadmConfig", "prod", "md-0")
CA = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
EXEC = {"exec": {"command": "/usr/bin/aws-iam-authenticator", "args": ["token", "-i", "alpha"]}}
PATH = "/etc/kubernetes/discovery.conf"


def _file(kubeconfig: Any, path: Any = PATH) -> dict[str, Any]:
    return {"kubeConfigPath": path, "kubeConfig": kubeconfig}


def _render(file: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"endpoint": "192.0.2.10:6443", "ca_cert": CA, **kwargs}
    entry = kubeconfig_file(OBJ, file, "alpha", args["endpoint"], args["ca_cert"],
                            args.get("exec_v1", True))  # fmt: skip
    assert entry is not None
    assert (entry["path"], entry["owner"], entry["permissions"]) == (PATH, "root:root", "0640")
    loaded: dict[str, Any] = yaml.safe_load(entry["content"])
    return loaded


@pytest.mark.parametrize(
    ("cluster", "server", "ca"),
    [
        # Empty: the Cluster's endpoint and the cluster CA, as CABPK fills them.
        ({}, "https://192.0.2.10:6443", base64.b64encode(CA).decode()),
        ({"server": "https://lb.example.org:443", "certificateAuthorityData": "QUJD"},
         "https://lb.example.org:443", "QUJD"),
        ({"insecureSkipTLSVerify": True}, "https://192.0.2.10:6443", None),
    ],
)  # fmt: skip
def test_cluster_defaults_from_the_cluster(cluster: Any, server: str, ca: str | None) -> None:
    config = _render(_file({"cluster": cluster, "user": EXEC}))
    (entry,) = config["clusters"]
    assert entry["name"] == "alpha" and entry["cluster"]["server"] == server
    assert entry["cluster"].get("certificate-authority-data") == ca
    assert config["current-context"] == config["contexts"][0]["name"]


@pytest.mark.parametrize(
    ("exec_v1", "api", "interactive"),
    [(True, "client.authentication.k8s.io/v1", "Never"),
     (False, "client.authentication.k8s.io/v1beta1", None)],
)  # fmt: skip
def test_exec_api_follows_the_node_version(exec_v1: bool, api: str, interactive: Any) -> None:
    user = _render(_file({"user": EXEC}), exec_v1=exec_v1)["users"][0]["user"]["exec"]
    assert user["apiVersion"] == api and user.get("interactiveMode") == interactive
    assert user["command"] == "/usr/bin/aws-iam-authenticator"


def test_auth_provider_user() -> None:
    provider = {"name": "oidc", "config": {"client-id": "k"}}
    user = _render(_file({"user": {"authProvider": provider}}))["users"][0]["user"]
    assert user == {"auth-provider": provider}


@pytest.mark.parametrize(
    ("file", "field"),
    [
        (_file({"user": {}}), "kubeConfig.user"),
        (_file({"user": {**EXEC, "authProvider": {"name": "x"}}}), "kubeConfig.user"),
        (_file({"user": {"exec": {"args": ["x"]}}}), "kubeConfig.user.exec.command"),
        (_file({"user": {"exec": {"command": "x", "bogus": 1}}}), "kubeConfig.user.exec.bogus"),
        (_file({"cluster": {"server": 5}, "user": EXEC}), "kubeConfig.cluster.server"),
        (_file({"cluster": {"servr": "x"}, "user": EXEC}), "kubeConfig.cluster.servr"),
        (_file({"user": EXEC, "extra": 1}), "kubeConfig.extra"),
        (_file({"user": EXEC}, path="relative.conf"), "kubeConfigPath"),
        (_file("not a mapping"), "kubeConfig"),
    ],
)
def test_wrong_descriptions_are_terminal_naming_the_field(file: Any, field: str) -> None:
    with pytest.raises(TerminalError) as caught:
        kubeconfig_file(OBJ, file, "alpha", "192.0.2.10:6443", CA)
    assert f"spec.joinConfiguration.discovery.file.{field}" in str(caught.value)


@pytest.mark.parametrize(
    ("endpoint", "ca", "reason"),
    [(None, CA, "WaitingForControlPlaneEndpoint"), ("192.0.2.10:6443", None, "CANotFound")],
)
def test_what_the_cluster_has_not_yet_waits(endpoint: Any, ca: Any, reason: str) -> None:
    with pytest.raises(TransientError) as caught:
        kubeconfig_file(OBJ, _file({"user": EXEC}), "alpha", endpoint, ca)
    assert caught.value.reason == reason


def test_a_shipped_kubeconfig_is_left_alone() -> None:
    assert kubeconfig_file(OBJ, {"kubeConfigPath": PATH}, "alpha", None, None) is None


def test_real_kubectl_reads_it(kubernetes_build: Path, tmp_path: Path) -> None:
    entry = kubeconfig_file(OBJ, _file({"user": EXEC}), "alpha", "192.0.2.10:6443", CA, False)
    assert entry is not None
    (tmp_path / "discovery.conf").write_text(entry["content"])
    proc = subprocess.run(
        [str(kubernetes_build / "bin" / "kubectl"), "config", "view", "--kubeconfig",
         str(tmp_path / "discovery.conf"), "-o",
         "jsonpath={.current-context} {.clusters[0].cluster.server} "
         "{.users[0].user.exec.command} {.users[0].user.exec.apiVersion}"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [
        "kubelet-bootstrap@alpha", "https://192.0.2.10:6443", "/usr/bin/aws-iam-authenticator",
        "client.authentication.k8s.io/v1beta1",
    ]  # fmt: skip
