"""Generated kubeadm documents are checked against the field list of their API version."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import bootstrap
from bootstrap.errors import EXIT_TERMINAL, TerminalError
from bootstrap.render import kubeadm_schema
from bootstrap.render.kubeadm_schema import API_VERSIONS, check_document, kinds, known_fields

WHERE = "KubeadmConfig default/w0"
V3 = "kubeadm.k8s.io/v1beta3"
V4 = "kubeadm.k8s.io/v1beta4"

V1BETA3_DOCS = """
apiVersion: kubeadm.k8s.io/v1beta3
kind: InitConfiguration
bootstrapTokens:
- token: abcdef.0123456789abcdef
  description: first
  ttl: 24h0m0s
  usages: [signing, authentication]
  groups: [system:bootstrappers:kubeadm:default-node-token]
- token: ghijkl.0123456789abcdef
  expires: "2026-12-03T00:00:00Z"
nodeRegistration:
  name: cp-0
  criSocket: unix:///var/run/containerd/containerd.sock
  taints:
  - key: node-role.kubernetes.io/control-plane
    effect: NoSchedule
  kubeletExtraArgs:
    cloud-provider: external
    node-ip: 10.0.0.5
  ignorePreflightErrors: [NumCPU]
  imagePullPolicy: IfNotPresent
localAPIEndpoint:
  advertiseAddress: 10.0.0.5
  bindPort: 6443
skipPhases: [addon/kube-proxy]
patches:
  directory: /etc/kubeadm/patches
---
apiVersion: kubeadm.k8s.io/v1beta3
kind: ClusterConfiguration
kubernetesVersion: v1.30.4
clusterName: c1
controlPlaneEndpoint: 10.0.0.100:6443
certificatesDir: /etc/kubernetes/pki
imageRepository: registry.k8s.io
featureGates:
  EtcdLearnerMode: true
networking:
  serviceSubnet: 10.96.0.0/12
  podSubnet: 192.168.0.0/16,fd00:10::/56
  dnsDomain: cluster.local
etcd:
  local:
    imageRepository: registry.k8s.io
    imageTag: 3.5.15-0
    dataDir: /var/lib/etcd
    extraArgs:
      listen-metrics-urls: http://0.0.0.0:2381
    serverCertSANs: [etcd.local]
    peerCertSANs: [10.0.0.5]
apiServer:
  certSANs: [api.example.test, 10.0.0.100]
  timeoutForControlPlane: 4m0s
  extraArgs:
    audit-log-path: /var/log/audit.log
    cloud-provider: external
  extraVolumes:
  - name: audit
    hostPath: /var/log
    mountPath: /var/log
    readOnly: false
    pathType: DirectoryOrCreate
controllerManager:
  extraArgs:
    bind-address: 0.0.0.0
scheduler:
  extraArgs:
    bind-address: 0.0.0.0
dns:
  imageRepository: registry.k8s.io/coredns
  imageTag: v1.11.1
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
clusterDNS: [10.96.0.10]
clusterDomain: cluster.local
containerRuntimeEndpoint: unix:///var/run/containerd/containerd.sock
rotateCertificates: true
serverTLSBootstrap: true
maxPods: 110
evictionHard:
  memory.available: 100Mi
  nodefs.available: 10%
featureGates:
  NodeSwap: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true, cacheTTL: 2m}
  x509: {clientCAFile: /etc/kubernetes/pki/ca.crt}
authorization:
  mode: Webhook
systemReserved: {cpu: 100m, memory: 256Mi}
registerWithTaints:
- key: example.test/booting
  value: "true"
  effect: NoSchedule
memoryThrottlingFactor: 0.8
resolvConf: /run/systemd/resolve/resolv.conf
---
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: ipvs
clusterCIDR: 192.168.0.0/16
ipvs:
  strictARP: true
  scheduler: rr
conntrack:
  maxPerCore: 0
