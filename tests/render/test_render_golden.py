"""Golden renders: every role x the three kubeadm APIs x the three Cluster API generations.

Inputs are ``tests/data/render/<generation>-<kubeadm api>/bundle.yaml`` plus the fixed cluster
PKI in ``tests/data/render/ca-secrets.yaml``; tokens are given in the configs and the clock is
fixed, so the output is byte-for-byte deterministic and compared with
``tests/data/render/golden/<generation>-<api>/<role>.cloud-config``.

Regenerate the goldens after an intended change with::

    NODESMITH_UPDATE_GOLDEN=1 .venv/bin/pytest tests/render/test_render_golden.py

and review the diff. A golden alone would pass vacuously after a bad regeneration, so every
case also asserts the semantics explicitly (kubeadm documents, PKI, user sections), and every
output passes the real ``cloud-init schema`` validator.
"""

from __future__ import annotations

import base64
import os
import re
from functools import cache
from typing import Any

import pytest
import yaml
from render_helpers import (
    CA_SECRETS,
    DATA,
    FIXED_NOW,
    GENERATIONS,
    GOLDEN,
    KUBE_VERSIONS,
    KUBEADM_APIS,
    ROLE_MACHINES,
    assert_valid_cloud_config,
    file_bytes,
    files_by_path,
    kubeadm_documents,
    openssl_spki_hash,
    script_config,
    secret_data,
)

from bootstrap.render import RenderOptions, RenderResult
from bootstrap.render.batch import render_all
from bootstrap.render.loader import load_paths
from bootstrap.render.resolve import Bundle

