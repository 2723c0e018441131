"""The kubeadm document builders, directly: one table per concern, one right answer each.

Mostly what the v1beta2 target (Kubernetes 1.15-1.21) adds: settings it has no field for
travel as kubeadm flags or are dropped with a warning naming them, and a dual-stack Cluster
gets the feature gate kubeadm 1.20 needs.
"""

from __future__ import annotations

from typing import Any

import pytest

from bootstrap.errors import ObjectRef, TerminalError
from bootstrap.render import kubeadm
from bootstrap.render.objects import Cluster
from bootstrap.render.versions import parse_version

CONFIG = ObjectRef("KubeadmConfig", "default", "c")
SOCKET = "unix:///var/run/containerd/containerd.sock"


def _builder(version: str) -> kubeadm.Builder:
    return kubeadm.Builder(obj=CONFIG, version=parse_version(version, CONFIG, "spec.version"))


def _cluster(
    pods: tuple[str, ...] = ("10.244.0.0/16",),
    services: tuple[str, ...] = (),
    domain: str | None = None,
) -> Cluster:
    return Cluster(ref=ObjectRef("Cluster", "default", "demo"), api_version="v1beta1",
                   pod_cidrs=pods, service_cidrs=services, dns_domain=domain,
                   endpoint_host="192.168.57.10", endpoint_port=6443,
                   endpoint_field="spec.controlPlaneEndpoint")  # fmt: skip


@pytest.mark.parametrize(
    ("version", "api"),
    [
        ("v1.15.0", "kubeadm.k8s.io/v1beta2"),
        ("v1.20.2", "kubeadm.k8s.io/v1beta2"),
        ("v1.21.14", "kubeadm.k8s.io/v1beta2"),
        ("v1.22.0", "kubeadm.k8s.io/v1beta3"),
        ("v1.30.6", "kubeadm.k8s.io/v1beta3"),
        ("v1.31.0", "kubeadm.k8s.io/v1beta4"),
    ],
)
def test_api_follows_the_version(version: str, api: str) -> None:
    assert _builder(version).api == api


def test_below_1_15_is_terminal_and_names_the_version() -> None:
    with pytest.raises(TerminalError) as caught:
        parse_version("v1.14.10", CONFIG, "spec.version")
    assert caught.value.reason == "UnsupportedVersion"
    assert "v1.14.10" in str(caught.value) and "spec.version" in str(caught.value)


# (version, user init config) -> (flags, warnings mentioning, what the document keeps)
INIT_CASES: list[tuple[str, dict[str, Any], list[str], list[str], dict[str, Any]]] = [
    ("v1.20.2", {"skipPhases": ["preflight", "addon/coredns"]},
     ["--skip-phases=preflight,addon/coredns"], [], {}),
    ("v1.20.2", {"patches": {"directory": "/etc/kubeadm/patches"}},
     ["--experimental-patches=/etc/kubeadm/patches"], [], {}),
    ("v1.18.20", {"patches": {"directory": "/etc/kubeadm/patches"}},
     [], ["patches dropped"], {}),
    ("v1.20.2", {"nodeRegistration": {"imagePullPolicy": "Never"}},
     [], ["nodeRegistration.imagePullPolicy dropped"], {}),
    ("v1.30.6", {"skipPhases": ["preflight"]}, [], [], {"skipPhases": ["preflight"]}),
    ("v1.31.4", {"patches": {"directory": "/p"}}, [], [], {"patches": {"directory": "/p"}}),
]  # fmt: skip


@pytest.mark.parametrize(("version", "user", "flags", "warned", "kept"), INIT_CASES)
def test_init_fields_the_target_lacks(
    version: str, user: dict[str, Any], flags: list[str], warned: list[str],
    kept: dict[str, Any],
) -> None:  # fmt: skip
    b = _builder(version)
    doc = kubeadm.init_configuration(b, user, SOCKET)
    assert b.flags == flags
    assert [w for w in b.warnings if not any(n in w for n in warned)] == []
    assert len(b.warnings) == len(warned)
    for key, value in kept.items():
        assert doc[key] == value
    if b.api == "kubeadm.k8s.io/v1beta2":
        assert not {"skipPhases", "patches"} & set(doc)
        assert "imagePullPolicy" not in doc["nodeRegistration"]


