"""Present a RenderResult: the JSON envelope and the Cluster API bootstrap data Secret.

Follows the bootstrap provider contract: the Secret is named like the config (so it is
recreatable), lives in its namespace, has type ``cluster.x-k8s.io/secret``, the data keys
``value`` and ``format``, the ``cluster.x-k8s.io/cluster-name`` label, and a controller
ownerReference to the config when the config has a uid.
"""

from __future__ import annotations

import base64
from typing import Any

from bootstrap.render.result import RenderResult

CLUSTER_NAME_LABEL = "cluster.x-k8s.io/cluster-name"
SECRET_TYPE = "cluster.x-k8s.io/secret"


def json_envelope(result: RenderResult) -> dict[str, Any]:
    """``{format, value, sha256, size, warnings}``; value is text, or base64 when gzipped."""
    value = result.value
    text = base64.b64encode(value).decode() if result.gzipped else value.decode()
    envelope: dict[str, Any] = {
        "format": result.format,
        "value": text,
        "encoding": "gzip+base64" if result.gzipped else "plain",
        "sha256": result.sha256,
        "size": len(value),
        "warnings": list(result.warnings),
    }
    return envelope


def bootstrap_secret(result: RenderResult) -> dict[str, Any]:
    """The CAPI bootstrap data Secret for this render."""
    metadata: dict[str, Any] = {
        "name": result.config_name,
        "namespace": result.namespace,
        "labels": {CLUSTER_NAME_LABEL: result.cluster_name},
    }
    if result.config_uid:
        metadata["ownerReferences"] = [
            {
                "apiVersion": result.config_api_version,
                "kind": result.config_kind,
                "name": result.config_name,
                "uid": result.config_uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": SECRET_TYPE,
        "data": {
            "value": base64.b64encode(result.value).decode(),
            "format": base64.b64encode(result.format.encode()).decode(),
        },
    }
