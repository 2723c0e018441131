"""Node -> management: the on-node script reports its phases; the controller records them.

Cluster API issues #2554 and #6476: when kubeadm fails on a node, nobody tells the management
cluster, and the Machine waits forever. Here the bootstrap script POSTs each phase change
(phase, reason, terminal, attempts) to ``/v1/reports/<namespace>/<machine>``, and the
controller records it on the Machine's KubeadmConfig: a ``BootstrapSucceeded`` condition with
the node's reason, and on a terminal failure ``failureReason``/``failureMessage`` too, so a
MachineHealthCheck and users see it at once.

The credential is rendered into the userdata (in the 0600 script config, redacted from the
node's logs). It is never the bootstrap token: it is an HMAC-SHA256 over
``{namespace, machine, expiry}`` with a key only the controller holds (the Secret
``nodesmith-report-key`` in its namespace, shared by its replicas), so it is scoped to that one
Machine, expires, and needs no storage per Machine. Verification is constant-time.

Statuses: 202 recorded; 400 not JSON; 401 no, bad or expired credential; 403 a credential for
another Machine; 404 no such Machine or path; 409 a final outcome (Succeeded, or a terminal
failure) is recorded already; 413 too large; 422 a field is wrong (named);
503 the API is unreachable. The node sends each report once, but retries its last one
(Succeeded or Failed) on a 408, 429 or 5xx, and takes a 409 as delivered.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx2
from lightkube import ApiError

from bootstrap.controller import kube, status
from bootstrap.errors import NodesmithError, show_value
from bootstrap.log import log_event
from bootstrap.render.objects import parse_machine, parse_stored

log = logging.getLogger("nodesmith.controller")

KEY_SECRET = "nodesmith-report-key"
PREFIX = "nsr1"
MAX_BODY = 4096
PHASES = ("Running", "Retrying", "Succeeded", "Failed")
_REASON = re.compile(r"^[A-Za-z][A-Za-z0-9]{0,127}$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")

Obj = dict[str, Any]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Refused(Exception):
    """A report the endpoint turns away, with its HTTP status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Credentials:
    """Issues and checks per-Machine report credentials with one HMAC key."""

    key: bytes

    def issue(self, namespace: str, machine: str, ttl: float, now: float | None = None) -> str:
        expires = int((now if now is not None else time.time()) + ttl)
        body = _b64(json.dumps({"ns": namespace, "m": machine, "exp": expires}).encode())
        mac = hmac.new(self.key, f"{PREFIX}.{body}".encode(), hashlib.sha256).digest()
        return f"{PREFIX}.{body}.{_b64(mac)}"

    def verify(self, credential: str, namespace: str, machine: str) -> None:
        """Raise :class:`Refused` unless ``credential`` is valid now for this Machine."""
        parts = credential.split(".")
        if len(parts) != 3 or parts[0] != PREFIX or len(credential) > 1024:
            raise Refused(401, "not a nodesmith report credential")
        try:
            given = _unb64(parts[2])
        except ValueError:
            raise Refused(401, "not a nodesmith report credential") from None
        want = hmac.new(self.key, f"{PREFIX}.{parts[1]}".encode(), hashlib.sha256).digest()
        if not hmac.compare_digest(given, want):  # before anything reads the claims
            raise Refused(401, "the credential's signature does not verify")
        try:
            claims = json.loads(_unb64(parts[1]))
        except ValueError:
            raise Refused(401, "not a nodesmith report credential") from None
        if not isinstance(claims, dict) or not isinstance(claims.get("exp"), int):
            raise Refused(401, "the credential has no expiry")
        if claims["exp"] < time.time():
            raise Refused(401, "the credential has expired")
        if (claims.get("ns"), claims.get("m")) != (namespace, machine):
            raise Refused(403, "the credential is for another Machine")