def test_join_skip_phases_become_a_flag_on_v1beta2() -> None:
    b = _builder("v1.20.2")
    doc = kubeadm.join_configuration(
        b, {"skipPhases": ["preflight"]}, SOCKET, False, {"token": "abcdef.0123456789abcdef"}
    )
    assert b.flags == ["--skip-phases=preflight"] and "skipPhases" not in doc


@pytest.mark.parametrize("phases", [["a,b"], "preflight", [""], [3]])
def test_bad_skip_phases_are_terminal(phases: Any) -> None:
    with pytest.raises(TerminalError) as caught:
        kubeadm.init_configuration(_builder("v1.20.2"), {"skipPhases": phases}, SOCKET)
    assert "spec.initConfiguration.skipPhases" in str(caught.value)


@pytest.mark.parametrize(
    ("version", "pods", "services", "gate"),
    [
        ("v1.20.2", ("10.244.0.0/16", "fd00:10::/56"), (), True),
        ("v1.20.2", ("10.244.0.0/16",), ("10.96.0.0/12", "fd00:20::/108"), True),
        ("v1.20.2", ("10.244.0.0/16",), ("10.96.0.0/12",), None),
        ("v1.21.0", ("10.244.0.0/16", "fd00:10::/56"), (), None),
        ("v1.30.6", ("10.244.0.0/16", "fd00:10::/56"), (), None),
    ],
)
def test_dual_stack_gate_before_1_21(
    version: str, pods: tuple[str, ...], services: tuple[str, ...], gate: bool | None
) -> None:
    b = _builder(version)
    cluster = _cluster(pods, services)
    init = kubeadm.init_configuration(b, {}, SOCKET)
    doc = kubeadm.cluster_configuration(b, {}, cluster, init)
    kubelet = kubeadm.kubelet_configuration(b, cluster, doc)
    assert (doc.get("featureGates") or {}).get("IPv6DualStack") == gate
    assert (kubelet.get("featureGates") or {}).get("IPv6DualStack") == gate
    assert bool(b.warnings) == bool(gate)


def test_dual_stack_gate_turned_off_is_terminal() -> None:
    b = _builder("v1.20.2")
    with pytest.raises(TerminalError) as caught:
        kubeadm.cluster_configuration(
            b, {"featureGates": {"IPv6DualStack": False}},
            _cluster(("10.244.0.0/16", "fd00:10::/56")), {},
        )  # fmt: skip
    assert "spec.clusterConfiguration.featureGates.IPv6DualStack" in str(caught.value)


NET = {"serviceSubnet": "10.100.0.0/16", "dnsDomain": "corp.local"}


@pytest.mark.parametrize(
    ("services", "domain", "networking", "dns", "kubelet_domain"),
    [
        ((), None, {}, "10.96.0.10", "cluster.local"),
        (("10.100.0.0/16",), None, {}, "10.100.0.10", "cluster.local"),
        (("10.128.0.0/12", "fd00:20::/108"), "corp.local", {}, "10.128.0.10", "corp.local"),
        # The KubeadmConfig's own networking counts when the Cluster is silent ...
        ((), None, NET, "10.100.0.10", "corp.local"),
        # ... and the Cluster's wins where it speaks, in kubeadm and the kubelet alike.
        (("10.128.0.0/12",), None, NET, "10.128.0.10", "corp.local"),
        (("10.128.0.0/12",), "example.org", NET, "10.128.0.10", "example.org"),
    ],
)
def test_kubelet_dns_agrees_with_the_rendered_networking(
    services: tuple[str, ...], domain: str | None, networking: dict[str, str], dns: str,
    kubelet_domain: str,
) -> None:  # fmt: skip
    b = _builder("v1.20.2")
    cluster = _cluster(services=services, domain=domain)
    doc = kubeadm.cluster_configuration(b, {"networking": dict(networking)}, cluster, {})
    kubelet = kubeadm.kubelet_configuration(b, cluster, doc)
    assert kubelet["clusterDNS"] == [dns] and kubelet["clusterDomain"] == kubelet_domain
    assert doc["networking"].get("dnsDomain", "cluster.local") == kubelet_domain


