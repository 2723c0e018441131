"""The per-connection limits of ``nodesmith serve`` (``bootstrap.serve.protocol``), driven with
raw sockets against the real server: oversized heads, half-sent requests, connection floods."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_helpers import WORKER_PATH, ServeProcess, read_response, rss_kib

pytestmark = pytest.mark.timeout(120)

# Short timeouts and a small connection cap, so that each limit is reached in seconds.
FLAGS = ["--header-timeout", "1", "--body-timeout", "1", "--max-connections", "20"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    srv = ServeProcess(tmp_path_factory.mktemp("limits"), extra=FLAGS).start()
    yield srv
    assert srv.stop() == 0, srv.log_text()


def _head(path: str = "/healthz", *headers: str) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


# (request, status, reason): the one answer each head gets.
HEADS = [
    (_head("/healthz", "X-Pad: " + "a" * 8000), 200, None),
    (_head("/healthz", *[f"X-{i}: v" for i in range(99)]), 200, None),  # 100 with Host
    (_head("/healthz", "X-Pad: " + "a" * 20000), 431, "HeadersTooLarge"),
    (_head("/healthz?" + "q" * 20000), 431, "HeadersTooLarge"),
    (_head("/healthz", *[f"X-{i}: v" for i in range(100)]), 431, "TooManyHeaders"),
    (b"NOT HTTP AT ALL\x00\r\n\r\n", 400, "BadRequest"),
]


@pytest.mark.parametrize(("request_bytes", "status", "reason"), HEADS)
def test_request_heads(
    server: ServeProcess, request_bytes: bytes, status: int, reason: str | None
) -> None:
    reply = server.raw(request_bytes)
    assert reply.status == status, reply.body
    if reason:
        assert reply.json()["reason"] == reason
        assert reply.headers["connection"] == "close"


def test_a_streamed_giant_header_is_cut_off_early(server: ServeProcess) -> None:
    worker = server.worker_pids()[0]
    before = rss_kib(worker)
    sent = 0
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
        try:
            while sent < 64 * 2**20:  # 64 MiB, unless the server stops it first
                sock.sendall(b"a" * 65536)
                sent += 65536
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            reply = read_response(sock)
        except (ConnectionError, OSError):
            reply = None
    assert sent < 8 * 2**20, f"the server read {sent} bytes of one header"
    assert reply is None or reply.status == 431  # answered, or reset before the answer
    assert rss_kib(worker) - before < 16 * 1024
    refused = [x for x in server.log_lines() if x.get("event") == "request-refused"]
    assert any(x["reason"] == "HeadersTooLarge" for x in refused)


@pytest.mark.parametrize(
    ("part", "message"),
    [
        ("head", "request head not received within 1s"),
        ("body", "request body not received within 1s"),
    ],
)
def test_a_half_sent_request_gets_408(server: ServeProcess, part: str, message: str) -> None:
    if part == "head":
        request_bytes = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    else:  # authorized, so the app waits for the body (401 would answer at once)
        request_bytes = (
            f"POST {WORKER_PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.token}"
            "\r\nContent-Type: application/yaml\r\nContent-Length: 100\r\n\r\n0123456789"
        ).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        started = time.monotonic()
        sock.sendall(request_bytes)
        reply = read_response(sock)
        waited = time.monotonic() - started
        assert sock.recv(1) == b""  # and closed
    assert (reply.status, reply.json()["reason"], reply.json()["message"]) == (
        408,
        "RequestTimeout",
        message,
    )
    assert reply.json()["terminal"] is False
    assert 0.9 < waited < 5


def test_a_silent_connection_is_closed_without_an_answer(server: ServeProcess) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        started = time.monotonic()
        assert sock.recv(1) == b""
        assert 0.9 < time.monotonic() - started < 5


def test_an_early_answer_is_not_followed_by_a_408(server: ServeProcess) -> None:
    # No token: 401 at once, before the body. The body never comes: closed, nothing more.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            f"POST {WORKER_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/yaml\r\n"
            "Content-Length: 100\r\n\r\n0123456789".encode()
        )
        assert read_response(sock).status == 401
        assert sock.recv(1) == b""


def test_keep_alive_serves_several_requests(server: ServeProcess) -> None:
    conn = server.connection()
    try:
        for _ in range(3):
            assert server.request("GET", "/healthz", conn=conn).status == 200
            time.sleep(0.4)  # idle between requests is the keep-alive timer's business
    finally:
        conn.close()


def test_a_flood_of_half_sent_requests_leaves_healthz_reachable(server: ServeProcess) -> None:
    flood = []
    try:
        for _ in range(60):  # three times the cap of 20
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            flood.append(sock)
        assert server.request("GET", "/healthz").status == 200
        # The oldest were dropped to make room: closed without an answer.
        assert flood[0].recv(1) == b""
    finally:
        for sock in flood:
            sock.close()
    assert [x for x in server.log_lines() if x.get("event") == "connection-evicted"]


def test_limits_are_checked_on_the_command_line(tmp_path: Path) -> None:
    from test_serve import _serve_cli

    token = tmp_path / "token"
    token.write_text("a-token-long-enough-to-pass\n")
    for flag, value, why in [
        ("--header-timeout", "0", "--header-timeout must be 0 < SECONDS <= 3600 (got 0.0)"),
        ("--body-timeout", "7200", "--body-timeout must be 0 < SECONDS <= 3600 (got 7200.0)"),
        ("--max-connections", "0", "--max-connections must be 1..100000 (got 0)"),
    ]:
        result = _serve_cli("--token-file", str(token), flag, value)
        assert result.returncode == 2 and result.stderr.strip().endswith(why), result.stderr
