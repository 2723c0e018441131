"""v1beta1 <-> v1beta2 conversion of KubeadmConfig and KubeadmConfigTemplate, as the webhook
serves it: each version's every field one way and back again exactly, what one version cannot
hold kept in the annotation and put back only while the other side still holds what it became,
Go durations, bad input named by its field, and the ConversionReview envelope. Pure functions:
milliseconds in all."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from bootstrap.controller import conversion
from bootstrap.controller.conversion import ANNOTATION, V1BETA1, V1BETA2, ConversionError

Obj = dict[str, Any]
ABSENT = "<absent>"  # a stashed field that was not there
CPCHS = "controlPlaneComponentHealthCheckSeconds"
TOKEN = "abcdef.0123456789abcdef"
META: Obj = {
    "name": "cp-0",
    "namespace": "prod",
    "uid": "5b1c2c9e-0c1e-4f43-9a53-1f7a7c9d2e11",
    "generation": 3,
    "labels": {"cluster.x-k8s.io/cluster-name": "c1"},
    "annotations": {"team": "infra"},
}


def config(version: str, spec: Obj | None = None, status: Obj | None = None, **meta: Any) -> Obj:
    doc: Obj = {"apiVersion": version, "kind": "KubeadmConfig", "metadata": {**META, **meta}}
    if spec is not None:
        doc["spec"] = spec
    if status is not None:
        doc["status"] = status
    return doc


def _ttl(value: Any) -> Obj:
    return config(V1BETA1, {"initConfiguration": {"bootstrapTokens": [{"ttl": value}]}})


def _ttl_seconds(value: Any) -> Obj:
    return config(V1BETA2, {"initConfiguration": {"bootstrapTokens": [{"ttlSeconds": value}]}})


def _api(version: str, **fields: Any) -> Obj:
    return config(version, {"clusterConfiguration": {"apiServer": fields}})


def template(version: str, spec: Obj) -> Obj:
    return {
        "apiVersion": version,
        "kind": "KubeadmConfigTemplate",
        "metadata": {"name": "md-0", "namespace": "prod", "uid": "7d0e3d5c-1111-2222-3333-4444"},
        "spec": {"template": {"metadata": {"labels": {"pool": "a"}}, "spec": spec}},
    }


def stash(doc: Obj) -> tuple[str, list[tuple[str, Any]]] | None:
    """The annotation as (from, [(dotted path, value or ABSENT)]), or None when there is none."""
    raw = doc.get("metadata", {}).get("annotations", {}).get(ANNOTATION)
    if raw is None:
        return None
    data = json.loads(raw)
    fields = [(".".join(map(str, f["path"])), f.get("value", ABSENT)) for f in data["fields"]]
    return data["from"], fields


def without_stash(doc: Obj) -> Obj:
    """``doc`` without the annotation (and the annotations map, if only it was in there)."""
    out = copy.deepcopy(doc)
    annotations = out.get("metadata", {}).get("annotations")
    if annotations is not None and ANNOTATION in annotations:
        del annotations[ANNOTATION]
        if not annotations:
            del out["metadata"]["annotations"]
    return out


# ---------------------------------------------------------------------------------------------
# Every field of the CABPK v1beta1 KubeadmConfigSpec, and what v1beta2 makes of it

UNCHANGED: Obj = {  # what is the same in both versions
    "files": [
        {"path": "/etc/a.conf", "owner": "root:root", "permissions": "0644",
         "encoding": "base64", "append": True, "content": "aGk="},
        {"path": "/etc/b.conf", "owner": "root:root", "permissions": "0600",
         "encoding": "gzip+base64", "append": False,
         "contentFrom": {"secret": {"name": "b-conf", "key": "b.conf"}}},
    ],
    "diskSetup": {
        "partitions": [{"device": "/dev/vdb", "layout": True, "overwrite": False,
                        "tableType": "gpt"}],
        "filesystems": [{"device": "/dev/vdb1", "filesystem": "ext4", "label": "data",
                         "partition": "auto", "overwrite": False, "replaceFS": "ntfs",
                         "extraOpts": ["-E", "lazy_itable_init=1"]}],
    },
    "mounts": [["LABEL=data", "/var/lib/data"], ["tmpfs", "/tmp", "tmpfs", "defaults"]],
    "bootCommands": ["echo boot"],
    "preKubeadmCommands": ["echo pre", "swapoff -a"],
    "postKubeadmCommands": ["echo post"],
    "users": [
        {"name": "ops", "gecos": "Operator", "groups": "sudo,adm", "homeDir": "/home/ops",
         "inactive": False, "shell": "/bin/bash", "passwd": "$6$salt$hash",
         "primaryGroup": "ops", "lockPassword": True, "sudo": "ALL=(ALL) NOPASSWD:ALL",
         "sshAuthorizedKeys": ["ssh-ed25519 AAAAC3Nza ops@example"]},
        {"name": "svc", "passwdFrom": {"secret": {"name": "svc-passwd", "key": "passwd"}}},
    ],
    "ntp": {"servers": ["0.pool.ntp.org", "1.pool.ntp.org"], "enabled": True},
    "format": "cloud-config",
    "verbosity": 5,
    "ignition": {"containerLinuxConfig": {"additionalConfig": "storage: {}\n", "strict": True}},
}  # fmt: skip

NODE_V1: Obj = {
    "name": "cp-0",
    "criSocket": "unix:///run/containerd/containerd.sock",
    "taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
    "kubeletExtraArgs": {"node-labels": "tier=cp", "cgroup-driver": "systemd"},
    "ignorePreflightErrors": ["Swap", "NumCPU"],
    "imagePullPolicy": "IfNotPresent",
}
NODE_V2: Obj = {
    **NODE_V1,
    "kubeletExtraArgs": [
        {"name": "cgroup-driver", "value": "systemd"},
        {"name": "node-labels", "value": "tier=cp"},
    ],
}
APISERVER_COMMON: Obj = {
    "certSANs": ["api.example", "10.0.0.10"],
    "extraVolumes": [{"name": "audit", "hostPath": "/etc/audit", "mountPath": "/etc/audit",
                      "readOnly": True, "pathType": "DirectoryOrCreate"}],
}  # fmt: skip
CLUSTER_COMMON: Obj = {
    "controlPlaneEndpoint": "api.example:6443",
    "dns": {"imageRepository": "registry.example/coredns", "imageTag": "v1.11.1"},
    "certificatesDir": "/etc/kubernetes/pki",
    "imageRepository": "registry.example",
    "featureGates": {"EtcdLearnerMode": True, "ControlPlaneKubeletLocalMode": False},
}
CLUSTER_V1: Obj = {
    "apiVersion": "kubeadm.k8s.io/v1beta3",
    "kind": "ClusterConfiguration",
    **CLUSTER_COMMON,
    "etcd": {"local": {
        "imageRepository": "registry.example/etcd", "imageTag": "3.5.15-0",
        "dataDir": "/var/lib/etcd",
        "extraArgs": {"quota-backend-bytes": "8589934592", "auto-compaction-retention": "8"},
        "serverCertSANs": ["etcd.example"], "peerCertSANs": ["10.0.0.11"]}},
    "networking": {"serviceSubnet": "10.96.0.0/12", "podSubnet": "10.244.0.0/16",
                   "dnsDomain": "cluster.local"},
    "kubernetesVersion": "v1.30.2",
    "apiServer": {**APISERVER_COMMON,
                  "extraArgs": {"audit-log-path": "-", "anonymous-auth": "false"},
                  "timeoutForControlPlane": "20m"},
    "controllerManager": {"extraArgs": {"bind-address": "0.0.0.0"},
                          "extraVolumes": [{"name": "flex", "hostPath": "/opt/flex",
                                            "mountPath": "/opt/flex"}]},
    "scheduler": {"extraArgs": {"bind-address": "0.0.0.0", "profiling": "false"}},
    "clusterName": "c1",
}  # fmt: skip
CLUSTER_V2: Obj = {
    **CLUSTER_COMMON,
    "etcd": {"local": {
        "imageRepository": "registry.example/etcd", "imageTag": "3.5.15-0",
        "dataDir": "/var/lib/etcd",
        "extraArgs": [{"name": "auto-compaction-retention", "value": "8"},
                      {"name": "quota-backend-bytes", "value": "8589934592"}],
        "serverCertSANs": ["etcd.example"], "peerCertSANs": ["10.0.0.11"]}},
    "apiServer": {**APISERVER_COMMON, "extraArgs": [{"name": "anonymous-auth", "value": "false"},
                                                    {"name": "audit-log-path", "value": "-"}]},
    "controllerManager": {"extraArgs": [{"name": "bind-address", "value": "0.0.0.0"}],
                          "extraVolumes": [{"name": "flex", "hostPath": "/opt/flex",
                                            "mountPath": "/opt/flex"}]},
    "scheduler": {"extraArgs": [{"name": "bind-address", "value": "0.0.0.0"},
                                {"name": "profiling", "value": "false"}]},
}  # fmt: skip
INIT_COMMON: Obj = {
    "localAPIEndpoint": {"advertiseAddress": "10.0.0.11", "bindPort": 6443},
    "skipPhases": ["addon/kube-proxy"],
    "patches": {"directory": "/etc/kubeadm/patches"},
}
INIT_V1: Obj = {
    "apiVersion": "kubeadm.k8s.io/v1beta3",
    "kind": "InitConfiguration",
    **INIT_COMMON,
    "bootstrapTokens": [
        {"token": TOKEN, "ttl": "24h0m0s", "usages": ["signing", "authentication"],
         "groups": ["system:bootstrappers:kubeadm:default-node-token"], "description": "joins"},
        {"token": "ghijkl.0123456789abcdef", "expires": "2030-01-01T00:00:00Z",
         "description": "fixed"},
    ],
    "nodeRegistration": NODE_V1,
}  # fmt: skip
INIT_V2: Obj = {
    **INIT_COMMON,
    "bootstrapTokens": [
        {"token": TOKEN, "ttlSeconds": 86400, "usages": ["signing", "authentication"],
         "groups": ["system:bootstrappers:kubeadm:default-node-token"], "description": "joins"},
        {"token": "ghijkl.0123456789abcdef", "expires": "2030-01-01T00:00:00Z",
         "description": "fixed"},
    ],
    "nodeRegistration": NODE_V2,
    "timeouts": {CPCHS: 1200},
}  # fmt: skip
JOIN_COMMON: Obj = {
    "caCertPath": "/etc/kubernetes/pki/ca.crt",
    "controlPlane": {"localAPIEndpoint": {"advertiseAddress": "10.0.0.12", "bindPort": 6443}},
    "skipPhases": ["preflight"],
    "patches": {"directory": "/etc/kubeadm/patches"},
}
TOKEN_DISCOVERY: Obj = {
    "bootstrapToken": {"token": TOKEN, "apiServerEndpoint": "api.example:6443",
                       "caCertHashes": ["sha256:" + "ab" * 32], "unsafeSkipCAVerification": False},
    "tlsBootstrapToken": TOKEN,
}  # fmt: skip
JOIN_V1: Obj = {
    "apiVersion": "kubeadm.k8s.io/v1beta3",
    "kind": "JoinConfiguration",
    **JOIN_COMMON,
    "nodeRegistration": NODE_V1,
    "discovery": {**TOKEN_DISCOVERY, "timeout": "5m0s"},
}
JOIN_V2: Obj = {
    **JOIN_COMMON,
    "nodeRegistration": NODE_V2,
    "discovery": TOKEN_DISCOVERY,
    "timeouts": {CPCHS: 1200, "tlsBootstrapSeconds": 300},
}
SPEC_V1: Obj = {
    **UNCHANGED,
    "clusterConfiguration": CLUSTER_V1,
    "initConfiguration": INIT_V1,
    "joinConfiguration": JOIN_V1,
    "useExperimentalRetryJoin": True,
}
SPEC_V2: Obj = {
    **UNCHANGED,
    "clusterConfiguration": CLUSTER_V2,
    "initConfiguration": INIT_V2,
    "joinConfiguration": JOIN_V2,
}
SPEC_V1_STASH = [  # what v1beta2 cannot hold, in the order it is met
    ("useExperimentalRetryJoin", True),
    ("clusterConfiguration.apiVersion", "kubeadm.k8s.io/v1beta3"),
    ("clusterConfiguration.kind", "ClusterConfiguration"),
    ("initConfiguration.apiVersion", "kubeadm.k8s.io/v1beta3"),
    ("initConfiguration.kind", "InitConfiguration"),
    ("joinConfiguration.apiVersion", "kubeadm.k8s.io/v1beta3"),
    ("joinConfiguration.kind", "JoinConfiguration"),
    ("clusterConfiguration.kubernetesVersion", "v1.30.2"),
    ("clusterConfiguration.clusterName", "c1"),
    ("clusterConfiguration.networking",
     {"serviceSubnet": "10.96.0.0/12", "podSubnet": "10.244.0.0/16", "dnsDomain": "cluster.local"}),
    ("clusterConfiguration.apiServer.timeoutForControlPlane", "20m"),  # "20m0s" is what Go writes
]  # fmt: skip

# The other row: external etcd, file discovery with a generated kubeconfig, no TypeMeta.
EXTERNAL_V1: Obj = {
    "clusterConfiguration": {
        "etcd": {"external": {"endpoints": ["https://etcd-0:2379"], "caFile": "/etc/etcd/ca.crt",
                              "certFile": "/etc/etcd/c.crt", "keyFile": "/etc/etcd/c.key"}},
        "apiServer": {"timeoutForControlPlane": "4m0s"},
    },
    "joinConfiguration": {
        "discovery": {
            "file": {"kubeConfigPath": "/etc/kubernetes/discovery.conf", "kubeConfig": {
                "cluster": {"server": "https://api.example:6443", "insecureSkipTLSVerify": False},
                "user": {"exec": {"command": "/bin/token", "args": ["--x"],
                                  "apiVersion": "client.authentication.k8s.io/v1",
                                  "provideClusterInfo": True}}}},
            "tlsBootstrapToken": TOKEN,
            "timeout": "1h30m",
        },
    },
}  # fmt: skip
EXTERNAL_V2: Obj = {
    "clusterConfiguration": {"etcd": EXTERNAL_V1["clusterConfiguration"]["etcd"]},
    "initConfiguration": {"timeouts": {CPCHS: 240}},
    "joinConfiguration": {
        "discovery": {
            "file": EXTERNAL_V1["joinConfiguration"]["discovery"]["file"],
            "tlsBootstrapToken": TOKEN,
        },
        "timeouts": {CPCHS: 240, "tlsBootstrapSeconds": 5400},
    },
}
EXTERNAL_STASH = [("joinConfiguration.discovery.timeout", "1h30m")]

STATUS_V1: Obj = {
    "ready": True,
    "dataSecretName": "cp-0",
    "failureReason": "InvalidField",
    "failureMessage": "KubeadmConfig prod/cp-0 spec.files[0].path: must be absolute",
    "observedGeneration": 3,
    "conditions": [
        {"type": "DataSecretAvailable", "status": "False", "severity": "Error",
         "reason": "InvalidField", "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"},
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
    ],
    "v1beta2": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "Ready", "message": "",
         "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 3},
    ]},
}  # fmt: skip
STATUS_V2: Obj = {
    "initialization": {"dataSecretCreated": True},
    "dataSecretName": "cp-0",
    "observedGeneration": 3,
    "conditions": STATUS_V1["v1beta2"]["conditions"],
    "deprecated": {"v1beta1": {
        "conditions": STATUS_V1["conditions"],
        "failureReason": "InvalidField",
        "failureMessage": STATUS_V1["failureMessage"],
    }},
}  # fmt: skip

FULL_V1 = {  # name: (v1beta1 object, the v1beta2 object without the annotation, the stash)
    "KubeadmConfig, local etcd and token discovery": (
        config(V1BETA1, SPEC_V1, STATUS_V1),
        config(V1BETA2, SPEC_V2, STATUS_V2),
        [(f"spec.{path}", value) for path, value in SPEC_V1_STASH],
    ),
    "KubeadmConfig, external etcd and file discovery": (
        config(V1BETA1, EXTERNAL_V1, {"ready": False}),
        config(V1BETA2, EXTERNAL_V2, {}),
        [(f"spec.{path}", value) for path, value in EXTERNAL_STASH],
    ),
    "KubeadmConfigTemplate": (
        template(V1BETA1, SPEC_V1),
        template(V1BETA2, SPEC_V2),
        [(f"spec.template.spec.{path}", value) for path, value in SPEC_V1_STASH],
    ),
}


@pytest.mark.parametrize("name", list(FULL_V1))
def test_every_v1beta1_field_goes_up_and_comes_back_exactly(name: str) -> None:
    v1, want, stashed = FULL_V1[name]
    before = copy.deepcopy(v1)
    v2 = conversion.convert(v1, V1BETA2)
    assert v1 == before  # the input is untouched
    assert without_stash(v2) == want
    assert stash(v2) == (V1BETA1, stashed)
    back = conversion.convert(v2, V1BETA1)
    assert back == v1
    assert ANNOTATION not in json.dumps(back)  # nothing left over, no stale annotation


# ---------------------------------------------------------------------------------------------
# A v1beta2 object using every v1beta2-only thing

TIMEOUTS_INIT = {
    CPCHS: 300,
    "kubeletHealthCheckSeconds": 100,
    "kubernetesAPICallSeconds": 60,
    "etcdAPICallSeconds": 120,
    "tlsBootstrapSeconds": 50,
    "discoverySeconds": 200,
}
TIMEOUTS_JOIN = {
    CPCHS: 360,
    "kubeletHealthCheckSeconds": 101,
    "kubernetesAPICallSeconds": 61,
    "etcdAPICallSeconds": 121,
    "tlsBootstrapSeconds": 90,
    "discoverySeconds": 201,
}
REPEATED = [
    {"name": "v", "value": "2"},
    {"name": "audit-log-path", "value": "-"},
    {"name": "v", "value": "4"},
]  # a repeated name, and unsorted
UNSORTED = [{"name": "profiling", "value": "false"}, {"name": "bind-address", "value": "0.0.0.0"}]
HUB_SPEC: Obj = {
    **UNCHANGED,
    "clusterConfiguration": {
        "controlPlaneEndpoint": "api.example:6443",
        "apiServer": {"extraArgs": REPEATED, "certSANs": ["api.example"]},
        "controllerManager": {"extraArgs": [{"name": "bind-address", "value": "0.0.0.0"}]},
        "scheduler": {"extraArgs": UNSORTED},
        "etcd": {"local": {"extraArgs": [{"name": "quota-backend-bytes", "value": "1"}]}},
        "certificateValidityPeriodDays": 365,
        "caCertificateValidityPeriodDays": 3650,
        "encryptionAlgorithm": "ECDSA-P256",
    },
    "initConfiguration": {
        "bootstrapTokens": [{"token": TOKEN, "ttlSeconds": 900}],
        "nodeRegistration": {"kubeletExtraArgs": [{"name": "node-labels", "value": "a=b"}],
                             "imagePullSerial": False},
        "timeouts": TIMEOUTS_INIT,
    },
    "joinConfiguration": {
        "nodeRegistration": {"kubeletExtraArgs": [{"name": "max-pods", "value": "200"},
                                                  {"name": "max-pods", "value": "110"}]},
        "discovery": {"bootstrapToken": {"token": TOKEN, "apiServerEndpoint": "api.example:6443",
                                         "unsafeSkipCAVerification": True}},
        "timeouts": TIMEOUTS_JOIN,
    },
}  # fmt: skip
SPOKE_SPEC: Obj = {
    **UNCHANGED,
    "clusterConfiguration": {
        "controlPlaneEndpoint": "api.example:6443",
        "apiServer": {"extraArgs": {"audit-log-path": "-", "v": "4"}, "certSANs": ["api.example"],
                      "timeoutForControlPlane": "5m0s"},
        "controllerManager": {"extraArgs": {"bind-address": "0.0.0.0"}},
        "scheduler": {"extraArgs": {"bind-address": "0.0.0.0", "profiling": "false"}},
        "etcd": {"local": {"extraArgs": {"quota-backend-bytes": "1"}}},
        "certificateValidityPeriodDays": 365,
        "caCertificateValidityPeriodDays": 3650,
        "encryptionAlgorithm": "ECDSA-P256",
    },
    "initConfiguration": {
        "bootstrapTokens": [{"token": TOKEN, "ttl": "15m0s"}],
        "nodeRegistration": {"kubeletExtraArgs": {"node-labels": "a=b"},
                             "imagePullSerial": False},
    },
    "joinConfiguration": {
        "nodeRegistration": {"kubeletExtraArgs": {"max-pods": "110"}},
        "discovery": {"bootstrapToken": {"token": TOKEN, "apiServerEndpoint": "api.example:6443",
                                         "unsafeSkipCAVerification": True},
                      "timeout": "1m30s"},
    },
}  # fmt: skip
HUB_STASH = [
    ("clusterConfiguration.apiServer.extraArgs", REPEATED),
    ("clusterConfiguration.scheduler.extraArgs", UNSORTED),
    ("joinConfiguration.nodeRegistration.kubeletExtraArgs",
     HUB_SPEC["joinConfiguration"]["nodeRegistration"]["kubeletExtraArgs"]),
    *((f"initConfiguration.timeouts.{k}", v) for k, v in TIMEOUTS_INIT.items() if k != CPCHS),
    *((f"joinConfiguration.timeouts.{k}", v) for k, v in TIMEOUTS_JOIN.items()
      if k != "tlsBootstrapSeconds"),
]  # fmt: skip
HUB_STATUS: Obj = {
    "initialization": {"dataSecretCreated": False},
    "dataSecretName": "cp-0",
    "observedGeneration": 7,
    "conditions": [{"type": "Ready", "status": "False", "reason": "NotReady", "message": "x",
                    "lastTransitionTime": "2026-01-02T00:00:00Z", "observedGeneration": 7}],
    "deprecated": {"v1beta1": {
        "conditions": [{"type": "Ready", "status": "False", "severity": "Warning",
                        "reason": "NotReady", "lastTransitionTime": "2026-01-02T00:00:00Z"}],
        "failureReason": "CANotFound",
        "failureMessage": "no CA",
    }},
}  # fmt: skip
SPOKE_STATUS: Obj = {
    "ready": False,
    "dataSecretName": "cp-0",
    "observedGeneration": 7,
    "conditions": HUB_STATUS["deprecated"]["v1beta1"]["conditions"],
    "failureReason": "CANotFound",
    "failureMessage": "no CA",
    "v1beta2": {"conditions": HUB_STATUS["conditions"]},
}

FULL_V2 = {  # name: (v1beta2 object, the v1beta1 object without the annotation, the stash)
    "KubeadmConfig": (
        config(V1BETA2, HUB_SPEC, HUB_STATUS),
        config(V1BETA1, SPOKE_SPEC, SPOKE_STATUS),
        [
            *((f"spec.{path}", value) for path, value in HUB_STASH),
            ("status.initialization.dataSecretCreated", False),  # v1beta1 drops false going up
        ],
    ),
    "KubeadmConfigTemplate": (
        template(V1BETA2, HUB_SPEC),
        template(V1BETA1, SPOKE_SPEC),
        [(f"spec.template.spec.{path}", value) for path, value in HUB_STASH],
    ),
}


@pytest.mark.parametrize("name", list(FULL_V2))
def test_every_v1beta2_only_thing_goes_down_and_comes_back_exactly(name: str) -> None:
    v2, want, stashed = FULL_V2[name]
    v1 = conversion.convert(v2, V1BETA1)
    assert without_stash(v1) == want
    assert stash(v1) == (V1BETA2, stashed)
    assert conversion.convert(v1, V1BETA2) == v2


# ---------------------------------------------------------------------------------------------
# Small shapes, each way: what they become, what is stashed, and back exactly

ROWS: dict[str, tuple[Obj, Obj, list[tuple[str, Any]] | None]] = {
    "nothing lost: no annotation added": (
        config(V1BETA1, {"joinConfiguration": {"discovery": {"timeout": "5m0s"}}}),
        config(V1BETA2, {"joinConfiguration": {"timeouts": {"tlsBootstrapSeconds": 300}}}),
        None,
    ),
    "timeoutForControlPlane alone makes both timeouts (upstream), and goes back alone": (
        _api(V1BETA1, timeoutForControlPlane="4m0s"),
        config(V1BETA2, {"initConfiguration": {"timeouts": {CPCHS: 240}},
                         "joinConfiguration": {"timeouts": {CPCHS: 240}}}),
        None,
    ),
    "init's health check alone: the join's stays absent": (
        config(V1BETA2, {"initConfiguration": {"timeouts": {CPCHS: 240}}}),
        _api(V1BETA1, timeoutForControlPlane="4m0s"),
        [(f"spec.joinConfiguration.timeouts.{CPCHS}", ABSENT)],
    ),
    "the join's health check alone goes to the annotation and back": (
        config(V1BETA2, {"joinConfiguration": {"timeouts": {CPCHS: 100}}}),
        config(V1BETA1, {}),
        [(f"spec.joinConfiguration.timeouts.{CPCHS}", 100)],
    ),
    "empty containers of either status are kept exactly": (
        config(V1BETA2, status={"initialization": {}, "deprecated": {"v1beta1": {}}}),
        config(V1BETA1, status={"ready": False}),
        [("status.deprecated", {"v1beta1": {}}), ("status.initialization", {})],
    ),
    "an empty extraArgs map is an empty list": (
        config(V1BETA1, {"clusterConfiguration": {"apiServer": {"extraArgs": {}}}}),
        config(V1BETA2, {"clusterConfiguration": {"apiServer": {"extraArgs": []}}}),
        None,
    ),
    "an extraArgs item without a value is an empty value, kept exactly": (
        config(V1BETA2, {"clusterConfiguration": {"scheduler": {"extraArgs": [{"name": "x"}]}}}),
        config(V1BETA1, {"clusterConfiguration": {"scheduler": {"extraArgs": {"x": ""}}}}),
        [("spec.clusterConfiguration.scheduler.extraArgs", [{"name": "x"}])],
    ),
    "an empty v1beta2 status is ready: false (no omitempty in v1beta1)": (
        config(V1BETA2, status={}),
        config(V1BETA1, status={"ready": False}),
        None,
    ),
    "a v1beta1 status without ready is kept that way": (
        config(V1BETA1, status={"dataSecretName": "cp-0"}),
        config(V1BETA2, status={"dataSecretName": "cp-0"}),
        [("status.ready", ABSENT)],
    ),
    "an empty v1beta2 list of conditions is kept, v1beta1's too": (
        config(V1BETA1, status={"ready": True, "conditions": [], "v1beta2": {"conditions": []}}),
        config(V1BETA2, status={"initialization": {"dataSecretCreated": True}, "conditions": [],
                                "deprecated": {"v1beta1": {"conditions": []}}}),
        None,
    ),
    "an empty joinConfiguration the timeout lands in stays empty on the way back": (
        config(V1BETA1, {"clusterConfiguration": {"apiServer": {"timeoutForControlPlane": "4m0s"}},
                         "joinConfiguration": {}}),
        config(V1BETA2, {"initConfiguration": {"timeouts": {CPCHS: 240}},
                         "joinConfiguration": {"timeouts": {CPCHS: 240}}}),
        [("spec.joinConfiguration", {})],
    ),
    "an empty annotations map is kept": (
        config(V1BETA1, {"useExperimentalRetryJoin": False}, annotations={}),
        config(V1BETA2, {}, annotations=None),  # {} with the annotation in it
        [("spec.useExperimentalRetryJoin", False)],
    ),
    "no annotations map: none is left behind": (
        config(V1BETA2, {"initConfiguration": {"timeouts": {"discoverySeconds": 10}}},
               annotations=None),
        config(V1BETA1, {}, annotations=None),
        [("spec.initConfiguration.timeouts.discoverySeconds", 10)],
    ),
    "a template's metadata passes through": (
        template(V1BETA1, {"format": "ignition"}),
        template(V1BETA2, {"format": "ignition"}),
        None,
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(ROWS))
def test_a_shape_converts_and_comes_back(name: str) -> None:
    source, want, stashed = ROWS[name]
    source = _drop_none_annotations(source)
    want = _drop_none_annotations(want)
    target = want["apiVersion"]
    got = conversion.convert(source, target)
    assert without_stash(got) == want
    assert stash(got) == (None if stashed is None else (source["apiVersion"], stashed))
    assert conversion.convert(got, source["apiVersion"]) == source


def _drop_none_annotations(doc: Obj) -> Obj:
    out = copy.deepcopy(doc)
    if out["metadata"].get("annotations", {}) is None:
        del out["metadata"]["annotations"]
    return out


def test_the_same_version_is_an_equal_copy_even_with_a_stale_annotation() -> None:
    doc = config(V1BETA1, SPEC_V1, annotations={ANNOTATION: "not json"})
    got = conversion.convert(doc, V1BETA1)
    assert got == doc and got is not doc and got["spec"] is not doc["spec"]


def test_a_stale_or_broken_annotation_is_dropped_and_a_new_one_written() -> None:
    stale = json.dumps({"from": V1BETA2, "fields": [{"path": ["spec", "x"], "value": 1}]})
    for raw in (stale, "not json", '{"from": "v9", "fields": []}'):
        doc = config(V1BETA2, {"joinConfiguration": {"timeouts": {"discoverySeconds": 5}}},
                     annotations={"team": "infra", ANNOTATION: raw})  # fmt: skip
        got = conversion.convert(doc, V1BETA1)
        assert got["metadata"]["annotations"]["team"] == "infra"
        assert "x" not in got["spec"]
        assert stash(got) == (V1BETA2, [("spec.joinConfiguration.timeouts.discoverySeconds", 5)])


def test_a_stash_never_writes_metadata_or_the_type() -> None:
    fields = [{"path": ["metadata", "name"], "value": "evil"}, {"path": ["kind"], "value": "X"}]
    raw = json.dumps({"from": V1BETA1, "fields": fields})
    doc = config(V1BETA2, {}, annotations={ANNOTATION: raw})
    got = conversion.convert(doc, V1BETA1)
    assert (got["metadata"]["name"], got["kind"]) == ("cp-0", "KubeadmConfig")
    assert "annotations" not in got["metadata"]


# ---------------------------------------------------------------------------------------------
# A v1beta1 client writes back what it read


def test_a_v1beta1_client_editing_files_keeps_every_v1beta2_only_field() -> None:
    hub, _, _ = FULL_V2["KubeadmConfig"]
    spoke = conversion.convert(hub, V1BETA1)
    spoke["spec"]["files"] = [{"path": "/etc/new.conf", "content": "new"}]
    got = conversion.convert(spoke, V1BETA2)
    want = copy.deepcopy(hub)
    want["spec"]["files"] = [{"path": "/etc/new.conf", "content": "new"}]
    assert got == want


def test_a_v1beta1_client_editing_an_extra_args_map_gets_its_edit_and_keeps_the_rest() -> None:
    hub, _, _ = FULL_V2["KubeadmConfig"]
    spoke = conversion.convert(hub, V1BETA1)
    spoke["spec"]["clusterConfiguration"]["apiServer"]["extraArgs"]["v"] = "6"
    got = conversion.convert(spoke, V1BETA2)
    assert got["spec"]["clusterConfiguration"]["apiServer"]["extraArgs"] == [
        {"name": "audit-log-path", "value": "-"},
        {"name": "v", "value": "6"},
    ]
    assert got["spec"]["clusterConfiguration"]["scheduler"]["extraArgs"] == UNSORTED  # untouched
    assert got["spec"]["initConfiguration"]["timeouts"] == TIMEOUTS_INIT
    assert got["spec"]["joinConfiguration"]["timeouts"] == TIMEOUTS_JOIN


def test_a_v1beta1_client_editing_timeout_for_control_plane_moves_both_health_checks() -> None:
    hub, _, _ = FULL_V2["KubeadmConfig"]
    spoke = conversion.convert(hub, V1BETA1)
    spoke["spec"]["clusterConfiguration"]["apiServer"]["timeoutForControlPlane"] = "10m"
    got = conversion.convert(spoke, V1BETA2)
    assert got["spec"]["initConfiguration"]["timeouts"] == {**TIMEOUTS_INIT, CPCHS: 600}
    assert got["spec"]["joinConfiguration"]["timeouts"] == {**TIMEOUTS_JOIN, CPCHS: 600}
    assert stash(got) == (
        V1BETA1,
        [("spec.clusterConfiguration.apiServer.timeoutForControlPlane", "10m")],
    )


def test_ready_set_by_a_v1beta1_client_wins_over_a_stashed_false() -> None:
    hub, _, _ = FULL_V2["KubeadmConfig"]
    spoke = conversion.convert(hub, V1BETA1)
    spoke["status"]["ready"] = True
    got = conversion.convert(spoke, V1BETA2)
    assert got["status"]["initialization"] == {"dataSecretCreated": True}


def test_a_v1beta2_client_editing_the_seconds_drops_the_original_duration_text() -> None:
    v1, _, _ = FULL_V1["KubeadmConfig, local etcd and token discovery"]
    hub = conversion.convert(v1, V1BETA2)
    hub["spec"]["initConfiguration"]["timeouts"][CPCHS] = 1500
    got = conversion.convert(hub, V1BETA1)
    assert got["spec"]["clusterConfiguration"]["apiServer"]["timeoutForControlPlane"] == "25m0s"
    assert got["spec"]["clusterConfiguration"]["kubernetesVersion"] == "v1.30.2"  # unrelated


# ---------------------------------------------------------------------------------------------
# Go durations: parsed going up (truncated to seconds), written as Go writes them going down

DURATIONS = [  # (v1beta1 ttl, ttlSeconds, what a v1beta2 object without the annotation gives)
    ("24h0m0s", 86400, "24h0m0s"),
    ("20m", 1200, "20m0s"),  # with the annotation: "20m" again
    ("4m0s", 240, "4m0s"),
    ("30s", 30, "30s"),
    ("0s", 0, "0s"),
    ("0", 0, "0s"),
    ("90s", 90, "1m30s"),
    ("1h30m", 5400, "1h30m0s"),
    ("1h2m3.5s", 3723, "1h2m3s"),  # fractional: truncated, as upstream
    ("1.5h", 5400, "1h30m0s"),
    ("+1.9s", 1, "1s"),
    (".5m", 30, "30s"),
    ("1.s", 1, "1s"),
    ("1500ms", 1, "1s"),
    ("2000000us", 2, "2s"),
    ("3000000\u00b5s", 3, "3s"),
    ("4000000\u03bcs", 4, "4s"),
    ("5000000000ns", 5, "5s"),
    ("999ms", 0, "0s"),
    ("1m1m", 120, "2m0s"),
    ("1000000h", 2**31 - 1, "596523h14m7s"),  # capped at int32, as upstream
]


@pytest.mark.parametrize(("text", "seconds", "go"), DURATIONS)
def test_a_duration_becomes_seconds_and_comes_back(text: str, seconds: int, go: str) -> None:
    spec = {"initConfiguration": {"bootstrapTokens": [{"token": TOKEN, "ttl": text}]}}
    v2 = conversion.convert(config(V1BETA1, spec), V1BETA2)
    assert v2["spec"]["initConfiguration"]["bootstrapTokens"] == [
        {"token": TOKEN, "ttlSeconds": seconds}
    ]
    assert conversion.convert(v2, V1BETA1)["spec"] == spec  # the text restored
    plain = conversion.convert(without_stash(v2), V1BETA1)
    assert plain["spec"]["initConfiguration"]["bootstrapTokens"] == [{"token": TOKEN, "ttl": go}]
    assert stash(v2) == (
        None if text == go else (V1BETA1, [("spec.initConfiguration.bootstrapTokens.0.ttl", text)])
    )


# ---------------------------------------------------------------------------------------------
# Bad input: a ConversionError naming the field from the object's root, and the value

INIT = "spec.initConfiguration"
TOKEN0 = f"{INIT}.bootstrapTokens[0]"
API = "spec.clusterConfiguration.apiServer"


BAD: dict[str, tuple[Obj, str, str]] = {  # name: (object, field, how the value is shown)
    "a ttl that is not a duration": (_ttl("forever"), f"{TOKEN0}.ttl", "'forever'"),
    "a ttl in days (Go has no d)": (_ttl("1d"), f"{TOKEN0}.ttl", "'1d'"),
    "a ttl without a unit": (_ttl("300"), f"{TOKEN0}.ttl", "'300'"),
    "a ttl of only a dot": (_ttl(".s"), f"{TOKEN0}.ttl", "'.s'"),
    "an empty ttl": (_ttl(""), f"{TOKEN0}.ttl", "''"),
    "a negative ttl": (_ttl("-5m"), f"{TOKEN0}.ttl", "'-5m'"),
    "a ttl past Go's range": (_ttl("3000000h"), f"{TOKEN0}.ttl", "'3000000h'"),
    "a ttl as a number": (_ttl(300), f"{TOKEN0}.ttl", "300"),
    "a timeoutForControlPlane in words": (
        _api(V1BETA1, timeoutForControlPlane="5 minutes"), f"{API}.timeoutForControlPlane",
        "'5 minutes'"),
    "a discovery timeout that is not one": (
        config(V1BETA1, {"joinConfiguration": {"discovery": {"timeout": "soon"}}}),
        "spec.joinConfiguration.discovery.timeout", "'soon'"),
    "an extraArgs value that is a number": (
        _api(V1BETA1, extraArgs={"v": 4}), f"{API}.extraArgs[v]", "4"),
    "an extraArgs value that may be secret is not shown": (
        config(V1BETA1, {"joinConfiguration": {"nodeRegistration": {
            "kubeletExtraArgs": {"bootstrap-token": 12345}}}}),
        "spec.joinConfiguration.nodeRegistration.kubeletExtraArgs[bootstrap-token]",
        "an int, not shown: it may be secret"),
    "v1beta1 extraArgs as a list": (
        _api(V1BETA1, extraArgs=[{"name": "v", "value": "4"}]), f"{API}.extraArgs", "a list of 1"),
    "a bootstrap token that is a string is not shown": (
        config(V1BETA1, {"initConfiguration": {"bootstrapTokens": [TOKEN]}}),
        f"{INIT}.bootstrapTokens[0]", "a str, not shown: it may be secret"),
    "bootstrapTokens as a map": (
        config(V1BETA1, {"initConfiguration": {"bootstrapTokens": {"a": 1}}}),
        f"{INIT}.bootstrapTokens", "a map with keys ['a']"),
    "a clusterConfiguration that is a list, in a template": (
        template(V1BETA1, {"clusterConfiguration": ["x"]}),
        "spec.template.spec.clusterConfiguration", "a list of 1"),
    "a spec that is a string": (config(V1BETA1, "x"), "spec", "'x'"),  # type: ignore[arg-type]
    "a ready that is a string": (
        config(V1BETA1, status={"ready": "true"}), "status.ready", "'true'"),
    "a negative ttlSeconds": (_ttl_seconds(-1), f"{TOKEN0}.ttlSeconds", "-1"),
    "a fractional ttlSeconds": (_ttl_seconds(1.5), f"{TOKEN0}.ttlSeconds", "1.5"),
    "a ttlSeconds that is a bool": (
        _ttl_seconds(True), f"{TOKEN0}.ttlSeconds", "True"),
    "a ttlSeconds that is a string": (
        _ttl_seconds("300"), f"{TOKEN0}.ttlSeconds", "'300'"),
    "a ttlSeconds over int32": (
        _ttl_seconds(2**31), f"{TOKEN0}.ttlSeconds", "2147483648"),
    "a v1beta2-only timeout that is a bool": (
        config(V1BETA2, {"joinConfiguration": {"timeouts": {"discoverySeconds": False}}}),
        "spec.joinConfiguration.timeouts.discoverySeconds", "False"),
    "timeouts as a list": (
        config(V1BETA2, {"initConfiguration": {"timeouts": [1]}}), f"{INIT}.timeouts",
        "a list of 1"),
    "an extraArgs item without a name": (
        _api(V1BETA2, extraArgs=[{"value": "4"}]), f"{API}.extraArgs[0].name", "None"),
    "an extraArgs item whose value is a number": (
        _api(V1BETA2, extraArgs=[{"name": "a", "value": "1"}, {"name": "v", "value": 4}]),
        f"{API}.extraArgs[1].value", "4"),
    "an extraArgs item that is a string": (
        _api(V1BETA2, extraArgs=["v=4"]), f"{API}.extraArgs[0]", "'v=4'"),
    "v1beta2 extraArgs as a map": (
        _api(V1BETA2, extraArgs={"v": "4"}), f"{API}.extraArgs", "a map with keys ['v']"),
    "a dataSecretCreated that is a string (a \"secret\" field: errors.may_be_secret)": (
        config(V1BETA2, status={"initialization": {"dataSecretCreated": "yes"}}),
        "status.initialization.dataSecretCreated", "a str, not shown: it may be secret"),
    "an unknown apiVersion": ({**config(V1BETA1), "apiVersion": "v9"}, "apiVersion", "'v9'"),
    "an unknown kind": ({**config(V1BETA1), "kind": "Machine"}, "kind", "'Machine'"),
    "metadata that is a list": ({**config(V1BETA1), "metadata": []}, "metadata", "a list of 0"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(BAD))
def test_bad_input_names_its_field_and_value(name: str) -> None:
    doc, where, shown = BAD[name]
    target = V1BETA1 if doc.get("apiVersion") == V1BETA2 else V1BETA2
    with pytest.raises(ConversionError) as caught:
        conversion.convert(doc, target)
    error = caught.value
    assert (error.field, error.reason, error.terminal) == (where, "ConversionFailed", True)
    assert f"(got {shown})" in error.message
    assert TOKEN not in str(error)
    answer = conversion.review(_review([doc], target))["response"]
    assert answer["result"]["status"] == "Failure"
    assert where in answer["result"]["message"] and "convertedObjects" not in answer


def test_the_message_names_the_object() -> None:
    with pytest.raises(ConversionError) as caught:
        conversion.convert(_ttl("forever"), V1BETA2)
    assert str(caught.value) == (
        "KubeadmConfig prod/cp-0 spec.initConfiguration.bootstrapTokens[0].ttl: "
        'must be a Go duration such as "4m0s", "20m" or "1h30m" (got \'forever\')'
    )


# ---------------------------------------------------------------------------------------------
# ConversionReview


def _review(objects: Any, desired: Any = V1BETA2, uid: Any = "uid-1") -> Obj:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": uid, "desiredAPIVersion": desired, "objects": objects},
    }


def test_a_review_converts_every_object_in_order() -> None:
    v1, v2, _ = FULL_V1["KubeadmConfig, local etcd and token discovery"]
    small = config(V1BETA1, {"format": "ignition"}, name="w-1")
    answer = conversion.review(_review([small, v1, template(V1BETA2, {"format": "ignition"})]))
    assert (answer["apiVersion"], answer["kind"]) == ("apiextensions.k8s.io/v1", "ConversionReview")
    response = answer["response"]
    assert response["uid"] == "uid-1"
    assert response["result"] == {"status": "Success"}
    first, second, third = response["convertedObjects"]
    assert first == config(V1BETA2, {"format": "ignition"}, name="w-1")
    assert without_stash(second) == v2
    assert third == template(V1BETA2, {"format": "ignition"})
    assert conversion.review(_review([], V1BETA1))["response"] == {
        "uid": "uid-1", "convertedObjects": [], "result": {"status": "Success"}
    }  # fmt: skip


def test_a_review_with_one_bad_object_fails_whole() -> None:
    answer = conversion.review(_review([config(V1BETA1, {}), _ttl("forever")]))
    assert answer["response"] == {
        "uid": "uid-1",
        "result": {
            "status": "Failure",
            "message": "KubeadmConfig prod/cp-0 spec.initConfiguration.bootstrapTokens[0].ttl: "
            'must be a Go duration such as "4m0s", "20m" or "1h30m" (got \'forever\')',
        },
    }


MALFORMED: dict[str, tuple[Any, str, str]] = {  # name: (body, the uid echoed, in the message)
    "not a map": ([], "", "a ConversionReview must be a map (got a list)"),
    "no request": ({"kind": "ConversionReview"}, "", "request: missing"),
    "a request that is a string": ({"request": "x"}, "", "request: missing"),
    "no uid": (_review([], uid=None), "", "request.uid: must be a string (got None)"),
    "a uid that is a number": (_review([], uid=7), "", "request.uid: must be a string (got 7)"),
    "no desiredAPIVersion": (_review([], desired=None), "uid-1", "request.desiredAPIVersion"),
    "an unknown desiredAPIVersion": (
        _review([], desired="bootstrap.cluster.x-k8s.io/v1alpha4"), "uid-1",
        "request.desiredAPIVersion: must be"),
    "objects that are not a list": (
        _review({"a": 1}), "uid-1", "request.objects: must be a list (got a map)"),
    "an object that is not a map": (
        _review([config(V1BETA1), "x"]), "uid-1", "request.objects[1]: must be a map (got a str)"),
    "an object of another kind": (
        _review([{**config(V1BETA1), "kind": "Machine"}]), "uid-1", "kind: must be KubeadmConfig"),
    "an object of an unknown version": (
        _review([{**config(V1BETA1), "apiVersion": "x/v1"}]), "uid-1",
        "KubeadmConfig prod/cp-0 apiVersion: must be"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(MALFORMED))
def test_a_malformed_review_is_a_failure_never_an_exception(name: str) -> None:
    body, uid, words = MALFORMED[name]
    answer = conversion.review(body)
    assert answer["apiVersion"] == "apiextensions.k8s.io/v1"
    response = answer["response"]
    assert response["uid"] == uid
    assert response["result"]["status"] == "Failure"
    assert words in response["result"]["message"], response["result"]["message"]
    assert "convertedObjects" not in response


def test_an_unexpected_error_is_a_failure_too() -> None:
    deep: Any = {}
    for _ in range(20_000):  # deeper than the recursion limit
        deep = {"x": deep}
    answer = conversion.review(_review([config(V1BETA1, {"diskSetup": deep})]))
    assert answer["response"]["result"] == {
        "status": "Failure",
        "message": "conversion failed unexpectedly: RecursionError",
    }
