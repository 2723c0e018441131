"""Harness for the ``nodesmith serve`` tests: the real server in a subprocess, over loopback.

``ServeProcess`` starts ``python -m bootstrap.cli serve --listen 127.0.0.1:0`` (the server
picks a free port and logs it), sends its JSON log to a file the tests read, and drives it
with plain ``http.client`` and raw sockets. Holds no tests itself.
"""

from __future__ import annotations

import http.client
import json
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data" / "serve"
WORKER_YAML = (DATA / "worker.yaml").read_bytes()
WORKER_PATH = "/v1/machines/default/worker-0/userdata"


def worker_objects() -> list[dict[str, Any]]:
    """The worker-join bundle as fresh Python objects, for tests that edit it."""
    return list(yaml.safe_load_all(WORKER_YAML))


def as_yaml(objects: list[dict[str, Any]]) -> bytes:
    return yaml.safe_dump_all(objects).encode()


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class ServeProcess:
    """One running ``nodesmith serve``."""

    workdir: Path
    workers: int = 1
    extra: list[str] = field(default_factory=list)
    token: str = field(default_factory=lambda: "t-" + secrets.token_urlsafe(24))
    tls_ca: str | None = None
    proc: subprocess.Popen[bytes] | None = None
    port: int = 0

    @property
    def token_file(self) -> Path:
        return self.workdir / "token"

    @property
    def log_path(self) -> Path:
        return self.workdir / "serve.log"

    def start(self, timeout: float = 20.0) -> ServeProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.token_file.exists():
            self.token_file.write_text(self.token + "\n")
            self.token_file.chmod(0o600)
        log = self.log_path.open("ab")
        cmd = [
            *(sys.executable, "-m", "bootstrap.cli", "serve", "--listen", "127.0.0.1:0"),
            *("--token-file", str(self.token_file), "--workers", str(self.workers)),
            *self.extra,
        ]
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=log, stderr=log, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.log_lines():
                if line.get("event") == "listening":
                    self.port = int(line["address"].rsplit(":", 1)[1])
                    self.wait_ready()
                    return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}: {self.log_text()}")
            time.sleep(0.05)
        raise RuntimeError(f"server did not start: {self.log_text()}")

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Until every worker answers (one fresh connection per try lands on any of them)."""
        deadline = time.monotonic() + timeout
        ok = 0
        while time.monotonic() < deadline and ok < 4 * self.workers:
            try:
                ok += self.request("GET", "/healthz").status == 200
            except OSError:
                time.sleep(0.05)
        if ok == 0:
            raise RuntimeError(f"server never answered: {self.log_text()}")

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_lines(self) -> list[dict[str, Any]]:
        lines = []
        for raw in self.log_text().splitlines():
            try:
                lines.append(json.loads(raw))
            except ValueError:
                lines.append({"unparsed": raw})
        return lines

    def connection(self, timeout: float = 30.0) -> http.client.HTTPConnection:
        if self.tls_ca:
            context = ssl.create_default_context(cafile=self.tls_ca)
            return http.client.HTTPSConnection(
                "127.0.0.1", self.port, timeout=timeout, context=context
            )
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        conn: http.client.HTTPConnection | None = None,
    ) -> Reply:
        own = conn is None
        conn = conn or self.connection()
        try:
            conn.request(method, path, body=body, headers=headers or {})
            response = conn.getresponse()
            data = response.read()
            return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, data)
        finally:
            if own:
                conn.close()

    def auth(
        self, content_type: str = "application/yaml", token: str | None = None
    ) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.token}", "Content-Type": content_type}

    def post(
        self,
        body: bytes,
        path: str = WORKER_PATH,
        content_type: str = "application/yaml",
        token: str | None = None,
        conn: http.client.HTTPConnection | None = None,
    ) -> Reply:
        return self.request("POST", path, body, self.auth(content_type, token), conn)

    def raw(self, data: bytes, timeout: float = 10.0) -> Reply:
        """Send raw bytes on a fresh socket and read one response."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as sock:
            sock.sendall(data)
            return read_response(sock)

    def oversized_declared(self, length: int, path: str = WORKER_PATH) -> Reply:
        """Declare a body of ``length`` bytes, send none of it, read the answer."""
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {self.token}\r\n"
            f"Content-Type: application/yaml\r\nContent-Length: {length}\r\n\r\n"
        )
        return self.raw(head.encode())

    def oversized_chunked(self, total: int, chunk: int = 64 * 1024) -> tuple[Reply, int]:
        """Stream a chunked body until the server answers; returns (reply, bytes sent)."""
        head = (
            f"POST {WORKER_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer "
            f"{self.token}\r\nContent-Type: application/yaml\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        piece = f"{chunk:x}\r\n".encode() + b"#" * chunk + b"\r\n"
        sent = 0
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as sock:
            sock.sendall(head.encode())
            while sent < total:
                try:
                    sock.sendall(piece)
                except (BrokenPipeError, ConnectionResetError):
                    break
                sent += chunk
                sock.setblocking(False)
                try:
                    peek = sock.recv(1, socket.MSG_PEEK)
                except BlockingIOError:
                    peek = b""
                finally:
                    sock.setblocking(True)
                    sock.settimeout(10)
                if peek:
                    break
            return read_response(sock), sent

    def worker_pids(self) -> list[int]:
        assert self.proc is not None
        if self.workers == 1:
            return [self.proc.pid]
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        return [int(p) for p in children.split()]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def read_response(sock: socket.socket) -> Reply:
    """Parse one HTTP/1.1 response with a Content-Length from a raw socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"connection closed after {data!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return Reply(status, headers, rest[:length])
