"""``bootstrap.vm.relay``: what qemu's guestfwd cmd: starts per guest connection."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading


def test_relays_a_request_and_its_reply_then_ends() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    got: list[bytes] = []

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            data = b""
            while chunk := conn.recv(4096):  # until the relay passes on the end of stdin
                data += chunk
            got.append(data)
            conn.sendall(b"HTTP/1.0 202 Accepted\r\n\r\n")

    threading.Thread(target=answer, daemon=True).start()
    port = server.getsockname()[1]
    proc = subprocess.run(
        [sys.executable, "-m", "bootstrap.vm.relay", "127.0.0.1", str(port)],
        input=b"POST /v1/reports/default/n HTTP/1.0\r\n\r\n",
        capture_output=True,
        timeout=30,
    )
    server.close()
    assert proc.returncode == 0
    assert got == [b"POST /v1/reports/default/n HTTP/1.0\r\n\r\n"]
    assert proc.stdout == b"HTTP/1.0 202 Accepted\r\n\r\n"


def test_nobody_listening_ends_at_once_with_1() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    proc = subprocess.run(
        [sys.executable, "-m", "bootstrap.vm.relay", "127.0.0.1", str(port)],
        input=b"x",
        capture_output=True,
        timeout=30,
    )
    assert proc.returncode == 1 and proc.stdout == b""
