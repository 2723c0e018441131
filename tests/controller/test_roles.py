"""Init, control-plane join and worker join, decided by the controller on a real API server."""

from __future__ import annotations

import base64
import json

from controller_harness import ControllerProcess, Testbed, wait_for

from bootstrap.controller import kube


def test_two_init_candidates_exactly_one_inits_the_other_joins_after(
    testbed: Testbed, ns: str, controller: ControllerProcess
) -> None:
    testbed.cluster(ns, "demo")
    testbed.node(ns, "cp-a", "demo", control_plane=True)
    testbed.node(ns, "cp-b", "demo", control_plane=True)

    def settled() -> bool:
        waiting = [testbed.condition(ns, n, "DataSecretAvailable") for n in ("cp-a", "cp-b")]
        ready = [testbed.status(ns, n).get("ready") for n in ("cp-a", "cp-b")]
        return sum(bool(r) for r in ready) == 1 and any(
            w and w.get("reason") == "WaitingForControlPlaneInitialized" for w in waiting
        )

    wait_for("one init, one waiting", settled, 60)
    winner = "cp-a" if testbed.status(ns, "cp-a").get("ready") else "cp-b"
    loser = "cp-b" if winner == "cp-a" else "cp-a"
    assert "kubeadm init" in testbed.userdata(ns, winner)
    assert testbed.admin.get(kube.Secret, loser, ns) is None
    lock = testbed.admin.get(kube.ConfigMap, "demo-lock", ns)
    assert lock is not None
    assert json.loads(lock["data"]["lock-information"]) == {"machineName": winner}
    # the CAs: generated once, owned by the init's config, and the ones in its userdata
    config_uid = testbed.get_config(ns, winner)["metadata"]["uid"]
    for suffix in ("ca", "etcd", "proxy", "sa"):
        secret = testbed.admin.get(kube.Secret, f"demo-{suffix}", ns)
        assert secret is not None
        assert [r["uid"] for r in secret["metadata"]["ownerReferences"]] == [config_uid]
    ca = base64.b64decode(testbed.admin.get(kube.Secret, "demo-ca", ns)["data"]["tls.crt"])
    assert ca.decode().strip().splitlines()[1] in testbed.userdata(ns, winner)

    testbed.set_cluster_status(ns, "demo", True, True)  # CAPI: the control plane answered
    wait_for("the second control plane's data", lambda: testbed.status(ns, loser).get("ready"))
    joined = testbed.userdata(ns, loser)
    assert "kubeadm join" in joined and "controlPlane:" in joined
    assert ca.decode().strip().splitlines()[1] in joined  # the same CA, not a new one
    wait_for(
        "the init lock released", lambda: not testbed.admin.get(kube.ConfigMap, "demo-lock", ns)
    )


def test_worker_waits_for_the_control_plane_then_joins_with_a_token_in_the_workload(
    testbed: Testbed, ns: str, controller: ControllerProcess
) -> None:
    testbed.cluster(ns, "wk")
    testbed.node(ns, "wk-cp", "wk", control_plane=True)
    testbed.node(ns, "wk-w0", "wk")
    wait_for("the init", lambda: testbed.status(ns, "wk-cp").get("ready"))
    waiting = wait_for(
        "the worker's waiting condition",
        lambda: testbed.condition(ns, "wk-w0", "DataSecretAvailable"),
    )
    assert (waiting["status"], waiting["reason"], waiting["severity"]) == (
        "False",
        "WaitingForControlPlaneInitialized",
        "Info",
    )
    assert "failureReason" not in testbed.status(ns, "wk-w0")

    testbed.set_cluster_status(ns, "wk", True, True)
    wait_for("the worker's data", lambda: testbed.status(ns, "wk-w0").get("ready"))
    secret = testbed.admin.get(kube.Secret, "wk-w0", ns)
    assert secret is not None
    assert secret["type"] == "cluster.x-k8s.io/secret"
    assert secret["metadata"]["labels"] == {"cluster.x-k8s.io/cluster-name": "wk"}
    owner = secret["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("KubeadmConfig", "wk-w0", True)
    assert base64.b64decode(secret["data"]["format"]) == b"cloud-config"
    token_id = secret["metadata"]["annotations"]["bootstrap.nodesmith.dev/token-id"]
    token = testbed.workload_admin.get(kube.Secret, f"bootstrap-token-{token_id}", "kube-system")
    assert token is not None and token["type"] == "bootstrap.kubernetes.io/token"
    token_secret = base64.b64decode(token["data"]["token-secret"]).decode()
    userdata = testbed.userdata(ns, "wk-w0")
    assert f"{token_id}.{token_secret}" in userdata and "kubeadm join" in userdata
    assert "controlPlane:" not in userdata
    st = testbed.status(ns, "wk-w0")
    assert (st["dataSecretName"], st["observedGeneration"]) == ("wk-w0", 1)
    assert {c["type"]: c["status"] for c in st["conditions"]} == {
        "CertificatesAvailable": "True",
        "DataSecretAvailable": "True",
        "Ready": "True",
    }
    # the token and the key never reach the log
    log = controller.log.read_text()
    assert token_secret not in log and "PRIVATE KEY" not in log
