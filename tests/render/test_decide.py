"""``decide``: which CAs a Machine gets, and who holds a run's init lock, as a table.

The roles themselves are tabled in ``test_pipeline.py`` (through ``render_one``, as every
driver calls it); here the decision alone, with the lock handed in."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from render_helpers import BASE, CA_SECRETS, FIXED_NOW, INITIALIZED, find

from bootstrap.errors import TransientError
from bootstrap.render.batch import RunLock
from bootstrap.render.decide import INIT, JOIN_CP, Decision, decide
from bootstrap.render.loader import load_paths
from bootstrap.render.resolve import Bundle, resolve

KCP = {"apiVersion": "controlplane.cluster.x-k8s.io/v1beta1", "kind": "KubeadmControlPlane",
       "name": "alpha-cp"}  # fmt: skip
EXTERNAL_ETCD = {
    "external": {
        "endpoints": ["https://etcd.example:2379"],
        "caFile": "/etc/etcd/ca.crt",
        "certFile": "/etc/etcd/client.crt",
        "keyFile": "/etc/etcd/client.key",
    }
}


def _decide(*, ca: bool, initialized: bool, kcp: bool = False, etcd: bool = False) -> Decision:
    docs = load_paths([str(BASE), *([str(CA_SECRETS)] if ca else [])])
    cluster = find(docs, "Cluster", "alpha")
    if initialized:
        cluster["status"] = copy.deepcopy(INITIALIZED)
    if kcp:
        cluster["spec"]["controlPlaneRef"] = KCP
    if etcd:
        spec: dict[str, Any] = find(docs, "KubeadmConfig", "cp-0")["spec"]
        spec.setdefault("clusterConfiguration", {})["etcd"] = EXTERNAL_ETCD
    return decide(resolve(Bundle(docs), "prod/cp-0"), RunLock(), FIXED_NOW)


ALL = {"ca", "etcd", "proxy", "sa"}  # pki.KINDS: <cluster>-ca, -etcd, -proxy, -sa

# (CAs in the input, initialized, a control-plane provider, external etcd) ->
# (role, CA kinds rendered, Secrets generated) or the reason it waits
ROWS: dict[str, tuple[dict[str, bool], tuple[str, set[str], int] | str]] = {
    "standalone init generates the missing CAs": (
        {"ca": False, "initialized": False}, (INIT, ALL, 4)),
    "standalone init uses the CAs it finds": (
        {"ca": True, "initialized": False}, (INIT, ALL, 0)),
    "an external etcd's CA is never ours": (
        {"ca": False, "initialized": False, "etcd": True}, (INIT, ALL - {"etcd"}, 3)),
    "under a control-plane provider the init waits for its CAs": (
        {"ca": False, "initialized": False, "kcp": True}, "CANotFound"),
    "under a control-plane provider the init uses its CAs": (
        {"ca": True, "initialized": False, "kcp": True}, (INIT, ALL, 0)),
    "a control-plane join never generates": (
        {"ca": False, "initialized": True}, "CANotFound"),
    "a control-plane join uses the CAs": (
        {"ca": True, "initialized": True}, (JOIN_CP, ALL, 0)),
}  # fmt: skip


@pytest.mark.parametrize("name", list(ROWS))
def test_certificates(name: str) -> None:
    given, want = ROWS[name]
    if isinstance(want, str):
        with pytest.raises(TransientError) as caught:
            _decide(**given)
        assert caught.value.reason == want
        if given.get("kcp"):
            assert "KubeadmControlPlane/alpha-cp" in str(caught.value)
        return
    decision = _decide(**given)
    role, kinds, generated = want
    assert decision.role == role
    assert set(decision.cas) == set(decision.kinds) == kinds
    assert len(decision.generated) == generated


def test_the_run_lock_lets_one_control_plane_init_and_the_rest_join_it() -> None:
    docs = load_paths([str(BASE), str(CA_SECRETS)])
    bundle, lock = Bundle(docs), RunLock()
    first = resolve(bundle, "prod/cp-0")
    assert decide(first, lock, FIXED_NOW).role == INIT
    with pytest.raises(TransientError) as caught:  # the init has not rendered yet
        decide(resolve(bundle, "prod/cp-1"), lock, FIXED_NOW)
    assert caught.value.reason == "WaitingForControlPlaneInitialized"
    assert "prod/cp-0 holds the init lock" in str(caught.value)
    lock.init_rendered(first.cluster)
    assert decide(resolve(bundle, "prod/cp-1"), lock, FIXED_NOW).role == JOIN_CP
