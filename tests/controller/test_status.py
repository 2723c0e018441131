"""Conditions: a timestamp survives an unchanged status, and an unchanged status is no write."""

from __future__ import annotations

from bootstrap.controller import status

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


def test_changed_ignores_timestamps_and_sees_everything_else() -> None:
    cond = status.condition("DataSecretAvailable", True)
    current = {"ready": True, "conditions": [{**cond, "lastTransitionTime": OLD}]}
    rows = [
        (
            {"ready": True, "conditions": [{**cond, "lastTransitionTime": "2027-01-01T00:00:00Z"}]},
            False,
        ),
        ({"ready": True, "failureReason": None, "conditions": [cond]}, False),  # None: absent
        ({"ready": False, "conditions": [cond]}, True),
        ({"ready": True, "failureReason": "X", "conditions": [cond]}, True),
        (
            {"ready": True, "conditions": [status.condition("DataSecretAvailable", False, "R")]},
            True,
        ),
    ]
    assert [status.changed(current, desired) for desired, _ in rows] == [w for _, w in rows]


def test_a_terminal_condition_is_an_error_and_a_wait_is_info() -> None:
    assert status.condition("A", False, "R", terminal=True)["severity"] == "Error"
    assert status.condition("A", False, "R")["severity"] == "Info"
    assert "severity" not in status.condition("A", True)
