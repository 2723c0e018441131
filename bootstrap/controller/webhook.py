"""The CRD conversion webhook: KubeadmConfig(Template) between v1beta1 and v1beta2, over TLS.

The API server stores v1beta2 and calls ``POST /convert`` with a ``ConversionReview``
whenever a client reads or writes the other version (a Cluster API v1beta1 controller, an old
manifest); :func:`bootstrap.controller.conversion.review` answers it. Every replica serves it,
the standby too (conversion needs no leadership), behind the Service the CRDs name.

The certificate and key are loaded into the TLS context from a private temporary directory and
unlinked at once: nothing of the key stays on disk (the Pod's root filesystem is read-only; its
``/tmp`` is an in-memory emptyDir).
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bootstrap.controller import conversion
from bootstrap.controller.servingcert import ServingCert
from bootstrap.log import log_event

log = logging.getLogger("nodesmith.webhook")

PATH = "/convert"
MAX_BODY = 16 * 1024 * 1024  # a list conversion carries many objects; more is no review
# Parsing and converting costs ~8x the body: two at a time stay well inside the Pod's 512Mi
# with the controller's caches; a third waits (the API server's own timeout is 30 s).
CONCURRENT = threading.BoundedSemaphore(2)
PORT = 9443  # controller-runtime's webhook port, which providers' Services target
IDLE = 120  # longer than Go's 90 s idle keep-alive: the API server closes first


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A broken client (a TCP probe, plain HTTP on the TLS port, a reset) is one line,
        never a traceback in the JSON log."""
        error = sys.exc_info()[1]
        log_event("webhook", level="warning", result="ClientError", error=type(error).__name__)


def tls_context(cert: ServingCert) -> ssl.SSLContext:
    """A server context holding ``cert`` (the files it was read from are gone on return)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    load(context, cert)
    return context


def load(context: ssl.SSLContext, cert: ServingCert) -> None:
    """Put ``cert`` in ``context``: the handshakes after it serve the new certificate (a
    renewal needs no restart and drops no connection)."""
    with tempfile.TemporaryDirectory(prefix="nodesmith-webhook-") as tmp:
        os.chmod(tmp, 0o700)
        cert_file, key_file = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
        for path, data in ((cert_file, cert.cert), (key_file, cert.key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
        context.load_cert_chain(str(cert_file), str(key_file))


def _handler() -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # the API server keeps its connections
        disable_nagle_algorithm = True  # a reply is headers then body: no 40 ms delayed ACK
        timeout = IDLE

        def log_message(self, format: str, *args: Any) -> None:  # one line per failure only
            pass

        def _reply(self, code: int, body: bytes, kind: str = "application/json") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._reply(200, b"ok\n", "text/plain")
            else:
                self._reply(404, b"not found\n", "text/plain")

        def do_POST(self) -> None:
            if self.path.split("?", 1)[0] != PATH:
                self._reply(404, b"not found\n", "text/plain")
                return
            try:
                length = int(self.headers.get("Content-Length") or "-1")
            except ValueError:
                length = -1
            if not 0 <= length <= MAX_BODY:
                self.close_connection = True
                self._reply(413, b"a ConversionReview needs a Content-Length up to 16 MiB\n")
                return
            with CONCURRENT:
                self._convert(length)

        def _convert(self, length: int) -> None:
            try:
                body = json.loads(self.rfile.read(length))
            except (ValueError, RecursionError):  # not JSON, or nested past any object's depth
                self._reply(400, b"the body is not a JSON ConversionReview\n", "text/plain")
                return
            try:
                answer = conversion.review(body)
            except RecursionError:
                self._reply(400, b"the objects are nested too deeply\n", "text/plain")
                return
            result = (answer.get("response") or {}).get("result") or {}
            if result.get("status") != "Success":
                log_event("conversion", level="warning", result="Failure",
                          message=str(result.get("message", ""))[:500])  # fmt: skip
            self._reply(200, json.dumps(answer, separators=(",", ":")).encode())

    return Handler


def serve(
    host: str,
    port: int,
    cert: ServingCert,
    renewed: Callable[[], ServingCert] | None = None,
    every: float = 60.0,
) -> ThreadingHTTPServer:
    """Serve conversions on ``host:port`` in a daemon thread; returns the server. With
    ``renewed`` (the certificate as it is now), a renewal (cert-manager's, 30 days before
    expiry) is served within ``every`` seconds."""
    server = _Server((host, port), _handler())
    # The listening context hands each handshake the current certificate's own context (its
    # SNI callback runs for every ClientHello): a renewal swaps in a fresh, complete context,
    # never a half-loaded one, and a new key type never sits beside the old pair.
    current = [tls_context(cert)]
    listening = tls_context(cert)

    def pick(sock: ssl.SSLObject, name: str | None, _: ssl.SSLContext) -> None:
        sock.context = current[0]

    listening.sni_callback = pick
    # the handshake happens on the first read, in the request's own thread (with its
    # timeout), so a slow or idle client cannot hold up the accept loop
    server.socket = listening.wrap_socket(
        server.socket, server_side=True, do_handshake_on_connect=False
    )
    threading.Thread(target=server.serve_forever, name="webhook", daemon=True).start()
    if renewed is not None:
        threading.Thread(
            target=_follow, args=(current, cert, renewed, every), name="webhook-cert", daemon=True
        ).start()
    log.info("conversion webhook serving on %s:%d", host, server.server_address[1])
    return server


def _follow(
    current: list[ssl.SSLContext],
    cert: ServingCert,
    renewed: Callable[[], ServingCert],
    every: float,
) -> None:
    """Serve the certificate anew whenever it changes; a failed read or load keeps the one
    served (it is still valid: renewals come early) and says why."""
    while True:
        time.sleep(every)
        try:
            now = renewed()
            if now != cert:
                current[0] = tls_context(now)
                cert = now
                log_event("webhook-cert", result="reloaded")
        except Exception as exc:  # the API may be away: keep serving, look again later
            log_event("webhook-cert", level="warning", result="unchanged", error=str(exc)[:300])
