"""uvicorn's httptools protocol with the limits it lacks, so one client cannot hold a worker.

uvicorn 0.55 with httptools buffers a request head of any size and waits without end for a
request that never finishes: two 300 MB headers took a worker from 58 to 733 MB, and 150
half-sent requests used up its file descriptors until ``/healthz`` failed. ``GuardedProtocol``
adds, per connection:

* a request head (request line and header fields) of at most ``max_head_bytes`` bytes and
  ``max_headers`` fields, else ``431`` and close: nginx and Node stop at 8 to 16 KiB;
* the head within ``head_timeout`` seconds of the connection (or of the request's first
  byte on a kept-alive one), the body within ``body_timeout`` seconds of the head, else
  ``408`` and close (a connection that sent nothing, or whose request was answered before its
  body came, is just closed);
* at most ``max_connections`` per worker: a new connection beyond that evicts the one that has
  waited longest for its request to arrive (or sits idle); when every connection is busy being
  answered, the new one is closed instead. ``/healthz`` stays reachable under a flood of
  half-sent requests.

A refusal gets nodesmith's JSON error body, is logged as one JSON line, and never reaches
the app. 431 is terminal (the same request will be refused again); 408 is not.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from bootstrap.log import log_event


@dataclass(frozen=True)
class Limits:
    """Per-connection limits; the defaults are what ``nodesmith serve`` runs with."""

    max_head_bytes: int = 16 * 1024
    max_headers: int = 100
    head_timeout: float = 10.0
    body_timeout: float = 30.0
    max_connections: int = 1000


@dataclass(frozen=True)
class Refusal:
    status: int
    reason: str
    message: str
    terminal: bool


class _Refused(Exception):
    """Raised inside a parser callback to stop httptools; uvicorn then calls
    ``send_400_response``, which sends the refusal recorded before the raise instead."""


_PHRASES = {400: b"Bad Request", 408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


class GuardedProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` plus the limits above; ``limits`` is set per server by
    :func:`guarded` (uvicorn builds protocols from a class, not from an instance)."""

    limits: ClassVar[Limits] = Limits()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._refusal: Refusal | None = None
        self._got_bytes = False
        self._busy = False  # a whole request is in, its answer is not out yet
        self._answered = False  # the current request has had its answer (maybe early: 401)
        self._in_head = True
        self._head_bytes = 0
        self._head_size = 0
        self._header_count = 0
        self._waiting_since = self.loop.time()
        self._timer: asyncio.TimerHandle | None = None
        self._arm(self.limits.head_timeout)
        self._make_room()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    # --- time -------------------------------------------------------------------------------

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._timer = self.loop.call_later(seconds, self._timed_out)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        if self._busy or self.transport.is_closing():
            return
        if not self._got_bytes or self._answered:
            self.transport.close()  # nothing asked, or answered already (its body never came)
            return
        what = "request head" if self._in_head else "request body"
        seconds = self.limits.head_timeout if self._in_head else self.limits.body_timeout
        self._refuse(
            Refusal(408, "RequestTimeout", f"{what} not received within {seconds:g}s", False)
        )

    # --- connections ------------------------------------------------------------------------

    def _make_room(self) -> None:
        if len(self.connections) <= self.limits.max_connections:
            return
        waiting = [
            c
            for c in self.connections
            if isinstance(c, GuardedProtocol) and c is not self and not c._busy
        ]
        if not waiting:
            self.transport.close()
            log_event("connection-refused", level="warning", reason="TooManyConnections")
            return
        oldest = min(waiting, key=lambda c: c._waiting_since)
        oldest._disarm()
        oldest.transport.close()
        log_event("connection-evicted", level="warning", reason="TooManyConnections")

    # --- the request head -------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._refusal is not None:
            return
        self._got_bytes = True
        super().data_received(data)
        if self._in_head and self._refusal is None and not self.transport.is_closing():
            # A header still arriving: httptools holds it whole until its end, so count here.
            self._head_bytes += len(data)
            if self._head_bytes > self.limits.max_head_bytes:
                self._refuse(self._too_large())

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._answered = False
        self._head_bytes = self._head_size = self._header_count = 0
        self._waiting_since = self.loop.time()
        if self._timer is None:
            self._arm(self.limits.head_timeout)

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        self._count(len(name) + len(value) + 4)
        if self._header_count > self.limits.max_headers:
            self._refusal = Refusal(
                431,
                "TooManyHeaders",
                f"more than {self.limits.max_headers} header fields",
                True,
            )
            raise _Refused
        super().on_header(name, value)

    def _count(self, size: int) -> None:
        self._head_size += size
        if self._head_size > self.limits.max_head_bytes:
            self._refusal = self._too_large()
            raise _Refused

    def _too_large(self) -> Refusal:
        return Refusal(
            431,
            "HeadersTooLarge",
            f"request head larger than {self.limits.max_head_bytes} bytes",
            True,
        )

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._arm(self.limits.body_timeout)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        self._busy = True
        super().on_message_complete()

    def on_response_complete(self) -> None:
        self._busy = False
        self._answered = True
        self._waiting_since = self.loop.time()
        super().on_response_complete()

    # --- answering a refusal ----------------------------------------------------------------

    def send_400_response(self, msg: str) -> None:
        refusal = self._refusal or Refusal(400, "BadRequest", "invalid HTTP request", True)
        self._refuse(refusal)

    def _refuse(self, refusal: Refusal) -> None:
        self._refusal = refusal
        self._disarm()
        body = json.dumps(
            {
                "reason": refusal.reason,
                "message": refusal.message,
                "object": None,
                "field": None,
                "terminal": refusal.terminal,
            },
            separators=(",", ":"),
        ).encode()
        head = (
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n"
            % (refusal.status, _PHRASES.get(refusal.status, b""), len(body))
        )
        if not self.transport.is_closing():
            self.transport.write(head + body)
            self.transport.close()
        log_event("request-refused", level="warning", status=refusal.status, reason=refusal.reason)


def guarded(limits: Limits) -> type[GuardedProtocol]:
    """A protocol class carrying ``limits``, for ``uvicorn.Config(http=...)``."""
    attributes: dict[str, Any] = {"limits": limits}
    return type("GuardedProtocol", (GuardedProtocol,), attributes)