metricsBindAddress: 0.0.0.0:10249
---
apiVersion: kubeadm.k8s.io/v1beta3
kind: JoinConfiguration
caCertPath: /etc/kubernetes/pki/ca.crt
nodeRegistration:
  name: w-0
  criSocket: unix:///var/run/containerd/containerd.sock
  taints: null
  kubeletExtraArgs:
    node-labels: role=worker
discovery:
  bootstrapToken:
    token: abcdef.0123456789abcdef
    apiServerEndpoint: 10.0.0.100:6443
    caCertHashes:
    - sha256:0000000000000000000000000000000000000000000000000000000000000000
    unsafeSkipCAVerification: false
  tlsBootstrapToken: abcdef.0123456789abcdef
  timeout: 5m0s
controlPlane:
  localAPIEndpoint:
    advertiseAddress: 10.0.0.6
    bindPort: 6443
  certificateKey: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
"""

V1BETA4_DOCS = """
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
dryRun: false
bootstrapTokens:
- token: abcdef.0123456789abcdef
  ttl: 15m0s
nodeRegistration:
  name: cp-0
  criSocket: unix:///var/run/containerd/containerd.sock
  taints: []
  kubeletExtraArgs:
  - name: cloud-provider
    value: external
  - name: node-labels
    value: a=b
  - name: node-labels
    value: c=d
  imagePullPolicy: IfNotPresent
  imagePullSerial: true
localAPIEndpoint: {advertiseAddress: 10.0.0.5, bindPort: 6443}
timeouts:
  controlPlaneComponentHealthCheck: 4m0s
  kubeletHealthCheck: 4m0s
  kubernetesAPICall: 1m0s
  etcdAPICall: 2m0s
  tlsBootstrap: 5m0s
  discovery: 5m0s
  upgradeManifests: 5m0s
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: v1.31.2
clusterName: c1
controlPlaneEndpoint: api.example.test:6443
encryptionAlgorithm: ECDSA-P256
certificateValidityPeriod: 8760h0m0s
caCertificateValidityPeriod: 87600h0m0s
networking:
  serviceSubnet: 10.96.0.0/12
  podSubnet: 192.168.0.0/16
  dnsDomain: cluster.local
etcd:
  local:
    dataDir: /var/lib/etcd
    extraArgs:
    - name: listen-metrics-urls
      value: http://0.0.0.0:2381
    extraEnvs:
    - name: ETCD_UNSUPPORTED_ARCH
      value: arm64
apiServer:
  certSANs: [api.example.test]
  extraArgs:
  - name: audit-log-path
    value: /var/log/audit.log
  extraEnvs:
  - name: HTTPS_PROXY
    value: http://proxy.example.test:3128
  - name: POD_IP
    valueFrom:
      fieldRef: {fieldPath: status.podIP}
  extraVolumes:
  - {name: audit, hostPath: /var/log, mountPath: /var/log, pathType: DirectoryOrCreate}
controllerManager:
  extraArgs: [{name: bind-address, value: 0.0.0.0}]
scheduler:
  extraArgs: [{name: bind-address, value: 0.0.0.0}]
dns:
  disabled: false
  imageTag: v1.11.3
proxy:
  disabled: true
featureGates: {ControlPlaneKubeletLocalMode: true}
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
dryRun: false
caCertPath: /etc/kubernetes/pki/ca.crt
nodeRegistration:
  criSocket: unix:///var/run/crio/crio.sock
  kubeletExtraArgs: [{name: node-labels, value: role=worker}]
discovery:
  bootstrapToken:
    token: abcdef.0123456789abcdef
    apiServerEndpoint: api.example.test:6443
    caCertHashes: [sha256:0000000000000000000000000000000000000000000000000000000000000000]