@pytest.mark.parametrize("subnet", ["10.100.0.0/29", "not-a-cidr"])
def test_kubelet_dns_needs_a_usable_service_subnet(subnet: str) -> None:
    b = _builder("v1.20.2")
    with pytest.raises(TerminalError) as caught:
        kubeadm.kubelet_configuration(b, _cluster(), {"networking": {"serviceSubnet": subnet}})
    assert "spec.clusterConfiguration.networking.serviceSubnet" in str(caught.value)
    assert subnet in str(caught.value)


@pytest.mark.parametrize(
    ("taint", "field", "shown"),
    [
        ({"key": "bad key with spaces", "effect": "NoSchedule"}, "taints[0].key", "bad key"),
        ({"key": "dedicated", "effect": "NoWhere"}, "taints[0].effect", "NoWhere"),
        ({"key": "dedicated"}, "taints[0].effect", "None"),
        ({"key": "-lead/x", "effect": "NoSchedule"}, "taints[0].key", "-lead/x"),
        ({"key": "a/b/c", "effect": "NoSchedule"}, "taints[0].key", "a/b/c"),
        ({"key": "x" * 64, "effect": "NoSchedule"}, "taints[0].key", "xxx"),
        ({"key": "k", "value": "has space", "effect": "NoExecute"}, "taints[0].value", "has"),
        ("dedicated=gpu:NoSchedule", "taints[0]", "dedicated=gpu"),
    ],
)
@pytest.mark.parametrize("worker", [True, False])
def test_wrong_taints_are_refused(taint: Any, field: str, shown: str, worker: bool) -> None:
    path = "spec.joinConfiguration.nodeRegistration"
    with pytest.raises(TerminalError) as caught:
        kubeadm.node_registration(_builder("v1.30.6"), {"taints": [taint]}, path, SOCKET, worker)
    assert f"{path}.{field}" in str(caught.value) and shown in str(caught.value)


@pytest.mark.parametrize(
    "taint",
    [
        {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "gpu_a-1.x", "effect": "PreferNoSchedule"},
        {"key": "example.com/maint", "value": None, "effect": "NoExecute"},
    ],
)
def test_valid_taints_pass_through(taint: dict[str, Any]) -> None:
    path = "spec.initConfiguration.nodeRegistration"
    reg = kubeadm.node_registration(_builder("v1.30.6"), {"taints": [taint]}, path, SOCKET, False)
    assert reg["taints"] == [taint]


@pytest.mark.parametrize(
    ("token", "want"),
    [
        ({"token": "abcdef.0123456789abcdef", "ttlSeconds": 3600}, "3600s"),
        ({"token": "abcdef.0123456789abcdef", "ttlSeconds": 0}, "0s"),  # never expires
        ({"token": "abcdef.0123456789abcdef", "ttl": "2h"}, "2h"),
    ],
)
def test_bootstrap_token_ttl_seconds_becomes_ttl(token: dict[str, Any], want: str) -> None:
    init = kubeadm.init_configuration(_builder("v1.30.6"), {"bootstrapTokens": [token]}, SOCKET)
    (written,) = init["bootstrapTokens"]
    assert written["ttl"] == want and "ttlSeconds" not in written


@pytest.mark.parametrize("seconds", [-1, "3600", True, 1.5])
def test_bootstrap_token_ttl_seconds_must_be_seconds(seconds: Any) -> None:
    with pytest.raises(TerminalError) as caught:
        kubeadm.init_configuration(
            _builder("v1.30.6"),
            {"bootstrapTokens": [{"token": "abcdef.0123456789abcdef", "ttlSeconds": seconds}]},
            SOCKET,
        )
    assert "spec.initConfiguration.bootstrapTokens[0].ttlSeconds" in str(caught.value)