def load_key(api: kube.Api, namespace: str) -> bytes:
    """The HMAC key from ``nodesmith-report-key``, created (32 random bytes) if missing."""
    for _ in range(3):
        found = api.get(kube.Secret, KEY_SECRET, namespace)
        if found is not None:
            return base64.b64decode((found.get("data") or {})["key"])
        try:
            api.create(
                kube.Secret,
                {
                    "metadata": {"name": KEY_SECRET, "namespace": namespace},
                    "type": "Opaque",
                    "data": {"key": base64.b64encode(secrets.token_bytes(32)).decode()},
                },
            )
        except ApiError as exc:  # another replica created it first
            if kube.status_code(exc) != 409:
                raise
    raise RuntimeError(f"cannot read or create Secret {namespace}/{KEY_SECRET}")


def parse_report(body: bytes) -> Obj:
    """The report's four fields, checked; raises :class:`Refused` (400/422) naming the field."""
    try:
        doc = json.loads(body)
    except ValueError:
        raise Refused(400, "the body is not JSON") from None
    if not isinstance(doc, dict):
        raise Refused(422, "the body must be a JSON object")
    extra = sorted(set(doc) - {"phase", "reason", "terminal", "attempts"})
    if extra:
        raise Refused(422, f"unknown field {show_value(extra[0])}")
    if doc.get("phase") not in PHASES:
        raise Refused(422, f"phase must be one of {', '.join(PHASES)}")
    if not isinstance(doc.get("reason"), str) or not _REASON.match(doc["reason"]):
        raise Refused(422, "reason must be a CamelCase word of at most 128 characters")
    if not isinstance(doc.get("terminal"), bool):
        raise Refused(422, "terminal must be true or false")
    attempts = doc.get("attempts")
    if isinstance(attempts, bool) or not isinstance(attempts, int) or not 0 <= attempts <= 10000:
        raise Refused(422, "attempts must be a whole number from 0 to 10000")
    return doc


def _stored_status(config: Obj) -> Obj:
    raw = config.get("status")
    return dict(raw) if isinstance(raw, dict) else {}


def final_recorded(config: Obj) -> bool:
    """True once the node reported Succeeded or a terminal failure. Later reports are refused:
    a credential read off a joined node cannot mark it failed (and so get it remediated)."""
    cond = status.condition_of(status.view(_stored_status(config)), status.BOOTSTRAP_SUCCEEDED)
    return cond is not None and (cond.get("status") == "True" or cond.get("severity") == "Error")


def report_status(config: Obj, report: Obj) -> Obj:
    """The status a report leads to: BootstrapSucceeded, and the failure fields if terminal."""
    current = status.view(_stored_status(config))
    phase, reason, terminal = report["phase"], report["reason"], report["terminal"]
    attempts = report["attempts"]
    desired: Obj = {}
    if phase == "Succeeded":
        update = status.condition(status.BOOTSTRAP_SUCCEEDED, True, reason)
    else:
        message = f"the node reports {phase} ({reason}) after {attempts} attempt(s)"
        failed = phase == "Failed" and terminal
        update = status.condition(
            status.BOOTSTRAP_SUCCEEDED, False, reason, message, terminal=failed
        )
        if failed:
            desired = {"failureReason": reason, "failureMessage": message + ", terminal"}
    desired["conditions"] = status.merge_conditions(current.get("conditions") or [], [update])
    return desired


def _config_name(machine: Obj) -> str:
    """The KubeadmConfig a Machine names ('' for none, or a Machine nodesmith cannot read)."""
    try:
        ref = parse_machine(machine).config_ref
    except NodesmithError:
        return ""
    return ref.name if ref is not None and ref.kind == "KubeadmConfig" else ""


