"""The ASGI application behind ``nodesmith serve``: routes, limits, error mapping, logging.

Plain ASGI on uvicorn rather than a framework: there are five routes, and a first version on
Starlette served about half as many cheap (401) requests per second on this 2-core machine
(3,400-4,800 against 7,900-9,800), its routing, request and middleware objects costing as much
as uvicorn itself.

A request flows: route -> bearer check -> path-name check -> body read under the size limit ->
parse (``loader``) -> ``render_one`` (the same call the CLI makes) -> JSON envelope or
bootstrap Secret. Every ``NodesmithError`` becomes its own ``http_status`` with the
``as_dict()`` body (and ``Retry-After`` for transient errors); anything else is a bug, answered
500 and logged with its traceback frames but without its message, since a message might quote
input.

The log gets one JSON line per request: method, route, validated names, status, reason,
timings and sizes. Never headers, query strings, bodies or rendered userdata.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import traceback
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from bootstrap.errors import NodesmithError, TransientError
from bootstrap.log import now, write_log
from bootstrap.render import RenderOptions, render_one
from bootstrap.render.doccache import DocumentCache
from bootstrap.render.loader import parse_json, parse_text
from bootstrap.render.names import is_label, is_subdomain
from bootstrap.render.outputs import bootstrap_secret, json_envelope
from bootstrap.serve.auth import TokenStore
from bootstrap.serve.budget import cpu_budget, install
from bootstrap.serve.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from bootstrap.serve.metrics import SharedMetrics
from bootstrap.serve.openapi import openapi_document

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

USERDATA_PATH = "/v1/machines/{namespace}/{name}/userdata"


YAML_TYPES = frozenset({"application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml"})
JSON_TYPES = frozenset({"application/json"})
_GET = ("GET", "HEAD")
DRAIN_FACTOR = 16


class HTTPError(NodesmithError):
    """An error decided by the service itself (auth, limits, media type, path)."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        *,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message, reason=reason, field=field)
        self.http_status = status
        self.terminal = status < 500
        self.headers = headers or {}


class ClientGone(Exception):
    """The client disconnected before its request was read."""


DEFAULT_MAX_BODY = 1024 * 1024


@dataclass(frozen=True)
class ServeSettings:
    """What a worker needs to build the app."""

    max_body: int = DEFAULT_MAX_BODY
    cpu_budget: float = 2.0  # seconds of CPU for parse + render of one request
    options: RenderOptions = dataclasses.field(default_factory=RenderOptions)


@dataclass
class Reply:
    """A complete response, built before anything is sent."""

    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = dataclasses.field(default_factory=dict)


def json_reply(status: int, body: Any, headers: dict[str, str] | None = None) -> Reply:
    # ASCII-only JSON: any string (even a lone surrogate quoted in an error) encodes.
    data = json.dumps(body, separators=(",", ":")).encode()
    return Reply(status, data, headers=headers or {})


def error_reply(exc: NodesmithError) -> Reply:
    """The JSON error body for any nodesmith error, with its status and headers."""
    headers = dict(getattr(exc, "headers", {}))
    status = exc.http_status
    if status == 401:
        headers["www-authenticate"] = 'Bearer realm="nodesmith"'
    if isinstance(exc, TransientError) or status == 503:
        headers["retry-after"] = str(max(1, int(getattr(exc, "retry_after", 10))))
    return json_reply(status, exc.as_dict(), headers)


_INTERNAL = json.dumps(
    {
        "reason": "InternalError",
        "message": "internal error; it has been logged",
        "object": None,
        "field": None,
        "terminal": None,
    }
).encode()


def bug_fields(exc: BaseException) -> dict[str, Any]:
    """Log fields for an unexpected exception: its type and innermost frames, not its text."""
    frames = traceback.extract_tb(exc.__traceback__)
    return {
        "error": type(exc).__name__,
        "frames": [f"{f.filename}:{f.lineno}:{f.name}" for f in frames][-6:],
    }


def check_names(namespace: str, name: str) -> None:
    """Refuse path segments that cannot be Kubernetes names (400, naming the segment)."""
    if not is_label(namespace):
        raise HTTPError(
            400,
            "InvalidName",
            "namespace must be a DNS-1123 label (lower-case alphanumerics and '-', at most 63)",
            field="path.namespace",
        )
    if not is_subdomain(name):
        raise HTTPError(
            400,
            "InvalidName",
            "name must be a DNS-1123 subdomain (lower-case alphanumerics, '-' and '.', "
            "at most 253)",
            field="path.name",
        )


