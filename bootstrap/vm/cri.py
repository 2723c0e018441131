"""Ask a node's CRI runtime for ``runtime.v1.RuntimeService/Version`` from the host, over SSH.

This is what the kubelet asks first, so an answer proves the runtime's CRI plugin is serving.
Debian 12 has no ``crictl``, and the node must not need extra tools, so the call is made here:

* the node side is ``sudo python3`` (cloud-init guarantees python3) relaying its stdin/stdout
  to the runtime's unix socket, run over one SSH exec channel per connection;
* the host side listens on a private unix socket, hands each connection to such a channel, and
  points grpcio at it (``unix:PATH``).

The request and response of ``Version`` are four string fields, so they are encoded by hand
(protobuf wire format: field number << 3 | 2, varint length, bytes) instead of shipping
generated stubs for the whole CRI API.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import paramiko

DEFAULT_SOCKET = "/var/run/containerd/containerd.sock"
VERSION_METHOD = "/runtime.v1.RuntimeService/Version"
CRI_API_VERSION = "v1"

# Runs on the node: connect to the socket, copy both ways until either side closes.
_RELAY = r"""
import os, socket, sys, threading
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
def up():
    while True:
        d = os.read(0, 65536)
        if not d:
            s.shutdown(socket.SHUT_WR)
            return
        s.sendall(d)
threading.Thread(target=up, daemon=True).start()
while True:
    d = s.recv(65536)
    if not d:
        break
    os.write(1, d)
"""


@dataclass(frozen=True)
class CRIVersion:
    """``VersionResponse``: what ``crictl version`` prints."""

    version: str
    runtime_name: str
    runtime_version: str
    runtime_api_version: str

    @property
    def container_runtime_version(self) -> str:
        """As the kubelet reports it in ``Node.status.nodeInfo``: ``containerd://1.6.20``."""
        return f"{self.runtime_name}://{self.runtime_version}"


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_version_request(version: str = CRI_API_VERSION) -> bytes:
    """``VersionRequest{version = 1}``."""
    data = version.encode()
    return b"\x0a" + _varint(len(data)) + data


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def decode_version_response(buf: bytes) -> CRIVersion:
    """Parse ``VersionResponse``; unknown fields are skipped as protobuf requires."""
    fields: dict[int, str] = {}
    pos = 0
    while pos < len(buf):
        key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 2:
            length, pos = _read_varint(buf, pos)
            if pos + length > len(buf):
                raise ValueError("truncated field")
            fields[number] = buf[pos : pos + length].decode("utf-8", "replace")
            pos += length
        elif wire == 0:
            _, pos = _read_varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return CRIVersion(fields.get(1, ""), fields.get(2, ""), fields.get(3, ""), fields.get(4, ""))


class _Relay:
    """A host-side unix socket whose connections are piped into SSH exec channels."""

    def __init__(self, transport: paramiko.Transport, remote_socket: str, sudo: bool) -> None:
        self.transport = transport
        prefix = "sudo -n " if sudo else ""
        quoted = "'" + _RELAY.replace("'", "'\\''") + "'"
        self.command = f"{prefix}python3 -c {quoted} {remote_socket}"
        self.dir = tempfile.mkdtemp(prefix="nodesmith-cri-")
        self.path = os.path.join(self.dir, "cri.sock")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen(4)
        self.errors: list[str] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        chan = self.transport.open_session()
        chan.exec_command(self.command)

        def down() -> None:
            try:
                while True:
                    data = chan.recv(65536)
                    if not data:
                        break
                    conn.sendall(data)
            except OSError:  # grpc closed its end first: nothing left to deliver
                pass
            err = chan.recv_stderr(65536) if chan.recv_stderr_ready() else b""
            if err:
                self.errors.append(err.decode(errors="replace").strip())
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_WR)

        t = threading.Thread(target=down, daemon=True)
        t.start()
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    chan.shutdown_write()
                    break
                chan.sendall(data)
        except OSError:
            pass
        t.join(timeout=5)
        chan.close()
        conn.close()

    def close(self) -> None:
        self._closed = True
        self.server.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
            os.rmdir(self.dir)


@contextlib.contextmanager
def relay(
    transport: paramiko.Transport, remote_socket: str = DEFAULT_SOCKET, sudo: bool = True
) -> Iterator[str]:
    """Yield a local ``unix:`` gRPC target that reaches ``remote_socket`` on the node."""
    r = _Relay(transport, remote_socket, sudo)
    try:
        yield f"unix:{r.path}"
    finally:
        r.close()


def call_version(target: str, timeout: float = 20.0) -> CRIVersion:
    """Call ``RuntimeService/Version`` on a gRPC ``target`` (e.g. ``unix:/path``)."""
    import grpc

    with grpc.insecure_channel(target) as channel:
        method: Any = channel.unary_unary(
            VERSION_METHOD,
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        raw: bytes = method(encode_version_request(), timeout=timeout)
    return decode_version_response(raw)


def runtime_version(
    transport: paramiko.Transport,
    remote_socket: str = DEFAULT_SOCKET,
    sudo: bool = True,
    timeout: float = 20.0,
) -> CRIVersion:
    """The node runtime's CRI ``Version`` answer, fetched through an SSH relay."""
    with relay(transport, remote_socket, sudo) as target:
        return call_version(target, timeout)


def local_socket_exists(path: str) -> bool:
    """For callers that run on the node itself."""
    return Path(path).is_socket()