UPDATE = os.environ.get("NODESMITH_UPDATE_GOLDEN") == "1"
CASES = [(g, a, r) for g in GENERATIONS for a in KUBEADM_APIS for r in ROLE_MACHINES]
CONFIG_CASES = [c for c in CASES if c[0] != "v1alpha1"]  # KubeadmConfig-driven generations
SEED_CASES = [c for c in CASES if c[0] == "v1alpha1"]  # 2018 Machines: no bootstrap config
TOKEN = re.compile(r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b")
CONTAINERD = "unix:///var/run/containerd/containerd.sock"
TAINT = {"key": "node.cluster.x-k8s.io/uninitialized", "effect": "NoSchedule"}
TOKENS = {"join-control-plane": "cpjoin.0123456789abcdef", "worker-join": "wkjoin.fedcba9876543210"}
PKI_MODES = {
    "ca.crt": "0640",
    "ca.key": "0600",
    "etcd/ca.crt": "0640",
    "etcd/ca.key": "0600",
    "front-proxy-ca.crt": "0640",
    "front-proxy-ca.key": "0600",
    "sa.pub": "0640",
    "sa.key": "0600",
}


@cache
def _render_run(generation: str, api: str) -> dict[str, RenderResult]:
    """The bundle's three Machines in one run, as ``render --all`` renders them: the Cluster
    is not initialized, so cp-0 takes the init lock, cp-1 joins it and md-0 follows."""
    bundle = Bundle(load_paths([str(DATA / f"{generation}-{api}"), str(CA_SECRETS)]))
    batch = render_all(
        bundle, [f"prod/{m}" for m in ROLE_MACHINES.values()], RenderOptions(now=FIXED_NOW)
    )
    assert not batch.failures, batch.failures
    return {result.machine.removeprefix("prod/"): result for result in batch.results}


def _render(generation: str, api: str, role: str) -> RenderResult:
    return _render_run(generation, api)[ROLE_MACHINES[role]]


@cache
def _ca_hash(namespace: str) -> str:
    if namespace == "prod":
        cert = secret_data(CA_SECRETS, "alpha-ca", "prod", "tls.crt")
    else:
        cert = secret_data(
            DATA / "v1beta1-v1beta3" / "bundle.yaml", "alpha-ca", namespace, "tls.crt"
        )
    return openssl_spki_hash(cert)


def _args(api: str, expected: dict[str, str]) -> Any:
    if api == "v1beta4":
        return [{"name": k, "value": v} for k, v in expected.items()]
    return expected


def _comparable(generation: str, result: RenderResult) -> str:
    """The userdata as the golden holds it. A seed-era Machine has no config to give its
    token, so nodesmith generates one: only that is replaced by a marker."""
    text = result.userdata.decode()
    return TOKEN.sub("<generated-token>", text) if generation == "v1alpha1" else text


@pytest.mark.parametrize(("generation", "api", "role"), CASES, ids=["-".join(c) for c in CASES])
def test_golden(generation: str, api: str, role: str) -> None:
    result = _render(generation, api, role)
    assert result.role == role
    text = _comparable(generation, result)
    golden = GOLDEN / f"{generation}-{api}" / f"{role}.cloud-config"
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"no golden {golden}; run with NODESMITH_UPDATE_GOLDEN=1"
    assert text == golden.read_text(), f"render differs from {golden}"
    # Deterministic: the same input renders the same bytes again (but a generated token).
    _render_run.cache_clear()
    assert _comparable(generation, _render(generation, api, role)) == text


@pytest.mark.parametrize(
    ("generation", "api", "role"), CONFIG_CASES, ids=["-".join(c) for c in CONFIG_CASES]
)
def test_semantics(generation: str, api: str, role: str) -> None:
    result = _render(generation, api, role)
    cc = assert_valid_cloud_config(result.userdata)
    files = files_by_path(cc)
    kubeadm_api = f"kubeadm.k8s.io/{api}"
    version = KUBE_VERSIONS[api]

    # --- kubeadm documents ------------------------------------------------------------
    if role == "init-control-plane":
        assert "/run/kubeadm/kubeadm-join-config.yaml" not in files
        docs = kubeadm_documents(cc, "/run/kubeadm/kubeadm.yaml")
        assert [d["kind"] for d in docs] == [
            "ClusterConfiguration",
            "InitConfiguration",
            "KubeletConfiguration",
        ]
        cluster, init, kubelet = docs
        assert cluster["apiVersion"] == init["apiVersion"] == kubeadm_api
        assert cluster["kubernetesVersion"] == version
        assert cluster["clusterName"] == "alpha"
        assert cluster["controlPlaneEndpoint"] == "192.0.2.10:6443"  # not the decoy's
        assert cluster["networking"] == {
            "serviceSubnet": "10.128.0.0/12,fd00:20::/108",
            "podSubnet": "192.168.0.0/16,fd00:10::/56",
            "dnsDomain": "corp.local",
        }
        assert cluster["apiServer"]["extraArgs"] == _args(
            api, {"audit-log-maxage": "30", "profiling": "false"}
        )
        assert cluster["controllerManager"]["extraArgs"] == _args(api, {"bind-address": "0.0.0.0"})
        reg = init["nodeRegistration"]
        assert reg["criSocket"] == CONTAINERD  # cp-0 names containerd (annotation)
        assert reg["kubeletExtraArgs"] == _args(api, {"node-labels": "role=cp"})
        assert TAINT not in (reg.get("taints") or [])
        if generation == "v1beta2" and api == "v1beta4":
            # Cluster API v1beta2 *Seconds timeouts become kubeadm durations.
            assert init["timeouts"] == {"controlPlaneComponentHealthCheck": "240s"}
        if generation == "v1beta2" and api in ("v1beta2", "v1beta3"):
            # v1beta2/3 have no InitConfiguration.timeouts: the value moves, it is not dropped.
            assert "timeouts" not in init
            assert cluster["apiServer"]["timeoutForControlPlane"] == "240s"
            assert not [w for w in result.warnings if "timeouts" in w]
        assert kubelet["apiVersion"] == "kubelet.config.k8s.io/v1beta1"
        assert kubelet["clusterDNS"] == ["10.128.0.10"]
        assert kubelet["clusterDomain"] == "corp.local"
        assert kubelet["cgroupDriver"] == "systemd"
        verb, config_path = "init", "/run/kubeadm/kubeadm.yaml"
    else:
        assert "/run/kubeadm/kubeadm.yaml" not in files
        docs = kubeadm_documents(cc, "/run/kubeadm/kubeadm-join-config.yaml")
        assert [d["kind"] for d in docs] == ["JoinConfiguration"]
        (join,) = docs
        assert join["apiVersion"] == kubeadm_api
        token = join["discovery"]["bootstrapToken"]
        assert token["token"] == TOKENS[role]
        assert token["apiServerEndpoint"] == "192.0.2.10:6443"
        assert token["caCertHashes"] == [_ca_hash("prod")]
        assert _ca_hash("prod") != _ca_hash("decoy")
        assert "unsafeSkipCAVerification" not in token
        reg = join["nodeRegistration"]
        assert "criSocket" not in reg  # no runtime named: kubeadm detects the socket
        if role == "worker-join":
            assert TAINT in reg["taints"]
            assert "controlPlane" not in join
            assert reg["kubeletExtraArgs"] == _args(
                api, {"node-labels": "pool=md-0", "max-pods": "50"}
            )
            if generation == "v1beta2":
                if api == "v1beta4":
                    assert join["timeouts"] == {"discovery": "300s"}
                else:
                    assert join["discovery"]["timeout"] == "300s"
                    assert "timeouts" not in join
        else:
            assert TAINT not in (reg.get("taints") or [])
            assert join["controlPlane"] == {
                "localAPIEndpoint": {"advertiseAddress": "192.0.2.21", "bindPort": 6443}
            }
        verb, config_path = "join", "/run/kubeadm/kubeadm-join-config.yaml"
    assert files[config_path]["permissions"] == "0600"

    # --- PKI --------------------------------------------------------------------------
    pki = {p.removeprefix("/etc/kubernetes/pki/"): f for p, f in files.items() if "pki" in p}
    if role == "worker-join":
        assert pki == {}
        assert not any("PRIVATE KEY" in str(f.get("content", "")) for f in files.values())
    else:
        assert {name: f["permissions"] for name, f in pki.items()} == PKI_MODES
        assert file_bytes(pki["ca.crt"]) == secret_data(CA_SECRETS, "alpha-ca", "prod", "tls.crt")
        assert file_bytes(pki["ca.key"]) == secret_data(CA_SECRETS, "alpha-ca", "prod", "tls.key")

    # --- user sections ----------------------------------------------------------------
    name = {"init-control-plane": "init", "join-control-plane": "join-cp", "worker-join": "worker"}[
        role
    ]
    motd = files[f"/etc/nodesmith/{name}.txt"]
    assert (motd["owner"], motd["permissions"]) == ("root:root", "0644")
    assert file_bytes(motd) == f"role {name}\n".encode()
    assert files["/etc/nodesmith/encoded.bin"]["encoding"] == "b64"
    assert file_bytes(files["/etc/nodesmith/encoded.bin"]) == b"encoded payload\n"
    app = files["/etc/nodesmith/app.conf"]
    assert file_bytes(app) == b"password=from-secret\n"  # prod's Secret, not decoy's
    assert app["permissions"] == "0600"
    assert files["/etc/nodesmith/appended"]["append"] is True
    users = {u["name"]: u for u in cc["users"]}
    assert users["ops"] == {
        "name": "ops",
        "groups": "adm,sudo",
        "shell": "/bin/bash",
        "lock_passwd": True,
        "sudo": "ALL=(ALL) NOPASSWD:ALL",
        "ssh_authorized_keys": [
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB8h1CjkJZ0oXcKp5cW4JtH9fI0f3m0Xy4g6a7fQJ4rL "
            "ops@example"
        ],
    }
    assert users["svc"]["passwd"] == "$6$rounds=4096$salt$hashedpasswordvalue"
    assert cc["ntp"] == {"enabled": True, "servers": ["ntp1.example.org", "ntp2.example.org"]}
    assert cc["disk_setup"] == {
        "/dev/vdb": {"table_type": "gpt", "layout": True, "overwrite": False}
    }
    assert cc["fs_setup"] == [
        {
            "device": "/dev/vdb",
            "filesystem": "ext4",
            "label": "data",
            "partition": "auto",
            "extra_opts": ["-E", "lazy_itable_init=1"],
        }
    ]
    assert cc["mounts"] == [["LABEL=data", "/var/lib/data", "ext4", "defaults", "0", "2"]]
    assert cc["bootcmd"] == [f"echo boot-{name} > /run/nodesmith-boot"]

    # --- the on-node script and its config --------------------------------------------
    assert cc["runcmd"] == [
        ["/usr/local/sbin/nodesmith-bootstrap", "/run/kubeadm/nodesmith-bootstrap.json"]
    ]
    script = files["/usr/local/sbin/nodesmith-bootstrap"]
    assert script["permissions"] == "0755"
    source = file_bytes(script).decode()
    assert source.startswith("#!/usr/bin/python3\n")
    compile(source, "nodesmith-bootstrap", "exec")
    config = script_config(cc)
    assert config["role"] == role
    assert config["command"] == ["kubeadm", verb, "--config", config_path, "--v", "4"]
    assert config["pre"] == [f"echo pre-{name} > /run/nodesmith-pre", "sysctl --system"]
    assert config["post"] == [f"echo post-{name} > /run/nodesmith-post"]
    if role != "init-control-plane":
        assert config["redact"] == [TOKENS[role]]
    assert files["/run/kubeadm/nodesmith-bootstrap.json"]["permissions"] == "0600"


SCRIPT_FILES = {"/usr/local/sbin/nodesmith-bootstrap", "/run/kubeadm/nodesmith-bootstrap.json"}


@pytest.mark.parametrize(
    ("generation", "api", "role"), SEED_CASES, ids=["-".join(c) for c in SEED_CASES]
)
def test_seed_semantics(generation: str, api: str, role: str) -> None:
    """A cluster.k8s.io/v1alpha1 Machine alone, as the 2018 API had it: the role from
    versions.controlPlane, the kubelet version, the runtime from versions.containerRuntime,
    networking and endpoint from the Cluster, the CA from alpha-ca; nothing else."""
    result = _render(generation, api, role)
    cc = assert_valid_cloud_config(result.userdata)
    files = files_by_path(cc)
    assert set(cc) == {"write_files", "runcmd"}  # no users, ntp, disks: there is no config
    pki = {p.removeprefix("/etc/kubernetes/pki/") for p in files if "/pki/" in p}
    if role == "init-control-plane":
        cluster, init, kubelet = kubeadm_documents(cc, "/run/kubeadm/kubeadm.yaml")
        assert cluster == {
            "apiVersion": f"kubeadm.k8s.io/{api}",
            "kind": "ClusterConfiguration",
            "kubernetesVersion": KUBE_VERSIONS[api],  # versions.controlPlane
            "clusterName": "alpha",
            "controlPlaneEndpoint": "192.0.2.10:6443",  # status.apiEndpoints[0], not the decoy's
            "networking": {
                "serviceSubnet": "10.128.0.0/12,fd00:20::/108",
                "podSubnet": "192.168.0.0/16,fd00:10::/56",
                "dnsDomain": "corp.local",
            },
            **({"featureGates": {"IPv6DualStack": True}} if api == "v1beta2" else {}),
        }
        assert init["nodeRegistration"] == {"criSocket": CONTAINERD}  # containerRuntime
        assert (kubelet["clusterDNS"], kubelet["clusterDomain"]) == (["10.128.0.10"], "corp.local")
        kubeadm_file, verb = "/run/kubeadm/kubeadm.yaml", "init"
        assert result.bootstrap_token_secret is None
    else:
        (join,) = kubeadm_documents(cc, "/run/kubeadm/kubeadm-join-config.yaml")
        token = join["discovery"]["bootstrapToken"]
        assert TOKEN.fullmatch(token["token"])  # generated: a seed Machine has none to give
        assert token["apiServerEndpoint"] == "192.0.2.10:6443"
        assert token["caCertHashes"] == [_ca_hash("prod")]
        reg = join["nodeRegistration"]
        # No uninitialized taint: a 2018 management cluster has nothing that removes it.
        assert "taints" not in reg
        if role == "worker-join":
            assert reg == {"criSocket": CONTAINERD}
            assert "controlPlane" not in join
        else:
            assert reg == {}  # cp-1 names no runtime: kubeadm detects it
            assert "controlPlane" in join
        secret = result.bootstrap_token_secret
        assert secret is not None
        assert (
            base64.b64decode(secret["data"]["token-secret"]).decode()
            == (token["token"].split(".")[1])
        )
        kubeadm_file, verb = "/run/kubeadm/kubeadm-join-config.yaml", "join"
    expected_pki = set() if role == "worker-join" else set(PKI_MODES)
    assert pki == expected_pki
    if expected_pki:
        assert file_bytes(files["/etc/kubernetes/pki/ca.key"]) == secret_data(
            CA_SECRETS, "alpha-ca", "prod", "tls.key"
        )
    assert set(files) == {kubeadm_file, *SCRIPT_FILES} | {
        f"/etc/kubernetes/pki/{name}" for name in expected_pki
    }
    config = script_config(cc)
    assert (config["pre"], config["post"]) == ([], [])
    assert config["command"] == ["kubeadm", verb, "--config", kubeadm_file]
    # The data Secret belongs to the Machine: there is no KubeadmConfig to own it.
    from bootstrap.render.outputs import bootstrap_secret

    assert (result.config_kind, result.config_name) == ("Machine", ROLE_MACHINES[role])
    assert "ownerReferences" not in bootstrap_secret(result)["metadata"]  # these have no uid


def test_goldens_are_all_used() -> None:
    """No stale golden lies around that no case compares against."""
    expected = {GOLDEN / f"{g}-{a}" / f"{r}.cloud-config" for g, a, r in CASES}
    assert set(GOLDEN.rglob("*.cloud-config")) == expected


def test_secret_output_of_golden_init() -> None:
    """The CAPI bootstrap Secret for the golden init carries the config's uid as owner."""
    from bootstrap.render.outputs import bootstrap_secret

    secret = bootstrap_secret(_render("v1beta2", "v1beta4", "init-control-plane"))
    owner = secret["metadata"]["ownerReferences"][0]
    assert owner["uid"] == "0f6b1c9e-3f44-4c55-9a63-4f2c8b1d7a01"
    assert owner["apiVersion"] == "bootstrap.cluster.x-k8s.io/v1beta2"
    assert yaml.safe_load(yaml.safe_dump(secret)) == secret
