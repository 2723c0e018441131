"""Storage migration on a real API server: objects an older release stored as v1beta1 are
rewritten by the leader, and the CRD's storedVersions says v1beta2 alone."""

from __future__ import annotations

import copy
from typing import Any

from controller_harness import Testbed, wait_for

from bootstrap.controller import kube

CRD = f"kubeadmconfigs.{kube.GROUP}"


def _storage(testbed: Testbed, version: str) -> None:
    crd = testbed.admin.get(kube.CRD, CRD)
    assert crd is not None
    crd = copy.deepcopy(crd)
    for v in crd["spec"]["versions"]:
        v["storage"] = v["name"] == version
    testbed.admin.replace(kube.CRD, crd)


def _stored_versions(testbed: Testbed) -> list[str]:
    crd: dict[str, Any] = testbed.admin.get(kube.CRD, CRD) or {}
    return list(crd["status"]["storedVersions"])


def test_the_leader_rewrites_v1beta1_stored_objects_and_clears_stored_versions(
    testbed: Testbed, ns: str
) -> None:
    _storage(testbed, "v1beta1")  # as an install of the previous release stored them
    try:
        testbed.admin.create(
            kube.KubeadmConfigV1Beta1,
            {"apiVersion": f"{kube.GROUP}/v1beta1", "kind": "KubeadmConfig",
             "metadata": {"name": "old", "namespace": ns}, "spec": {"verbosity": 2}},
        )  # fmt: skip
    finally:
        _storage(testbed, "v1beta2")
    assert sorted(_stored_versions(testbed)) == ["v1beta1", "v1beta2"]
    controller = testbed.controller(name="migrator")
    try:
        wait_for("storedVersions == [v1beta2]", lambda: _stored_versions(testbed) == ["v1beta2"])
        (line,) = [x for x in controller.lines() if x.get("event") == "storage-migrated"]
        assert line["crd"] == CRD and line["objects"] >= 1
        assert sorted(line["was"]) == ["v1beta1", "v1beta2"]
        stored = testbed.admin.get(kube.KubeadmConfig, "old", ns)
        assert stored is not None and stored["spec"] == {"verbosity": 2}
    finally:
        assert controller.stop() == 0