def query_flag(
    query: dict[str, list[str]], key: str, allowed: tuple[str, ...], default: str
) -> str:
    """One optional query parameter that must take one of ``allowed`` values."""
    values = query.get(key)
    if not values:
        return default
    if len(values) > 1 or values[0] not in allowed:
        raise HTTPError(
            400,
            "InvalidQuery",
            f"query parameter {key} must be one of {', '.join(allowed)}",
            field=f"query.{key}",
        )
    return values[0]


def _headers(scope: Scope) -> dict[bytes, bytes]:
    # uvicorn lower-cases header names; a repeated header keeps its last value.
    return dict(scope.get("headers") or ())


async def read_limited(receive: Receive, declared: bytes | None, limit: int) -> bytes:
    """Read the body, refusing it as soon as it is known to exceed ``limit`` bytes.

    A declared Content-Length over the limit is refused before reading anything (and, with
    ``Expect: 100-continue``, before the client sends it); a chunked body is counted as it
    arrives and dropped the moment it passes the limit.
    """
    too_large = f"request body is over the {limit}-byte limit"
    if declared is not None:
        if not declared.isdigit():  # bytes: ASCII digits only
            raise HTTPError(400, "InvalidContentLength", "Content-Length is not a number")
        if len(declared) > 18 or int(declared) > limit:  # 18 digits: int() stays cheap
            # uvicorn discards (never buffers) the rest of a body once the answer is sent, so a
            # client that sends it all anyway can still read its 413 on an open connection;
            # past DRAIN_FACTOR times the limit, closing is cheaper than draining.
            close = len(declared) > 18 or int(declared) > DRAIN_FACTOR * limit
            raise HTTPError(413, "BodyTooLarge", too_large, headers=_close(close))
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            # A chunked body has no known end: close rather than drain it.
            raise HTTPError(413, "BodyTooLarge", too_large, headers=_close(True))
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _close(close: bool) -> dict[str, str]:
    return {"connection": "close"} if close else {}


def parse_body(
    media_type: str, body: bytes, cache: DocumentCache | None = None
) -> list[dict[str, Any]]:
    """The bundle's objects, through the same loader the CLI uses (YAML documents this
    worker has parsed before come from ``cache``)."""
    if not body.strip():
        raise HTTPError(400, "EmptyBody", "the request body holds no objects")
    try:
        if media_type in JSON_TYPES:
            return parse_json(body, "request body")
        return parse_text(body, "request body", cache)
    except NodesmithError:
        raise
    except (ValueError, RecursionError, MemoryError) as exc:
        # Input the parser chokes on outside its own error types, e.g. an integer literal
        # over Python's 4300-digit conversion limit (ValueError from the YAML constructor).
        raise HTTPError(
            400, "ParseError", f"request body cannot be parsed ({type(exc).__name__})"
        ) from None


