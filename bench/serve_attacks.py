"""The hostile clients of issue 14, against a real ``nodesmith serve`` with its default limits.

Prints, per attack, what the server answered and the worker's peak RSS (VmHWM) after it:

* two connections streaming 300 MB header values each;
* a gzip bomb: a 1 MiB-class body whose file content is gzip+base64 of 768 MiB of zeros;
* a half-sent request head, and a half-sent body: how long the server keeps each open;
* 150 half-sent requests at once, then ``/healthz``.

    .venv/bin/python bench/serve_attacks.py
"""

from __future__ import annotations

import base64
import os
import socket
import sys
import tempfile
import time
import zlib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from serve_helpers import WORKER_PATH, WORKER_YAML, ServeProcess, read_response  # noqa: E402


def hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM")


def giant_header(port: int, size: int) -> str:
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
        try:
            while sent < size:
                sock.sendall(b"a" * 65536)
                sent += 65536
        except OSError:
            pass
        try:
            answer = f"{read_response(sock).status}"
        except OSError:
            answer = "reset"
    return f"{answer} after {sent / 2**20:.1f} MiB sent"


def gzip_bomb_body() -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = b"".join([packer.compress(bytes(2**20)) for _ in range(768)] + [packer.flush()])
    docs = list(yaml.safe_load_all(WORKER_YAML))
    for doc in docs:
        if doc["kind"] == "KubeadmConfig":
            doc["spec"]["files"] = [{"path": "/etc/zeros", "encoding": "gzip+base64",
                                     "content": base64.b64encode(bomb).decode()}]  # fmt: skip
    return yaml.safe_dump_all(docs).encode()


def held_open(port: int, data: bytes) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        started = time.monotonic()
        sock.sendall(data)
        try:
            status = read_response(sock).status
        except OSError:
            status = 0
        while sock.recv(65536):
            pass
        return f"{status or 'closed'} after {time.monotonic() - started:.1f} s"


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        srv = ServeProcess(Path(tmp), extra=["--max-body-bytes", str(2 * 2**20)]).start()
        worker = srv.worker_pids()[0]
        try:
            print(f"worker RSS at start: {hwm_kib(worker) / 1024:.0f} MiB")
            for _ in range(2):
                print(f"300 MB header: {giant_header(srv.port, 300 * 2**20)}")
            print(f"  peak RSS: {hwm_kib(worker) / 1024:.0f} MiB")
            body = gzip_bomb_body()
            reply = srv.post(body)
            peak = hwm_kib(worker) / 1024
            print(f"gzip bomb ({len(body) / 2**20:.2f} MiB body): {reply.status} "
                  f"{reply.json()['reason']}; peak RSS: {peak:.0f} MiB")  # fmt: skip
            head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
            print(f"half-sent head: {held_open(srv.port, head)}")
            body_head = (
                f"POST {WORKER_PATH} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {srv.token}\r\n"
                "Content-Type: application/yaml\r\nContent-Length: 100\r\n\r\n0123"
            ).encode()
            print(f"half-sent body: {held_open(srv.port, body_head)}")
            flood = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(150)]
            for sock in flood:
                sock.sendall(head)
            print(f"150 half-sent requests, then /healthz: {srv.request('GET', '/healthz').status}")
            for sock in flood:
                sock.close()
            lines = srv.log_lines()
            print(f"5xx: {sum(1 for x in lines if str(x.get('status', '')).startswith('5'))}, "
                  f"tracebacks: {srv.log_text().count('Traceback')}")  # fmt: skip
        finally:
            srv.stop()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