class ReportServer:
    """The HTTP endpoint, served by a thread of the controller."""

    def __init__(
        self,
        api: kube.Api,
        find_machine: Callable[[str, str], Obj | None],
        credentials: Credentials,
    ) -> None:
        self.api = api  # the management cluster, where reports are recorded
        self.find_machine = find_machine  # (namespace, name) -> the Machine, or None
        self.credentials = credentials

    def record(self, namespace: str, machine: str, credential: str, body: bytes) -> None:
        self.credentials.verify(credential, namespace, machine)
        report = parse_report(body)
        # any replica records it (a standby has no caches: it reads the Machine); the status
        # write is guarded by the config's resourceVersion, so replicas cannot clobber a write
        found = self.find_machine(namespace, machine)
        if found is None:
            raise Refused(404, f"no Machine {namespace}/{machine}")
        config_name = _config_name(found)
        api = self.api
        for _ in range(3):  # optimistic concurrency: the reconciler may write in between
            config = api.get(kube.KubeadmConfig, config_name, namespace) if config_name else None
            if config is None:
                raise Refused(404, f"Machine {namespace}/{machine} has no KubeadmConfig")
            if final_recorded(config):
                raise Refused(409, "a final outcome is recorded already; reports end there")
            change = status.patch(_stored_status(config), report_status(config, report))
            if change is None:
                return
            version = parse_stored(config).resource_version
            try:
                api.merge_patch(
                    kube.KubeadmConfig,
                    config_name,
                    namespace,
                    {"metadata": {"resourceVersion": version}, "status": change},
                    status=True,
                )
                return
            except ApiError as exc:
                if kube.status_code(exc) != 409:
                    raise
        raise Refused(503, "the KubeadmConfig kept changing; report again")

    def serve(
        self, host: str, port: int, tls: tuple[str, str] | None = None
    ) -> ThreadingHTTPServer:
        server = ThreadingHTTPServer((host, port), _handler(self))
        server.daemon_threads = True
        if tls is not None:
            import ssl

            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            # the handshake happens on the first read, in the request's own thread (with its
            # timeout), so an idle connection cannot hold up the accept loop
            server.socket = context.wrap_socket(
                server.socket, server_side=True, do_handshake_on_connect=False
            )
        threading.Thread(target=server.serve_forever, name="reports", daemon=True).start()
        return server


def _handler(endpoint: ReportServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "nodesmith-reports"
        timeout = 10

        def log_message(self, format: str, *args: Any) -> None:  # no header or token logging
            return

        def _reply(self, code: int, message: str) -> None:
            body = json.dumps({"code": code, "message": message}).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            started = time.monotonic()
            parts = self.path.split("?")[0].strip("/").split("/")
            code, message = 202, "recorded"
            machine = ""
            try:
                if len(parts) != 4 or parts[:2] != ["v1", "reports"]:
                    raise Refused(404, "no such path: POST /v1/reports/<namespace>/<machine>")
                namespace, machine = parts[2], parts[3]
                if not (_NAME.match(namespace) and _NAME.match(machine)):
                    raise Refused(404, "no such Machine name")
                auth = self.headers.get("Authorization", "")
                if not auth.startswith("Bearer "):
                    raise Refused(401, "no bearer credential")
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_BODY:
                    raise Refused(413, f"the body is over {MAX_BODY} bytes")
                body = self.rfile.read(length) if length > 0 else b""
                endpoint.record(namespace, machine, auth[len("Bearer ") :], body)
            except Refused as exc:
                code, message = exc.code, exc.message
            except ValueError:
                code, message = 400, "bad Content-Length"
            except (ApiError, OSError, httpx2.HTTPError) as exc:
                code, message = 503, f"the management API is unreachable: {type(exc).__name__}"
            except Exception as exc:  # a bug: answer, log, and keep serving
                log.exception("report handling failed")
                code, message = 500, f"internal error: {type(exc).__name__}"
            self._reply(code, message)
            log_event(
                "report",
                machine=f"{parts[2]}/{machine}" if machine else "",
                code=code,
                ms=round((time.monotonic() - started) * 1000, 1),
            )

    return Handler