class UserdataApp:
    """The ASGI app of one worker: its token store, the shared metrics, the settings."""

    def __init__(
        self,
        tokens: TokenStore,
        metrics: SharedMetrics,
        settings: ServeSettings,
        log_fd: int = 2,
    ) -> None:
        self.tokens = tokens
        self.metrics = metrics
        self.settings = settings
        self.log_fd = log_fd
        self.pid = os.getpid()
        self._openapi = json.dumps(openapi_document(settings.max_body)).encode()
        self.documents = DocumentCache()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # lifespan is off; websockets are not served
        start = time.perf_counter()
        log: dict[str, Any] = {}
        route = route_of(scope.get("path", ""))
        reply: Reply | None = None
        error: BaseException | None = None
        try:
            reply = await self._dispatch(scope, receive, log)
        except ClientGone:
            pass
        except Exception as exc:  # a bug: answer 500, log where, never the message
            error = exc
            log["reason"] = "InternalError"
            reply = Reply(500, _INTERNAL)
        status = reply.status if reply else 499
        sent = len(reply.body) if reply else 0
        elapsed = time.perf_counter() - start
        self.metrics.observe(route, status, elapsed)
        line: dict[str, Any] = {
            "ts": now(),
            "level": "error" if status >= 500 and status != 503 else "info",
            "event": "request",
            "method": scope.get("method"),
            "route": route,
            "status": status,
            "ms": round(elapsed * 1000, 3),
            "bytes_out": sent,
            "pid": self.pid,
        }
        client = scope.get("client")
        if client:
            line["client"] = f"{client[0]}:{client[1]}"
        line.update({k: v for k, v in log.items() if v is not None})
        if error is not None:
            line.update(bug_fields(error))
        # Counted and logged before sending, so a client that has its answer also finds it in
        # /metrics and the log.
        write_log(line, self.log_fd)
        if reply is not None:
            await _send(send, reply)

    async def _dispatch(self, scope: Scope, receive: Receive, log: dict[str, Any]) -> Reply:
        path: str = scope.get("path", "")
        method: str = scope.get("method", "")
        if path.startswith("/v1/machines/"):
            parts = path.split("/")
            if len(parts) != 6 or parts[5] != "userdata":
                return self._error(HTTPError(404, "NotFound", "no such endpoint"), log)
            if method != "POST":
                return self._error(_not_allowed("POST"), log)
            try:
                return await self._userdata(scope, receive, parts[3], parts[4], log)
            except NodesmithError as exc:
                return self._error(exc, log)
        route = _SIMPLE_ROUTES.get(path)
        if route is None:
            return self._error(HTTPError(404, "NotFound", "no such endpoint"), log)
        if method not in _GET:
            return self._error(_not_allowed("GET, HEAD"), log)
        if route == "healthz":
            return json_reply(200, {"status": "ok"})
        if route == "metrics":
            return Reply(200, self.metrics.exposition(), METRICS_CONTENT_TYPE)
        return Reply(200, self._openapi)

    def _error(self, exc: NodesmithError, log: dict[str, Any]) -> Reply:
        log["reason"] = exc.reason
        log["field"] = exc.field
        log["object"] = str(exc.obj) if exc.obj else None
        return error_reply(exc)

    async def _userdata(
        self, scope: Scope, receive: Receive, namespace: str, name: str, log: dict[str, Any]
    ) -> Reply:
        headers = _headers(scope)
        if not self.tokens.check(headers.get(b"authorization")):
            raise HTTPError(401, "Unauthorized", "a valid bearer token is required")
        check_names(namespace, name)
        log["namespace"], log["name"] = namespace, name
        raw_query = scope.get("query_string", b"").decode("latin-1")
        query = parse_qs(raw_query, keep_blank_values=True) if raw_query else {}
        output = query_flag(query, "output", ("json", "secret"), "json")
        gzip = query_flag(query, "gzip", ("true", "false"), "false") == "true"
        content_type = headers.get(b"content-type", b"").decode("latin-1")
        media_type = content_type.split(";")[0].strip().lower()
        if media_type not in YAML_TYPES and media_type not in JSON_TYPES:
            raise HTTPError(
                415,
                "UnsupportedMediaType",
                "Content-Type must be application/yaml or application/json",
                field="header.content-type",
            )
        body = await read_limited(receive, headers.get(b"content-length"), self.settings.max_body)
        log["bytes_in"] = len(body)
        options = self.settings.options
        if gzip != options.gzip:
            options = dataclasses.replace(options, gzip=gzip)
        with cpu_budget(self.settings.cpu_budget):
            objects = parse_body(media_type, body, self.documents)
            result = render_one(objects, f"{namespace}/{name}", options)
        payload = bootstrap_secret(result) if output == "secret" else json_envelope(result)
        if result.bootstrap_token_secret is not None:
            payload["bootstrapTokenSecret"] = result.bootstrap_token_secret
        if result.generated_secrets:
            # A new CA on every init request, returned to nobody, would leave the joins nothing
            # to pin: hand it back, as `render --secrets-out` writes it.
            payload["clusterCASecrets"] = result.generated_secrets
            if "warnings" in payload:
                names = ", ".join(s["metadata"]["name"] for s in result.generated_secrets)
                payload["warnings"].append(
                    f"cluster CAs were generated ({names}): apply clusterCASecrets to the "
                    "management cluster before anything else renders for this cluster, or the "
                    "next request generates other CAs"
                )
        log["role"] = getattr(result, "role", None)
        return json_reply(200, payload)


_SIMPLE_ROUTES = {"/healthz": "healthz", "/metrics": "metrics", "/openapi.json": "openapi"}


def route_of(path: str) -> str:
    """The metrics/log route name of a request path (a fixed, small set)."""
    if path.startswith("/v1/machines/"):
        return "userdata"
    return _SIMPLE_ROUTES.get(path, "other")


def _not_allowed(allow: str) -> HTTPError:
    return HTTPError(
        405, "MethodNotAllowed", f"method not allowed; use {allow}", headers={"allow": allow}
    )


async def _send(send: Send, reply: Reply) -> None:
    headers = [
        (b"content-type", reply.content_type.encode()),
        (b"content-length", str(len(reply.body)).encode()),
    ]
    headers.extend((k.encode(), v.encode()) for k, v in reply.headers.items())
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body})


def build_app(tokens: TokenStore, metrics: SharedMetrics, settings: ServeSettings) -> UserdataApp:
    """The complete ASGI app for one worker."""
    install()
    return UserdataApp(tokens, metrics, settings)
