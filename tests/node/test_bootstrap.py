"""The on-node bootstrap reported its outcome, and the sentinel says the same."""

from __future__ import annotations

import json
from typing import Any

import pytest

STATUS = "/run/cluster-api/bootstrap-status.json"
SENTINEL = "/run/cluster-api/bootstrap-success.complete"


@pytest.fixture(scope="module")
def status(host: Any) -> dict[str, Any]:
    f = host.file(STATUS)
    assert f.exists, f"{STATUS} is missing: the bootstrap script never ran"
    doc: dict[str, Any] = json.loads(f.content_string)
    return doc


def test_bootstrap_status(
    status: dict[str, Any], pytestconfig: pytest.Config, record_property: Any
) -> None:
    expected, _, reason = pytestconfig.getoption("expect_bootstrap").partition(":")
    summary = (
        f"phase={status.get('phase')} reason={status.get('reason')} "
        f"attempts={status.get('attempts')} message={status.get('message', '')[-200:]!r}"
    )
    record_property("detail", summary)
    assert status.get("phase") == expected, summary
    if reason:
        assert status.get("reason") == reason, summary
    if status.get("reason") == "KubeadmNotFound":  # nothing to try: kubeadm is not there
        assert status.get("terminal") is True and status.get("attempts") == 0, summary
        assert "kubeadm" in status.get("message", ""), summary
    else:
        assert status.get("attempts", 0) >= 1, summary
    assert status.get("startedAt") and status.get("finishedAt"), summary
    if expected == "Succeeded":
        assert status.get("reason") == "Bootstrapped" and status.get("terminal") is False, summary


def test_sentinel_iff_succeeded(host: Any, status: dict[str, Any]) -> None:
    present = host.file(SENTINEL).exists
    succeeded = status.get("phase") == "Succeeded"
    assert present == succeeded, (
        f"sentinel {'present' if present else 'absent'} but phase is {status.get('phase')}"
    )
