"""Terminal versus transient, and bad input: status names the field, nothing is half-written."""

from __future__ import annotations

import base64
import time
from typing import Any

from controller_harness import ControllerProcess, Testbed, wait_for

from bootstrap.controller import conversion, kube
from bootstrap.controller.reconcile import Caches, Reconciler, Settings


def _file_from(secret: str) -> dict[str, object]:
    return {
        "files": [
            {
                "path": "/etc/demo/secret.conf",
                "permissions": "0600",
                "contentFrom": {"secret": {"name": secret, "key": "conf"}},
            }
        ]
    }


def test_a_terminal_error_is_reported_once_and_retried_only_when_the_spec_changes(
    testbed: Testbed, ns: str, controller: ControllerProcess
) -> None:
    testbed.cluster(ns, "bad", initialized=True)
    spec = {"files": [{"path": "etc/relative.conf", "content": "x"}]}
    testbed.node(ns, "bad-w0", "bad", spec=spec)
    st = wait_for(
        "the failure",
        lambda: testbed.status(ns, "bad-w0").get("failureReason") and testbed.status(ns, "bad-w0"),
    )
    assert st["failureReason"] == "InvalidField"
    assert "spec.files[0].path" in st["failureMessage"]
    assert "'etc/relative.conf'" in st["failureMessage"]
    cond = testbed.condition(ns, "bad-w0", "DataSecretAvailable")
    assert cond is not None
    assert (cond["status"], cond["severity"], cond["reason"]) == ("False", "Error", "InvalidField")
    assert testbed.admin.get(kube.Secret, "bad-w0", ns) is None  # nothing half-written
    # not retried: the failure's reconcile scheduled nothing (the controller's own account of
    # its queue), so no hot loop and no further writes while the spec stays the same
    failed = wait_for("the failure's reconcile", lambda: controller.last(f"{ns}/bad-w0", "failed"))
    assert failed["requeue"] is None
    assert all(line["writes"] <= 1 for line in controller.reconciles(f"{ns}/bad-w0"))

    testbed.admin.merge_patch(
        kube.KubeadmConfigV1Beta1,
        "bad-w0",
        ns,
        {"spec": {"files": [{"path": "/etc/ok.conf", "content": "x"}]}},
    )
    st = wait_for(
        "the fixed config's data",
        lambda: testbed.status(ns, "bad-w0").get("ready") and testbed.status(ns, "bad-w0"),
    )
    assert "failureReason" not in st and "failureMessage" not in st
    assert st["observedGeneration"] == 2


def test_a_transient_wait_succeeds_once_its_secret_appears(
    testbed: Testbed, ns: str, controller: ControllerProcess
) -> None:
    testbed.cluster(ns, "late", initialized=True)
    testbed.node(ns, "late-w0", "late", spec=_file_from("late-conf"))
    cond = wait_for(
        "the waiting condition", lambda: testbed.condition(ns, "late-w0", "DataSecretAvailable")
    )
    assert (cond["status"], cond["severity"], cond["reason"]) == ("False", "Info", "SecretNotFound")
    assert "late-conf" in cond["message"] and "spec.files[0].contentFrom" in cond["message"]
    assert "failureReason" not in testbed.status(ns, "late-w0")
    assert testbed.admin.get(kube.Secret, "late-w0", ns) is None

    testbed.admin.create(
        kube.Secret,
        {
            "metadata": {"name": "late-conf", "namespace": ns},
            "data": {"conf": base64.b64encode(b"password=hunter2\n").decode()},
        },
    )
    started = time.monotonic()
    wait_for("the data after the Secret", lambda: testbed.status(ns, "late-w0").get("ready"), 30)
    assert time.monotonic() - started < 10  # the Secret's event, not a long backoff
    assert "hunter2" not in controller.log.read_text()


def _reasons(testbed: Testbed, ns: str, name: str) -> tuple[object, ...]:
    st = testbed.status(ns, name)
    cond = testbed.condition(ns, name, "DataSecretAvailable") or {}
    return st.get("failureReason"), cond.get("reason")


