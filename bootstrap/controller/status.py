"""The KubeadmConfig status the controller writes, and whether a write is needed at all.

v1beta1 shapes (Cluster API conditions: type, status, severity, reason, message,
lastTransitionTime). A condition keeps its lastTransitionTime while its status stays the same,
and :func:`changed` compares statuses without timestamps, so an unchanged outcome is never
written twice: a steady state costs no writes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from bootstrap.errors import NodesmithError, TransientError
from bootstrap.render.tokens import rfc3339

DATA_SECRET_AVAILABLE = "DataSecretAvailable"
CERTIFICATES_AVAILABLE = "CertificatesAvailable"
BOOTSTRAP_SUCCEEDED = "BootstrapSucceeded"
READY = "Ready"
# Reasons that say the CAs are what is missing or wrong (CertificatesAvailable, not DataSecret...)
CERTIFICATE_REASONS = ("InvalidSecret", "CANotFound", "WaitingForCertificates")

Obj = dict[str, Any]


def now_text() -> str:
    return rfc3339(datetime.now(UTC))


def condition(
    type_: str, ok: bool, reason: str = "", message: str = "", terminal: bool = False
) -> Obj:
    """A Cluster API condition; a False one is an Error when terminal, else Info (waiting)."""
    out: Obj = {"type": type_, "status": "True" if ok else "False"}
    if not ok:
        out["severity"] = "Error" if terminal else "Info"
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message[:1024]
    return out


def merge_conditions(current: list[Obj], updates: list[Obj]) -> list[Obj]:
    """``current`` with ``updates`` applied by type, Ready summarised, sorted by type."""
    by_type = {c.get("type"): dict(c) for c in current if isinstance(c, dict)}
    stamp = now_text()
    for update in updates:
        old = by_type.get(update["type"])
        new = dict(update)
        same = old is not None and old.get("status") == new["status"]
        new["lastTransitionTime"] = (
            old.get("lastTransitionTime", stamp) if old is not None and same else stamp
        )
        by_type[update["type"]] = new
    summary = [by_type[t] for t in (DATA_SECRET_AVAILABLE, CERTIFICATES_AVAILABLE) if t in by_type]
    failing = [c for c in summary if c["status"] != "True"]
    if summary:
        ready = (
            condition(READY, True)
            if not failing
            else {k: v for k, v in failing[0].items() if k != "lastTransitionTime"}
            | {"type": READY}
        )
        old = by_type.get(READY)
        same = old is not None and old.get("status") == ready["status"]
        ready["lastTransitionTime"] = (
            old.get("lastTransitionTime", stamp) if old is not None and same else stamp
        )
        by_type[READY] = ready
    return [by_type[t] for t in sorted(by_type, key=str)]


def _comparable(status: Obj) -> Obj:
    out = {k: v for k, v in status.items() if v is not None and k != "conditions"}
    out["conditions"] = sorted(
        (
            tuple(sorted((k, str(v)) for k, v in c.items() if k != "lastTransitionTime"))
            for c in status.get("conditions") or []
        ),
    )
    return out


def changed(current: Obj, desired: Obj) -> bool:
    """True when writing ``desired`` over ``current`` would change anything but timestamps."""
    merged = {**current, **desired}
    merged = {k: v for k, v in merged.items() if v is not None}
    return _comparable(current) != _comparable(merged)


def condition_of(status: Obj, type_: str) -> Obj | None:
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == type_:
            return c
    return None


def ready(current: Obj, generation: int | None, data_secret: str) -> Obj:
    """The status of a config whose data Secret ``data_secret`` is written."""
    desired: Obj = {
        "observedGeneration": generation,
        "ready": True,
        "dataSecretName": data_secret,
        "failureReason": None,
        "failureMessage": None,
    }
    updates = [condition(DATA_SECRET_AVAILABLE, True), condition(CERTIFICATES_AVAILABLE, True)]
    desired["conditions"] = merge_conditions(current.get("conditions") or [], updates)
    return desired


def not_ready(current: Obj, generation: int | None, error: NodesmithError) -> Obj:
    """The status of a config that failed (terminal: ``failureReason``/``failureMessage`` and
    a False condition of severity Error) or waits (transient: a False condition, Info)."""
    terminal = not isinstance(error, TransientError)
    message = str(error)
    desired: Obj = {
        "observedGeneration": generation,
        "failureReason": error.reason if terminal else None,
        "failureMessage": message if terminal else None,
    }
    kind = CERTIFICATES_AVAILABLE if error.reason in CERTIFICATE_REASONS else DATA_SECRET_AVAILABLE
    update = condition(kind, False, error.reason, message, terminal)
    desired["conditions"] = merge_conditions(current.get("conditions") or [], [update])
    return desired
