"""The OpenAPI 3.1 document of ``nodesmith serve``, kept as data beside the code.

Written by hand rather than generated so that it states exactly what the service answers,
every error status included; schemathesis checks the live service against it.
"""

from __future__ import annotations

from typing import Any

from bootstrap import __version__

NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

_ERROR = {
    "type": "object",
    "required": ["reason", "message"],
    "properties": {
        "reason": {"type": "string"},
        "message": {"type": "string"},
        "object": {"type": ["string", "null"]},
        "field": {"type": ["string", "null"]},
        "terminal": {"type": ["boolean", "null"]},
    },
}

_K8S_OBJECT = {"type": "object", "additionalProperties": True}

_ENVELOPE = {
    "type": "object",
    "required": ["format", "value", "encoding", "sha256", "size", "warnings"],
    "properties": {
        "format": {"type": "string", "examples": ["cloud-config"]},
        "value": {"type": "string", "description": "userdata; base64 when encoding is gzip"},
        "encoding": {"type": "string", "enum": ["plain", "gzip+base64"]},
        "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        "size": {"type": "integer", "minimum": 0},
        "warnings": {"type": "array", "items": {"type": "string"}},
        "bootstrapTokenSecret": _K8S_OBJECT,
        "clusterCASecrets": {"type": "array", "items": _K8S_OBJECT},
    },
}

_SECRET = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "type", "data"],
    "properties": {
        "apiVersion": {"const": "v1"},
        "kind": {"const": "Secret"},
        "metadata": _K8S_OBJECT,
        "type": {"const": "cluster.x-k8s.io/secret"},
        "data": {
            "type": "object",
            "required": ["value", "format"],
            "properties": {"value": {"type": "string"}, "format": {"type": "string"}},
        },
        "bootstrapTokenSecret": _K8S_OBJECT,
        "clusterCASecrets": {"type": "array", "items": _K8S_OBJECT},
    },
}


def _error(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
    if headers:
        response["headers"] = headers
    return response


def openapi_document(max_body: int) -> dict[str, Any]:
    """The document served at ``/openapi.json``."""
    bundle_json = {
        "oneOf": [
            {"type": "array", "items": _K8S_OBJECT},
            {
                "type": "object",
                "required": ["items"],
                "properties": {"items": {"type": "array", "items": _K8S_OBJECT}},
            },
        ]
    }
    userdata = {
        "operationId": "renderUserdata",
        "summary": "Render one Machine's bootstrap data from a bundle of Cluster API objects",
        "security": [{"bearer": []}],
        "parameters": [
            {
                "name": "namespace",
                "in": "path",
                "required": True,
                "schema": {"type": "string", "maxLength": 63, "pattern": NAMESPACE_PATTERN},
            },
            {
                "name": "name",
                "in": "path",
                "required": True,
                "schema": {"type": "string", "maxLength": 253, "pattern": NAME_PATTERN},
            },
            {
                "name": "output",
                "in": "query",
                "required": False,
                "schema": {"type": "string", "enum": ["json", "secret"], "default": "json"},
            },
            {
                "name": "gzip",
                "in": "query",
                "required": False,
                "schema": {"type": "boolean", "default": False},
            },
        ],
        "requestBody": {
            "required": True,
            "description": f"The Cluster, Machine, KubeadmConfig and Secrets; at most "
            f"{max_body} bytes.",
            "content": {
                "application/yaml": {"schema": {"type": "string"}},
                "application/json": {"schema": bundle_json},
            },
        },
        "responses": {
            "200": {
                "description": "Rendered: the JSON envelope, or with output=secret the CAPI "
                "bootstrap data Secret. bootstrapTokenSecret is present when a bootstrap token "
                "was generated; apply it to the workload cluster. clusterCASecrets is present "
                "when an init generated the cluster CAs; apply them to the management cluster.",
                "content": {
                    "application/json": {
                        "schema": {
                            "anyOf": [
                                {"$ref": "#/components/schemas/Envelope"},
                                {"$ref": "#/components/schemas/BootstrapSecret"},
                            ]
                        }
                    }
                },
            },
            "400": _error("The body cannot be parsed, or a path segment or query is invalid."),
            "401": _error(
                "Missing or wrong bearer token.",
                {"WWW-Authenticate": {"schema": {"type": "string"}}},
            ),
            "404": _error("The named Machine is not in the bundle."),
            "413": _error(f"The body is over {max_body} bytes."),
            "415": _error("Content-Type is neither YAML nor JSON."),
            "422": _error("Terminal: the input is wrong; retrying the same input cannot help."),
            "503": _error(
                "Transient: something is not ready yet (for example no controlPlaneEndpoint).",
                {"Retry-After": {"required": True, "schema": {"type": "string"}}},
            ),
        },
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "nodesmith userdata service",
            "version": __version__,
            "description": "Bootstrap data for Cluster API Machines, rendered on request.",
        },
        "paths": {
            "/v1/machines/{namespace}/{name}/userdata": {"post": userdata},
            "/healthz": {
                "get": {
                    "operationId": "healthz",
                    "responses": {
                        "200": {
                            "description": "The worker answers.",
                            "content": {
                                "application/json": {
                                    "schema": {
                                        "type": "object",
                                        "required": ["status"],
                                        "properties": {"status": {"const": "ok"}},
                                    }
                                }
                            },
                        }
                    },
                }
            },
            "/metrics": {
                "get": {
                    "operationId": "metrics",
                    "responses": {
                        "200": {
                            "description": "Prometheus text exposition.",
                            "content": {"text/plain": {"schema": {"type": "string"}}},
                        }
                    },
                }
            },
            "/openapi.json": {
                "get": {
                    "operationId": "openapi",
                    "responses": {
                        "200": {
                            "description": "This document.",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        }
                    },
                }
            },
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Error": _ERROR, "Envelope": _ENVELOPE, "BootstrapSecret": _SECRET},
        },
    }