def test_bad_input_table(testbed: Testbed, ns: str, controller: ControllerProcess) -> None:
    """Each row: an input CABPK would reject or ignore, and what the status then says."""
    other = testbed.namespace(f"{ns}-other")
    testbed.cluster(other, "elsewhere")
    testbed.cluster(ns, "paused", paused=True, initialized=True)
    testbed.cluster(ns, "home", initialized=True)
    testbed.node(ns, "in-other-ns", "elsewhere")  # its Cluster is in another namespace
    testbed.node(ns, "on-paused", "paused")
    testbed.config(ns, "orphan", None)  # owned by nothing
    testbed.node(ns, "no-cluster", "not-yet")  # the Cluster may still come
    testbed.node(ns, "worker-wants-cp", "home", spec={"joinConfiguration": {"controlPlane": {}}})
    testbed.node(ns, "bad-version", "home", version="one.twenty")

    rows = {
        "in-other-ns": ("ClusterInOtherNamespace", "ClusterInOtherNamespace"),
        "no-cluster": (None, "WaitingForCluster"),
        "worker-wants-cp": ("WorkerAsksForControlPlane", "WorkerAsksForControlPlane"),
    }
    for name, want in rows.items():
        wait_for(f"{name}'s status", lambda n=name, w=want: _reasons(testbed, ns, n) == w, 30)
    assert "spec.clusterName" in testbed.status(ns, "in-other-ns")["failureMessage"]
    assert (
        "spec.joinConfiguration.controlPlane"
        in testbed.status(ns, "worker-wants-cp")["failureMessage"]
    )
    bad = wait_for(
        "bad-version's failure", lambda: testbed.status(ns, "bad-version").get("failureMessage"), 30
    )
    assert "spec.version" in bad and "'one.twenty'" in bad
    # ignored as CABPK ignores them: reconciled, and left without status or Secret
    for name in ("on-paused", "orphan"):
        wait_for(f"{name}'s reconcile", lambda n=name: controller.last(f"{ns}/{n}", "ignored"))
        assert testbed.status(ns, name) == {}, name
    names = {s["metadata"]["name"] for s in testbed.secrets(ns)}
    assert not names & (set(rows) | {"on-paused", "orphan", "bad-version"})
    assert controller.alive()
    # no hot loop: a handful of reconciles each, not hundreds
    counts = {}
    for line in controller.reconciles():
        if line["config"].startswith(f"{ns}/"):
            counts[line["config"]] = counts.get(line["config"], 0) + 1
    assert max(counts.values()) < 20, counts


class FrozenCache:
    """Test double for an informer whose watch lags (the injected fault): it keeps serving the
    copies it was filled with, whatever was written since."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects}

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((namespace, name))

    def items(self) -> list[dict[str, Any]]:
        return list(self.objects.values())


def test_a_status_computed_from_a_stale_copy_never_drops_what_was_recorded_since(
    testbed: Testbed, ns: str
) -> None:
    """The conditions list is written whole: a reconcile working from a lagging cache gets a
    409 and retries; the retry, on a fresh copy, keeps the node's report."""
    cluster = testbed.cluster(ns, "stale", initialized=True)
    spec = {"files": [{"path": "etc/relative.conf", "content": "x"}]}
    machine, stale = testbed.node(ns, "stale-w0", "stale", spec=spec)
    reported = {
        "type": "BootstrapSucceeded",
        "status": "False",
        "severity": "Info",
        "reason": "Joining",
        "lastTransitionTime": "2026-12-06T00:00:00Z",
    }
    testbed.admin.merge_patch(
        kube.KubeadmConfigV1Beta1,
        "stale-w0",
        ns,
        {"status": {"conditions": [reported]}},
        status=True,
    )

    def reconciler(config: dict[str, Any]) -> Reconciler:
        caches = Caches(
            configs=FrozenCache(config),  # type: ignore[arg-type]
            machines=FrozenCache(machine),  # type: ignore[arg-type]
            clusters=FrozenCache(testbed.admin.get(kube.Cluster, "stale", ns) or cluster),  # type: ignore[arg-type]
            secrets=FrozenCache(*testbed.secrets(ns)),  # type: ignore[arg-type]
        )
        return Reconciler(testbed.admin, caches, Settings())

    # the controller's caches hold the stored version (v1beta2), as its informer lists it
    outcome = reconciler(conversion.convert(stale, conversion.V1BETA2)).reconcile((ns, "stale-w0"))
    assert (outcome.result, outcome.reason, outcome.backoff) == ("retry", "APIError409", True)
    st = testbed.status(ns, "stale-w0")
    assert "failureReason" not in st and st["conditions"] == [reported]

    fresh = testbed.admin.get(kube.KubeadmConfig, "stale-w0", ns)
    assert fresh is not None
    outcome = reconciler(fresh).reconcile((ns, "stale-w0"))
    assert (outcome.result, outcome.reason) == ("failed", "InvalidField")
    st = testbed.status(ns, "stale-w0")
    assert st["failureReason"] == "InvalidField"
    assert {c["type"]: c["reason"] for c in st["conditions"]} == {
        "BootstrapSucceeded": "Joining",
        "DataSecretAvailable": "InvalidField",
        "Ready": "InvalidField",
    }
    assert testbed.admin.get(kube.Secret, "stale-w0", ns) is None
