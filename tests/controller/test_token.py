"""The workload cluster's bootstrap token: refreshed until the Machine has a Node (CABPK)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

from controller_harness import Testbed, wait_for

from bootstrap.controller import kube


def _expiration(testbed: Testbed, token_id: str) -> datetime:
    token = testbed.workload_admin.get(kube.Secret, f"bootstrap-token-{token_id}", "kube-system")
    assert token is not None
    text = base64.b64decode(token["data"]["expiration"]).decode()
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def test_token_refreshed_until_the_node_joins_then_left_to_expire(
    testbed: Testbed, ns: str
) -> None:
    testbed.cluster(ns, "tok", initialized=True)
    testbed.node(ns, "tok-w0", "tok")
    controller = testbed.controller("--bootstrap-token-ttl=9s", name=f"{ns}-c")
    try:
        wait_for("the worker's data", lambda: testbed.status(ns, "tok-w0").get("ready"))
        secret = testbed.admin.get(kube.Secret, "tok-w0", ns)
        assert secret is not None
        token_id = secret["metadata"]["annotations"]["bootstrap.nodesmith.dev/token-id"]
        first = _expiration(testbed, token_id)
        # refreshed every TTL/3 once less than 5/6 of the TTL remains: the expiration moves on
        wait_for("a refresh", lambda: _expiration(testbed, token_id) > first, 20)
        assert any(r["reason"] == "BootstrapTokenRefreshed" for r in controller.reconciles())

        testbed.admin.merge_patch(
            kube.Machine,
            "tok-w0",
            ns,
            {"status": {"nodeRef": {"kind": "Node", "name": "tok-w0"}}},
            status=True,
        )
        joined = wait_for(
            "the joined node's reconcile",
            lambda: [
                r for r in controller.reconciles(f"{ns}/tok-w0") if r["reason"] == "NodeJoined"
            ],
        )
        # no longer refreshed: the controller scheduled no further look at the token
        assert joined[-1]["requeue"] is None and joined[-1]["writes"] == 0
        assert controller.last(f"{ns}/tok-w0") == joined[-1]
    finally:
        assert controller.stop() == 0
