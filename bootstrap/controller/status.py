"""The KubeadmConfig status the controller writes, and whether a write is needed at all.

The outcome is computed in v1beta1's words (``ready``, ``failureReason``, Cluster API
conditions with a severity), which say everything both contracts need, and stored in
v1beta2's (the CRD's storage version): :func:`view` reads a stored status as v1beta1 through
the conversion the webhook serves, :func:`patch` writes one back. The v1beta2 ``conditions``
(``metav1.Condition``, with ``observedGeneration``) are derived from the v1beta1 ones, which
stay under ``deprecated.v1beta1`` as CABPK keeps them. A condition keeps its
lastTransitionTime while its status stays the same, and statuses are compared without
timestamps, so an unchanged outcome is never written twice: a steady state costs no writes.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from bootstrap.controller import conversion
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


def _reason(cond: Obj) -> str:
    """A metav1 condition's reason is required; v1beta1 leaves a True one's empty."""
    if cond.get("reason"):
        return str(cond["reason"])
    if cond.get("status") == "True":
        return "Ready" if cond.get("type") == READY else "Available"
    return "NotAvailable"


def v1beta2_conditions(conditions: list[Obj], generation: int | None) -> list[Obj]:
    """The ``metav1.Condition`` form of Cluster API v1beta1 conditions (no severity; a reason
    always; the generation they were computed for)."""
    out = []
    for cond in conditions:
        new: Obj = {
            "type": cond["type"],
            "status": cond["status"],
            "reason": _reason(cond),
            "lastTransitionTime": cond.get("lastTransitionTime") or now_text(),
        }
        if cond.get("message"):  # an empty one is left out (a client may send "" as null)
            new["message"] = cond["message"]
        if generation is not None:
            new["observedGeneration"] = generation
        out.append(new)
    return out


def _as(status: Obj, version: str) -> Obj:
    """``status`` of a KubeadmConfig converted to ``version`` (the webhook's own code)."""
    source = conversion.V1BETA2 if version == conversion.V1BETA1 else conversion.V1BETA1
    doc = {"apiVersion": source, "kind": "KubeadmConfig", "metadata": {}, "status": status}
    return dict(conversion.convert(doc, version).get("status") or {})


def view(stored: Obj) -> Obj:
    """A stored (v1beta2) status in v1beta1's words, which the reconcile computes in; one
    nobody could convert (written by hand) counts as empty, and is written over."""
    try:
        return _as(stored, conversion.V1BETA1)
    except NodesmithError:
        return {}


def _untimed(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k != "lastTransitionTime"}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def _merge_diff(old: Obj, new: Obj) -> Obj:
    """The JSON merge patch taking ``old`` to ``new`` (removed keys as null)."""
    out: Obj = {}
    for key in old.keys() - new.keys():
        out[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            sub = _merge_diff(before, value)
            if sub:
                out[key] = sub
        elif value != before:
            out[key] = value
    return out


def patch(stored: Obj, desired: Obj) -> Obj | None:
    """The merge patch that records ``desired`` (v1beta1 words, None: remove) over the stored
    v1beta2 status, or None when nothing but timestamps would change."""
    full = {k: v for k, v in {**view(stored), **desired}.items() if v is not None}
    generation = full.get("observedGeneration")
    conditions = v1beta2_conditions(full.get("conditions") or [], generation)
    old = {c.get("type"): c for c in (stored.get("conditions") or []) if isinstance(c, dict)}
    for cond in conditions:  # a v1beta2 condition keeps its time while its status holds
        before = old.get(cond["type"])
        if before is not None and before.get("status") == cond["status"]:
            cond["lastTransitionTime"] = before.get(
                "lastTransitionTime", cond["lastTransitionTime"]
            )
    full.pop("v1beta2", None)
    if conditions:
        full["v1beta2"] = {"conditions": conditions}
    new = _as(full, conversion.V1BETA2)
    if _untimed(new) == _untimed(stored):
        return None
    return _merge_diff(stored, new)


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
