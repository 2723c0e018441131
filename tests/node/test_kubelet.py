"""The kubelet is installed at the Machine's version and enabled: skipped, with the reason,
when the image has none (images built with --kubernetes-source none)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="module")
def kubelet(host: Any, node_info: dict[str, Any]) -> str:
    res = host.run("kubelet --version")
    if res.rc == 127 or not host.exists("kubelet"):
        node_info.setdefault("nodeInfo", {})["kubeletVersion"] = None
        pytest.skip(
            "the image has no kubelet (built without Kubernetes binaries): "
            "kubelet checks cannot apply"
        )
    version = res.stdout.strip().removeprefix("Kubernetes ").strip()
    node_info.setdefault("nodeInfo", {})["kubeletVersion"] = version
    return version


def test_kubelet_version(kubelet: str, pytestconfig: pytest.Config) -> None:
    want = pytestconfig.getoption("kubelet_version")
    if not want:
        pytest.skip("no --kubelet-version given: the Machine's version is unknown")
    assert kubelet == "v" + want.lstrip("v"), f"kubelet {kubelet}, Machine wants {want}"


def test_kubelet_enabled(host: Any, kubelet: str) -> None:
    assert host.service("kubelet").is_enabled, "kubelet.service is not enabled"
