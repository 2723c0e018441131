"""Conditions: a timestamp survives an unchanged status, and an unchanged status is no write."""

from __future__ import annotations

from typing import Any

from bootstrap.controller import status
from bootstrap.errors import TerminalError

OLD = "2026-01-01T00:00:00Z"


def test_an_unchanged_condition_keeps_its_transition_time() -> None:
    current = [
        {"type": "DataSecretAvailable", "status": "False", "reason": "X", "lastTransitionTime": OLD}
    ]
    merged = status.merge_conditions(current, [status.condition("DataSecretAvailable", False, "Y")])
    got = {c["type"]: c for c in merged}
    assert got["DataSecretAvailable"]["lastTransitionTime"] == OLD  # still False: no transition
    assert got["DataSecretAvailable"]["reason"] == "Y"
    flipped = status.merge_conditions(current, [status.condition("DataSecretAvailable", True)])
    assert {c["type"]: c for c in flipped}["DataSecretAvailable"]["lastTransitionTime"] != OLD


def test_ready_summarises_the_first_failing_condition() -> None:
    merged = status.merge_conditions(
        [],
        [
            status.condition("CertificatesAvailable", True),
            status.condition("DataSecretAvailable", False, "SecretNotFound", "m", terminal=False),
        ],
    )
    ready = {c["type"]: c for c in merged}["Ready"]
    assert (ready["status"], ready["reason"], ready["severity"]) == (
        "False",
        "SecretNotFound",
        "Info",
    )


def _stored(desired: dict[str, object]) -> dict[str, object]:
    """The v1beta2 status a first write of ``desired`` leaves (the patch over nothing)."""
    first = status.patch({}, desired)
    assert first is not None
    return first


def test_a_patch_is_v1beta2_and_none_when_only_timestamps_would_change() -> None:
    ok = status.condition("DataSecretAvailable", True)
    done = {"observedGeneration": 2, "ready": True, "dataSecretName": "w0",
            "conditions": status.merge_conditions([], [ok])}  # fmt: skip
    stored = _stored(done)
    assert stored["initialization"] == {"dataSecretCreated": True}
    assert stored["dataSecretName"] == "w0" and "ready" not in stored
    conds = {c["type"]: c for c in stored["conditions"]}  # type: ignore[attr-defined]
    assert {t: (c["status"], c["reason"], c["observedGeneration"]) for t, c in conds.items()} == {
        "DataSecretAvailable": ("True", "Available", 2),
        "Ready": ("True", "Ready", 2),
    }
    assert stored["deprecated"]["v1beta1"]["conditions"][0]["type"] == "DataSecretAvailable"  # type: ignore[index]
    later = {**done, "conditions": status.merge_conditions(status.view(stored)["conditions"], [ok])}
    assert status.patch(stored, later) is None  # the same outcome again: no write at all
    assert status.patch(stored, {"failureReason": None}) is None  # None: absent, and it is
    # a new generation: every v1beta2 condition says which generation it speaks of
    newer = _merged(stored, status.patch(stored, {"observedGeneration": 3}))
    assert newer["observedGeneration"] == 3
    assert {c["observedGeneration"] for c in newer["conditions"]} == {3}
    assert _untimed(newer) == _untimed({**stored, "observedGeneration": 3, "conditions": [
        {**c, "observedGeneration": 3} for c in stored["conditions"]]})  # fmt: skip
    failed = _merged(stored, status.patch(stored, {"failureReason": "X", "failureMessage": "m"}))
    assert failed["deprecated"]["v1beta1"] == {
        **stored["deprecated"]["v1beta1"], "failureReason": "X", "failureMessage": "m",
    }  # fmt: skip
    assert status.view(failed)["failureReason"] == "X"


def _merged(doc: Any, patch: Any) -> Any:
    """RFC 7386 merge patch, as the API server applies it."""
    if not isinstance(patch, dict):
        return patch
    out = dict(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merged(out.get(key), value)
    return out


def _untimed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k != "lastTransitionTime"}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def test_a_fixed_failure_is_removed_and_an_unchanged_condition_keeps_its_time() -> None:
    error = TerminalError("is wrong", obj="KubeadmConfig ns/w0", reason="InvalidField")
    failed = _stored(status.not_ready({}, 1, error))
    assert failed["deprecated"]["v1beta1"]["failureReason"] == "InvalidField"  # type: ignore[index]
    fixed = status.ready(status.view(failed), 2, "w0")
    change = status.patch(failed, fixed)
    assert change is not None
    assert change["deprecated"]["v1beta1"]["failureReason"] is None  # removed by the merge patch
    result = _merged(failed, change)
    assert "failureReason" not in result["deprecated"]["v1beta1"]
    assert result["initialization"] == {"dataSecretCreated": True}
    assert result["dataSecretName"] == "w0" and result["observedGeneration"] == 2
    same = status.not_ready(status.view(failed), 1, error)
    assert status.patch(failed, same) is None  # the same failure again: its time kept, no write


def test_a_terminal_condition_is_an_error_and_a_wait_is_info() -> None:
    assert status.condition("A", False, "R", terminal=True)["severity"] == "Error"
    assert status.condition("A", False, "R")["severity"] == "Info"
    assert "severity" not in status.condition("A", True)
