"""Load-test ``nodesmith serve`` over loopback: req/s and p50/p99 latency per concurrency.

Starts a real server (``--workers``, default the core count) on a free 127.0.0.1 port unless
``--url`` points at one, then for each concurrency level runs that many keep-alive clients for
``--seconds``, each POSTing the same bundle and checking every answer is a 200. The client is a
minimal asyncio HTTP/1.1 loop so that it leaves the CPU to the server (both share the machine).

    .venv/bin/python bench/serve.py                       # worker-join bundle, 16 and 64 clients
    .venv/bin/python bench/serve.py --bundle FILE --machine NS/NAME --concurrency 16,64
    .venv/bin/python bench/serve.py --machines 20000     # a new Machine of one cluster each time
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BUNDLE = ROOT / "tests" / "data" / "serve" / "worker.yaml"
DEFAULT_MACHINE = "default/worker-0"


async def _client(
    host: str,
    port: int,
    requests: list[bytes],
    stop: float,
    latencies: list[float],
    errors: list[str],
    expect: int = 200,
    first: int = 0,
) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    turn = first
    try:
        while time.perf_counter() < stop:
            request = requests[turn % len(requests)]
            turn += 1
            start = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - start)
            if status != expect:
                errors.append(str(status))
    finally:
        writer.close()


async def _run(
    host: str, port: int, request: list[bytes], clients: int, seconds: float, expect: int
) -> dict[str, float]:
    latencies: list[float] = []
    errors: list[str] = []
    share = max(1, len(request) // clients)  # each client its own run of Machines
    # Warm up the connections and the workers before timing.
    warm = time.perf_counter() + 0.5
    await asyncio.gather(
        *(_client(host, port, request, warm, [], [], expect, i * share) for i in range(clients))
    )
    start = time.perf_counter()
    stop = start + seconds
    await asyncio.gather(
        *(
            _client(host, port, request, stop, latencies, errors, expect, i * share)
            for i in range(clients)
        )
    )
    elapsed = time.perf_counter() - start
    latencies.sort()
    q = statistics.quantiles(latencies, n=100, method="inclusive")
    return {
        "clients": clients,
        "requests": len(latencies),
        "errors": len(errors),
        "rps": len(latencies) / elapsed,
        "p50_ms": q[49] * 1000,
        "p99_ms": q[98] * 1000,
        "max_ms": latencies[-1] * 1000,
    }


def _cpu_seconds(pids: list[int]) -> float:
    """utime + stime of these processes, from /proc (Linux)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _server_pids(proc: subprocess.Popen[bytes]) -> list[int]:
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    return [proc.pid, *map(int, children)]


def _request(path: str, host: str, token: str, body: bytes, content_type: str) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _start_server(workers: int, token_file: Path, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    log_fh = log.open("wb")
    cmd = [sys.executable, "-m", "bootstrap.cli.main", "serve", "--listen", "127.0.0.1:0",
           "--token-file", str(token_file), "--workers", str(workers)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log_fh, cwd=ROOT)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if '"event":"listening"' in line:
                port = int(json.loads(line)["address"].rsplit(":", 1)[1])
                time.sleep(0.5)  # let every worker reach accept()
                return proc, port
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"server did not start; see {log}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="an already running server, e.g. http://127.0.0.1:8080")
    ap.add_argument("--token", default="bench-token", help="bearer token (with --url)")
    ap.add_argument("--bundle", type=Path, default=DEFAULT_BUNDLE)
    ap.add_argument("--machine", default=DEFAULT_MACHINE)
    ap.add_argument("--json-body", action="store_true", help="send the bundle as JSON")
    ap.add_argument(
        "--machines",
        type=int,
        default=1,
        metavar="N",
        help="cycle through N Machines of the same cluster (worker-0 renamed worker-0..N-1 in "
        "the Machine and its KubeadmConfig; Cluster and CA Secret unchanged), as a controller "
        "reconciling N Machines sends them",
    )
    ap.add_argument("--concurrency", default="16,64")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument(
        "--overhead",
        action="store_true",
        help="send a wrong token: every request is a 401 answered before the body is read, "
        "which measures the service's own cost without parse and render",
    )
    args = ap.parse_args()

    content_type = "application/json" if args.json_body else "application/yaml"
    namespace, _, name = args.machine.rpartition("/")
    variants = []  # (path, body) per Machine
    for i in range(args.machines):
        own = name if args.machines == 1 else f"{name.rsplit('-', 1)[0]}-{i}"
        body = args.bundle.read_bytes().replace(name.encode(), own.encode())
        if args.json_body:
            import yaml

            body = json.dumps(list(yaml.safe_load_all(body))).encode()
        variants.append((f"/v1/machines/{namespace or 'default'}/{own}/userdata", body))

    proc = None
    with tempfile.TemporaryDirectory() as tmp:
        if args.url:
            parts = urlsplit(args.url)
            host, port, token = parts.hostname or "127.0.0.1", parts.port or 80, args.token
        else:
            token = "bench-" + os.urandom(12).hex()
            token_file = Path(tmp) / "token"
            token_file.write_text(token + "\n")
            token_file.chmod(0o600)
            proc, port = _start_server(args.workers, token_file, Path(tmp) / "serve.log")
            host = "127.0.0.1"
        if args.overhead:
            token = "wrong-" + token
        requests = [_request(p, f"{host}:{port}", token, b, content_type) for p, b in variants]
        try:
            load = os.getloadavg()
            print(
                f"nodesmith serve bench: {args.bundle.name} as {content_type}, "
                f"{len(variants[0][1])} B body, {args.machines} Machine(s), "
                f"workers={args.workers if proc else '?'}, "
                f"cpus={os.cpu_count()}, loadavg before={load[0]:.2f}"
            )
            pids = _server_pids(proc) if proc else []
            for clients in (int(c) for c in args.concurrency.split(",")):
                server_cpu, client_cpu = _cpu_seconds(pids), time.process_time()
                expect = 401 if args.overhead else 200
                r = asyncio.run(_run(host, port, requests, clients, args.seconds, expect))
                server_cpu = _cpu_seconds(pids) - server_cpu
                client_cpu = time.process_time() - client_cpu
                print(
                    f"clients={r['clients']:>3}  req/s={r['rps']:8.0f}  p50={r['p50_ms']:6.2f} ms"
                    f"  p99={r['p99_ms']:6.2f} ms  max={r['max_ms']:6.1f} ms"
                    f"  requests={r['requests']}  unexpected={r['errors']}"
                )
                if pids:
                    # The warm-up half second is in the CPU totals but not in the count.
                    n = r["requests"] * (1 + 0.5 / args.seconds)
                    per_server, per_client = server_cpu / n, client_cpu / n
                    cpus = os.cpu_count() or 1
                    print(
                        f"             CPU per request: server {per_server * 1000:.3f} ms, "
                        f"client {per_client * 1000:.3f} ms; an idle {cpus}-core machine "
                        f"could serve ~{cpus / (per_server + per_client):.0f} req/s"
                    )
            print(f"loadavg after={os.getloadavg()[0]:.2f}")
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=15)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
