"""Restarts: of the controller mid-reconcile, of the API server, of the leader; idempotency."""

from __future__ import annotations

import base64

from controller_harness import Testbed, wait_for

from bootstrap.controller import kube


def _writes(metrics: str) -> float:
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith("nodesmith_controller_api_writes_total{") and "leases" not in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def _uids(testbed: Testbed, ns: str) -> dict[str, str]:
    return {s["metadata"]["name"]: s["metadata"]["uid"] for s in testbed.secrets(ns)}


def test_controller_killed_between_writes_leaves_no_duplicate_ca_or_secret(
    testbed: Testbed, ns: str
) -> None:
    testbed.cluster(ns, "crash")
    testbed.node(ns, "crash-cp", "crash", control_plane=True)
    # Fault injection (NODESMITH_FAULT_EXIT_AFTER): the process dies right after its 2nd
    # Secret create, two of the four CA Secrets written, as a SIGKILL or an OOM would leave it.
    crash = testbed.controller(
        name=f"{ns}-1", env={"NODESMITH_FAULT_EXIT_AFTER": "create:secrets:2"}
    )
    assert crash.process.wait(timeout=60) == 70
    before = _uids(testbed, ns)
    assert sorted(before) == ["crash-ca", "crash-etcd", "crash-kubeconfig"]

    # the next one completes the CAs and writes the data Secret, then dies before its status
    crash = testbed.controller(
        name=f"{ns}-2", env={"NODESMITH_FAULT_EXIT_AFTER": "create:secrets:3"}
    )
    assert crash.process.wait(timeout=60) == 70
    middle = _uids(testbed, ns)
    assert {k: middle[k] for k in before} == before  # nothing recreated
    assert sorted(middle) == sorted([*before, "crash-proxy", "crash-sa", "crash-cp"])
    assert not testbed.status(ns, "crash-cp").get("ready")

    final = testbed.controller(name=f"{ns}-3")
    try:
        wait_for("the data after the crashes", lambda: testbed.status(ns, "crash-cp").get("ready"))
        assert _uids(testbed, ns) == middle  # the data Secret adopted, no CA regenerated
        ca = testbed.admin.get(kube.Secret, "crash-ca", ns)
        assert ca is not None
        pem = base64.b64decode(ca["data"]["tls.crt"]).decode().strip().splitlines()[1]
        assert pem in testbed.userdata(ns, "crash-cp")
    finally:
        assert final.stop() == 0


def test_steady_state_makes_no_writes_even_across_a_restart(testbed: Testbed, ns: str) -> None:
    testbed.cluster(ns, "calm", initialized=True)
    for i in range(5):
        testbed.node(ns, f"calm-w{i}", "calm")
    first = testbed.controller(name=f"{ns}-a")
    wait_for(
        "all ready", lambda: all(testbed.status(ns, f"calm-w{i}").get("ready") for i in range(5))
    )
    settled = _writes(first.metrics())
    # every Machine changes (an event each): each config is reconciled again, writing nothing
    seen = {i: len(first.reconciles(f"{ns}/calm-w{i}")) for i in range(5)}
    for i in range(5):
        testbed.admin.merge_patch(
            kube.Machine, f"calm-w{i}", ns, {"metadata": {"annotations": {"touched": "1"}}}
        )
    wait_for(
        "a reconcile of each touched config",
        lambda: all(len(first.reconciles(f"{ns}/calm-w{i}")) > seen[i] for i in range(5)),
    )
    assert all(line["writes"] == 0 for i in range(5)
               for line in first.reconciles(f"{ns}/calm-w{i}")[seen[i]:])  # fmt: skip
    assert _writes(first.metrics()) == settled
    assert first.stop() == 0
    uids = _uids(testbed, ns)
    second = testbed.controller(name=f"{ns}-b")
    try:
        wait_for(
            "the relist's reconcile of each config",
            lambda: all(second.last(f"{ns}/calm-w{i}") for i in range(5)),
        )
        assert _writes(second.metrics()) == 0
        assert _uids(testbed, ns) == uids
    finally:
        assert second.stop() == 0


def test_a_deleted_data_secret_is_written_again(testbed: Testbed, ns: str) -> None:
    testbed.cluster(ns, "again", initialized=True)
    testbed.node(ns, "again-w0", "again")
    controller = testbed.controller(name=f"{ns}-c")
    try:
        wait_for("the data", lambda: testbed.status(ns, "again-w0").get("ready"))
        first = testbed.admin.get(kube.Secret, "again-w0", ns)
        assert first is not None
        testbed.admin.delete(kube.Secret, "again-w0", ns)

        def rewritten() -> bool:
            found = testbed.admin.get(kube.Secret, "again-w0", ns)
            return found is not None and found["metadata"]["uid"] != first["metadata"]["uid"]

        wait_for("the data Secret again", rewritten, 30)
        assert testbed.status(ns, "again-w0")["dataSecretName"] == "again-w0"
    finally:
        assert controller.stop() == 0


def test_api_server_restart_the_watch_recovers(testbed: Testbed, ns: str) -> None:
    testbed.cluster(ns, "phoenix", initialized=True)
    # a lease longer than the restart: with the default 15 s a restart that long ends the
    # leadership and the process (exit 75), as controller-runtime's manager does
    controller = testbed.controller("--lease-duration=40s", name=f"{ns}-c")
    try:
        testbed.node(ns, "phoenix-w0", "phoenix")
        wait_for("the first worker", lambda: testbed.status(ns, "phoenix-w0").get("ready"))
        testbed.management.restart()
        assert controller.alive()
        testbed.node(ns, "phoenix-w1", "phoenix")
        wait_for(
            "a worker created after the restart",
            lambda: testbed.status(ns, "phoenix-w1").get("ready"),
            90,
        )
        assert "watch of" in controller.log.read_text()  # the break was seen and healed
    finally:
        assert controller.stop() == 0


def test_two_replicas_one_leads_and_the_other_takes_over(testbed: Testbed, ns: str) -> None:
    testbed.cluster(ns, "pair", initialized=True)
    a = testbed.controller(name=f"{ns}-a")
    wait_for("a leads", lambda: "nodesmith_controller_leader 1.0" in a.metrics())
    held = testbed.admin.get(kube.Lease, "nodesmith-controller", "nodesmith-system")
    assert held is not None and held["spec"]["holderIdentity"] == f"{ns}-a"
    b = testbed.controller(name=f"{ns}-b")
    try:
        wait_for("b up, standing by", lambda: "nodesmith_controller_leader 0.0" in b.metrics())
        testbed.node(ns, "pair-w0", "pair")
        wait_for("the leader's work", lambda: testbed.status(ns, "pair-w0").get("ready"))
        assert b.reconciles() == []  # the standby never reconciled
        assert a.stop() == 0  # graceful: gives the Lease up
        wait_for("b leads", lambda: "nodesmith_controller_leader 1.0" in b.metrics(), 20)
        testbed.node(ns, "pair-w1", "pair")
        wait_for("the new leader's work", lambda: testbed.status(ns, "pair-w1").get("ready"))
        lease = testbed.admin.get(kube.Lease, "nodesmith-controller", "nodesmith-system")
        assert lease is not None and lease["spec"]["holderIdentity"] == f"{ns}-b"
        assert lease["spec"]["leaseTransitions"] == held["spec"]["leaseTransitions"] + 1
    finally:
        assert b.stop() == 0