timeouts:
  discovery: 5m0s
  tlsBootstrap: 5m0s
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ResetConfiguration
force: true
cleanupTmpDir: true
unmountFlags: [MNT_DETACH]
"""


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def _doc(text: str, kind: str) -> dict[str, Any]:
    return copy.deepcopy(next(d for d in _docs(text) if d["kind"] == kind))


def _refused(doc: Any) -> TerminalError:
    with pytest.raises(TerminalError) as info:
        check_document(doc, WHERE)
    return info.value


@pytest.mark.parametrize("text", [V1BETA3_DOCS, V1BETA4_DOCS], ids=["v1beta3", "v1beta4"])
def test_realistic_documents_are_accepted(text: str) -> None:
    docs = _docs(text)
    assert len(docs) >= 3
    for doc in docs:
        check_document(doc, WHERE)


def test_unknown_field_names_full_path_and_version() -> None:
    doc = _doc(V1BETA4_DOCS, "ClusterConfiguration")
    doc["apiServer"]["extraArgs"][0] = {"nme": "audit-log-path", "value": "x"}
    err = _refused(doc)
    assert err.reason == "UnknownField"
    assert err.field == "ClusterConfiguration.apiServer.extraArgs[0].nme"
    assert err.obj == WHERE
    assert V4 in err.message
    assert str(err).startswith(f"{WHERE} ClusterConfiguration.apiServer.extraArgs[0].nme:")
    assert err.exit_code == EXIT_TERMINAL


@pytest.mark.parametrize(
    ("kind", "path"),
    [
        ("InitConfiguration", ("nodeRegistration", "kubeletExtraArgs")),
        ("JoinConfiguration", ("nodeRegistration", "kubeletExtraArgs")),
        ("ClusterConfiguration", ("apiServer", "extraArgs")),
        ("ClusterConfiguration", ("controllerManager", "extraArgs")),
        ("ClusterConfiguration", ("scheduler", "extraArgs")),
        ("ClusterConfiguration", ("etcd", "local", "extraArgs")),
    ],
)
@pytest.mark.parametrize("version", [V3, V4])
def test_extra_args_shape_follows_the_version(
    version: str, kind: str, path: tuple[str, ...]
) -> None:
    as_map = {"v": "2", "cloud-provider": "external"}
    as_list = [{"name": "v", "value": "2"}, {"name": "cloud-provider", "value": "external"}]
    right, wrong = (as_map, as_list) if version == V3 else (as_list, as_map)

    def build(extra: Any) -> dict[str, Any]:
        doc: dict[str, Any] = {"apiVersion": version, "kind": kind}
        node = doc
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = copy.deepcopy(extra)
        return doc

    check_document(build(right), WHERE)
    err = _refused(build(wrong))
    assert err.reason == "InvalidFieldType"
    assert err.field == ".".join((kind, *path))
    assert version in err.message
    expected = "a map of string" if version == V3 else "a list of Arg{name, value}"
    assert expected in err.message


def test_v1beta4_arg_values_must_be_strings() -> None:
    doc = {
        "apiVersion": V4,
        "kind": "JoinConfiguration",
        "nodeRegistration": {"kubeletExtraArgs": [{"name": "v", "value": 2}]},
    }
    err = _refused(doc)
    assert err.field == "JoinConfiguration.nodeRegistration.kubeletExtraArgs[0].value"
    assert "expected string" in err.message and "got 2" in err.message


def test_v1beta3_map_values_path_uses_the_key() -> None:
    doc = {"apiVersion": V3, "kind": "ClusterConfiguration", "apiServer": {"extraArgs": {"v": 4}}}
    assert _refused(doc).field == "ClusterConfiguration.apiServer.extraArgs[v]"


@pytest.mark.parametrize(
    ("version", "kind", "doc", "field"),
    [
        # removed in v1beta4: replaced by timeouts.controlPlaneComponentHealthCheck
        (
            V4,
            "ClusterConfiguration",
            {"apiServer": {"timeoutForControlPlane": "4m"}},
            "ClusterConfiguration.apiServer.timeoutForControlPlane",
        ),
        # removed in v1beta4: replaced by timeouts.discovery
        (
            V4,
            "JoinConfiguration",
            {"discovery": {"timeout": "5m"}},
            "JoinConfiguration.discovery.timeout",
        ),
        # added in v1beta4 only
        (V3, "InitConfiguration", {"timeouts": {}}, "InitConfiguration.timeouts"),
        (V3, "InitConfiguration", {"dryRun": True}, "InitConfiguration.dryRun"),
        (
            V3,
            "ClusterConfiguration",
            {"apiServer": {"extraEnvs": []}},
            "ClusterConfiguration.apiServer.extraEnvs",
        ),
        (V3, "ClusterConfiguration", {"proxy": {"disabled": True}}, "ClusterConfiguration.proxy"),
        (
            V3,
            "ClusterConfiguration",
            {"dns": {"disabled": True}},
            "ClusterConfiguration.dns.disabled",
        ),
        (
            V3,
            "ClusterConfiguration",
            {"encryptionAlgorithm": "ECDSA-P256"},
            "ClusterConfiguration.encryptionAlgorithm",
        ),
        (
            V3,
            "JoinConfiguration",
            {"nodeRegistration": {"imagePullSerial": True}},
            "JoinConfiguration.nodeRegistration.imagePullSerial",
        ),
        # not a kubeadm field at all
        (
            V4,
            "InitConfiguration",
            {"timeouts": {"discovry": "1m"}},
            "InitConfiguration.timeouts.discovry",
        ),
        (
            V4,
            "InitConfiguration",
            {"nodeRegistration": {"taints": [{"key": "a", "efect": "NoSchedule"}]}},
            "InitConfiguration.nodeRegistration.taints[0].efect",
        ),
        (
            V3,
            "InitConfiguration",
            {"bootstrapTokens": [{"token": "abcdef.0123456789abcdef", "tll": "1h"}]},
            "InitConfiguration.bootstrapTokens[0].tll",
        ),
        (
            V4,
            "ClusterConfiguration",
            {"etcd": {"local": {"extraEnvs": [{"name": "A", "vaule": "b"}]}}},
            "ClusterConfiguration.etcd.local.extraEnvs[0].vaule",
        ),
        (
            V4,
            "ClusterConfiguration",
            {"apiServer": {"extraVolumes": [{"name": "a", "readonly": True}]}},
            "ClusterConfiguration.apiServer.extraVolumes[0].readonly",
        ),
        (
            "kubelet.config.k8s.io/v1beta1",
            "KubeletConfiguration",
            {"cgroupDrive": "systemd"},
            "KubeletConfiguration.cgroupDrive",
        ),
        (
            "kubelet.config.k8s.io/v1beta1",
            "KubeletConfiguration",
            {"registerWithTaints": [{"key": "a", "efect": "NoSchedule"}]},
            "KubeletConfiguration.registerWithTaints[0].efect",
        ),
        (
            "kubeproxy.config.k8s.io/v1alpha1",
            "KubeProxyConfiguration",
            {"ipvs": {"strictArp": True}},
            "KubeProxyConfiguration.ipvs.strictArp",
        ),
    ],
)
def test_fields_of_the_other_version_or_typos_are_unknown(
    version: str, kind: str, doc: dict[str, Any], field: str
) -> None:
    err = _refused({"apiVersion": version, "kind": kind, **doc})
    assert err.reason == "UnknownField"
    assert err.field == field
    assert version in err.message


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"localAPIEndpoint": {"bindPort": "6443"}}, "InitConfiguration.localAPIEndpoint.bindPort"),
        ({"localAPIEndpoint": {"bindPort": True}}, "InitConfiguration.localAPIEndpoint.bindPort"),
        ({"localAPIEndpoint": ["10.0.0.1"]}, "InitConfiguration.localAPIEndpoint"),
        (
            {"nodeRegistration": {"taints": {"key": "a"}}},
            "InitConfiguration.nodeRegistration.taints",
        ),
        ({"nodeRegistration": {"taints": ["a"]}}, "InitConfiguration.nodeRegistration.taints[0]"),
        ({"skipPhases": "addon/kube-proxy"}, "InitConfiguration.skipPhases"),
        ({"skipPhases": ["preflight", 3]}, "InitConfiguration.skipPhases[1]"),
        ({"patches": {"directory": None, "x": 1}}, "InitConfiguration.patches.x"),
    ],
)
def test_wrong_shapes_are_refused(doc: dict[str, Any], field: str) -> None:
    err = _refused({"apiVersion": V4, "kind": "InitConfiguration", **doc})
    assert err.field == field
    assert err.reason in {"InvalidFieldType", "UnknownField"}


def test_wrong_type_in_kubelet_maps_and_numbers() -> None:
    kubelet = "kubelet.config.k8s.io/v1beta1"
    base = {"apiVersion": kubelet, "kind": "KubeletConfiguration"}
    check_document({**base, "memoryThrottlingFactor": 1}, WHERE)  # int is a valid number
    assert _refused({**base, "featureGates": {"A": "true"}}).field == (
        "KubeletConfiguration.featureGates[A]"
    )
    assert _refused({**base, "clusterDNS": "10.96.0.10"}).field == "KubeletConfiguration.clusterDNS"
    assert _refused({**base, "authentication": "x"}).field == "KubeletConfiguration.authentication"


def test_null_is_accepted_anywhere_as_go_does() -> None:
    doc = {
        "apiVersion": V3,
        "kind": "JoinConfiguration",
        "nodeRegistration": {"taints": None, "kubeletExtraArgs": None},
        "controlPlane": None,
        "discovery": {"bootstrapToken": {"token": None}},
    }
    check_document(doc, WHERE)


def test_empty_control_plane_marks_a_control_plane_join() -> None:
    check_document({"apiVersion": V4, "kind": "JoinConfiguration", "controlPlane": {}}, WHERE)


SECRET = "abcdef.0123456789abcdef"


@pytest.mark.parametrize(
    ("kind", "doc", "shown"),
    [
        ("JoinConfiguration", {"discovery": {"bootstrapToken": {"token": [SECRET]}}},
         "(got a list of 1)"),
        ("JoinConfiguration", {"discovery": {"tlsBootstrapToken": 12345}},
         "(got an int, not shown: it may be secret)"),
        ("JoinConfiguration", {"controlPlane": {"certificateKey": {"k": SECRET}}},
         "(got a map with keys ['k'])"),
        ("InitConfiguration", {"bootstrapTokens": {"token": SECRET}},
         "(got a map with keys ['token'])"),
        ("InitConfiguration", {"bootstrapTokens": [{"token": 7}]},
         "(got an int, not shown: it may be secret)"),
    ],
)  # fmt: skip
def test_secret_values_are_not_echoed(kind: str, doc: dict[str, Any], shown: str) -> None:
    err = _refused({"apiVersion": V4, "kind": kind, **doc})
    assert str(err).endswith(shown)
    assert "0123456789abcdef" not in str(err)


@pytest.mark.parametrize(
    ("doc", "reason", "field"),
    [
        (
            {"apiVersion": "kubeadm.k8s.io/v1beta1", "kind": "InitConfiguration"},
            "UnknownAPIVersion",
            "apiVersion",
        ),
        (
            {"apiVersion": "kubeadm.k8s.io/v1", "kind": "InitConfiguration"},
            "UnknownAPIVersion",
            "apiVersion",
        ),
        ({"kind": "InitConfiguration"}, "UnknownAPIVersion", "apiVersion"),
        ({"apiVersion": V3, "kind": "ResetConfiguration"}, "UnknownKind", "kind"),
        ({"apiVersion": V4, "kind": "KubeletConfiguration"}, "UnknownKind", "kind"),
        ({"apiVersion": V4}, "UnknownKind", "kind"),
        ({"apiVersion": V4, "kind": ["InitConfiguration"]}, "UnknownKind", "kind"),
    ],
)
def test_unknown_api_version_or_kind_is_terminal(
    doc: dict[str, Any], reason: str, field: str
) -> None:
    err = _refused(doc)
    assert err.reason == reason and err.field == field and err.terminal


def test_non_mapping_document_is_terminal() -> None:
    err = _refused(["apiVersion", V4])
    assert err.reason == "InvalidFieldType"


def test_field_lists_ship_in_the_package_and_are_well_formed() -> None:
    schema_dir = Path(bootstrap.__file__).parent / "render" / "schemas"
    files = sorted(p.name for p in schema_dir.glob("*.json"))
    assert files == [
        "kubeadm.k8s.io_v1beta2.json",
        "kubeadm.k8s.io_v1beta3.json",
        "kubeadm.k8s.io_v1beta4.json",
        "kubelet.config.k8s.io_v1beta1.json",
        "kubeproxy.config.k8s.io_v1alpha1.json",
    ]
    for name in files:
        raw = json.loads((schema_dir / name).read_text())
        assert name == raw["apiVersion"].replace("/", "_") + ".json"
        assert raw["source"].startswith("kubernetes/kubernetes ")
    assert set(API_VERSIONS) == {
        "kubeadm.k8s.io/v1beta2",
        V3,
        V4,
        "kubelet.config.k8s.io/v1beta1",
        "kubeproxy.config.k8s.io/v1alpha1",
    }
    for version in ("kubeadm.k8s.io/v1beta2", V3, V4):
        assert {"InitConfiguration", "ClusterConfiguration", "JoinConfiguration"} <= set(
            kinds(version)
        )
    assert kinds("nope/v1") == ()


def test_known_fields_match_upstream_differences() -> None:
    v3 = known_fields(V3, "ClusterConfiguration")
    v4 = known_fields(V4, "ClusterConfiguration")
    assert v4 - v3 == {
        "proxy",
        "encryptionAlgorithm",
        "certificateValidityPeriod",
        "caCertificateValidityPeriod",
    }
    assert v3 - v4 == set()
    assert known_fields(V4, "InitConfiguration") - known_fields(V3, "InitConfiguration") == {
        "dryRun",
        "timeouts",
    }
    assert known_fields(V4, "JoinConfiguration") - known_fields(V3, "JoinConfiguration") == {
        "dryRun",
        "timeouts",
    }
    with pytest.raises(KeyError):
        known_fields(V3, "ResetConfiguration")


@pytest.mark.parametrize(
    ("api", "kind", "doc", "dropped", "left"),
    [
        # v1beta4-only fields on older targets go, with their paths ...
        ("v1beta3", "ClusterConfiguration", {"encryptionAlgorithm": "ECDSA-P256"},
         ["ClusterConfiguration.encryptionAlgorithm"], {}),
        ("v1beta3", "InitConfiguration", {"dryRun": False, "nodeRegistration": {
            "name": "n", "imagePullSerial": True}},
         ["InitConfiguration.dryRun", "InitConfiguration.nodeRegistration.imagePullSerial"],
         {"nodeRegistration": {"name": "n"}}),
        ("v1beta2", "ClusterConfiguration", {"apiServer": {"extraEnvs": [], "certSANs": ["a"]}},
         ["ClusterConfiguration.apiServer.extraEnvs"], {"apiServer": {"certSANs": ["a"]}}),
        # ... a field no version knows stays, for check_document to refuse as a typo ...
        ("v1beta3", "ClusterConfiguration", {"encryptionAlgorithmz": "x"}, [],
         {"encryptionAlgorithmz": "x"}),
        # ... and the newest API drops nothing.
        ("v1beta4", "ClusterConfiguration", {"encryptionAlgorithm": "RSA-2048"}, [],
         {"encryptionAlgorithm": "RSA-2048"}),
    ],
)  # fmt: skip
def test_newer_fields_are_dropped_for_an_older_target(
    api: str, kind: str, doc: dict[str, Any], dropped: list[str], left: dict[str, Any]
) -> None:
    document = {"apiVersion": f"kubeadm.k8s.io/{api}", "kind": kind, **doc}
    assert sorted(kubeadm_schema.drop_newer_fields(document)) == dropped
    assert {k: v for k, v in document.items() if k not in ("apiVersion", "kind")} == left
