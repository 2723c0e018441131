"""``nodesmith serve``: the userdata HTTP service that machine controllers call.

One master process binds the listening socket, checks the token file and TLS pair, allocates
the shared metrics, then forks ``--workers`` processes that each run uvicorn (uvloop +
httptools) on the inherited socket; the kernel spreads connections between them. The master
forwards SIGHUP to every worker, and each worker reloads its own copy of the token file, so a
rotation reaches all of them. The master reloads the file too, and a worker starts with the
master's last good token set, so a worker restarted while the file is unusable serves the
tokens it had instead of crash-looping. SIGTERM/SIGINT stop the workers gracefully; a worker
that dies is started again (with a back-off, so a crash loop cannot spin); a worker whose
master dies is killed by the kernel (``PR_SET_PDEATHSIG``), so a restarted master with a
rotated token never shares the port with workers that still accept the revoked one. With
``--workers 1`` the single worker runs in the master process itself. TLS is 1.2 or 1.3, with
ECDHE key exchange and AEAD ciphers only. Each connection is held to the limits of
``bootstrap.serve.protocol`` (head size, read timeouts, connections per worker).
The command line that fills :class:`ServeConfig` lives in ``bootstrap.cli.serve``.

Example::

    nodesmith serve --listen 127.0.0.1:8080 --token-file /etc/nodesmith/token --workers 2
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import ipaddress
import os
import signal
import socket
import ssl
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bootstrap.errors import NodesmithError, UsageError, bad_usage, is_small_number
from bootstrap.log import UVICORN_LOG_CONFIG
from bootstrap.log import log_event as _log
from bootstrap.serve.auth import TokenStore

if TYPE_CHECKING:
    from bootstrap.serve.app import ServeSettings
    from bootstrap.serve.metrics import SharedMetrics
    from bootstrap.serve.protocol import Limits

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_MASTER_SIGNALS = {signal.SIGHUP, signal.SIGCHLD, *_STOP_SIGNALS}
GRACEFUL_SECONDS = 5
# TLS 1.2 suites with forward secrecy and authenticated encryption (TLS 1.3's are all AEAD):
# no RSA key exchange, no CBC, no SHA-1.
TLS_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class ServeConfig:
    """The parsed and checked command line."""

    host: str
    port: int
    token_file: str
    workers: int
    tls_cert: str | None
    tls_key: str | None
    settings: ServeSettings
    limits: Limits


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT`` -> (host, port); port 0 picks a free one."""
    host, sep, port = value.rpartition(":")
    if not sep or not is_small_number(port) or int(port) > 65535:
        raise bad_usage("--listen", value, "must be HOST:PORT", reason="InvalidListen")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host:
        raise bad_usage("--listen", value, "needs a host", reason="InvalidListen")
    return host, int(port)


def bind(host: str, port: int, count: int = 1) -> list[socket.socket]:
    """``count`` listening sockets on one address, one per worker.

    With several workers each gets its own ``SO_REUSEPORT`` socket, so the kernel spreads new
    connections evenly; one shared socket let a single worker grab a whole burst of
    keep-alive connections and doubled the tail latency at 64 clients. Port 0 picks a free
    port for the first socket and the rest join it.
    """
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        family = socket.AF_INET  # a host name; resolved by bind()
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if count > 1:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            port = sock.getsockname()[1]
            sock.listen(4096)
            sock.set_inheritable(True)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    return sockets


def check_tls(cert: str | None, key: str | None) -> None:
    """Refuse half a TLS pair or one that does not load, before any worker starts."""
    if bool(cert) != bool(key):
        raise UsageError("--tls-cert and --tls-key must be given together", reason="InvalidTLS")
    if cert and key:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            # The library's message names the problem, never the file contents.
            why = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or "invalid"
            raise UsageError(
                f"cannot load TLS certificate/key: {why}", reason="InvalidTLS"
            ) from None


def warn_if_readable(tokens: TokenStore, **where: object) -> None:
    """The token file should be private; say so at start and on every reload."""
    if tokens.world_readable():
        _log(
            "token-file-readable",
            level="warning",
            detail="token file is group/world readable",
            **where,
        )


def reload_tokens(tokens: TokenStore, **where: object) -> None:
    """SIGHUP: re-read the token file, keeping the last good set when it is unusable."""
    ok, what = tokens.reload()
    _log("token-reload", level="info" if ok else "error", ok=ok, detail=what, **where)
    warn_if_readable(tokens, **where)


def run_worker(
    index: int,
    sock: socket.socket,
    config: ServeConfig,
    metrics: SharedMetrics,
    tokens: TokenStore,
) -> int:
    """One worker: a uvicorn server on ``sock`` checking ``tokens``, reloaded on SIGHUP. A
    forked worker starts from the master's last good set and re-reads the file once, to catch
    a rotation the master has not been told about."""
    import resource

    import uvicorn

    from bootstrap.serve.app import build_app
    from bootstrap.serve.protocol import guarded

    # Room for max_connections sockets: the soft limit is often 1024, the hard one far higher.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = config.limits.max_connections + 64
    if soft != resource.RLIM_INFINITY and soft < wanted:
        new_soft = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new_soft, hard))

    # Until the loop's handler is in place a SIGHUP must not kill the worker; the tokens are
    # (re)read after the handler is installed, so no rotation can be missed in between.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    metrics.use_slot(index)
    app = build_app(tokens, metrics, config.settings)
    uv = uvicorn.Config(
        app,
        loop="none",
        http=guarded(config.limits),
        lifespan="off",
        access_log=False,
        log_level="warning",
        log_config=UVICORN_LOG_CONFIG,
        server_header=False,
        ssl_certfile=config.tls_cert,
        ssl_keyfile=config.tls_key,
        ssl_ciphers=TLS_CIPHERS,
        timeout_graceful_shutdown=GRACEFUL_SECONDS,
        timeout_keep_alive=15,
    )
    server = uvicorn.Server(uv)

    async def main() -> None:
        asyncio.get_running_loop().add_signal_handler(
            signal.SIGHUP, lambda: reload_tokens(tokens, worker=index)
        )
        if config.workers > 1:  # forked: the master read the file some time ago
            reload_tokens(tokens, worker=index)
        # Everything imported so far lives as long as the worker: keep it out of the cyclic
        # GC's scans, which otherwise show up as tail-latency spikes.
        gc.collect()
        gc.freeze()
        await server.serve(sockets=[sock])

    # uvicorn re-raises the stop signal after its graceful shutdown, to the handler that was
    # installed before it started; make that a no-op so a requested stop exits 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)

    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        asyncio.run(main())
    else:
        uvloop.run(main())
    return 0


def _die_with(master: int) -> None:
    """Have the kernel kill this worker when its master dies (even by SIGKILL)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != master:  # it died before the line above
        os._exit(1)


def _spawn(
    index: int,
    sockets: list[socket.socket],
    config: ServeConfig,
    metrics: SharedMetrics,
    tokens: TokenStore,
) -> int:
    master = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        _die_with(master)
        for other, sock in enumerate(sockets):
            if other != index:
                sock.close()
        for sig in _MASTER_SIGNALS:
            signal.signal(sig, signal.SIG_IGN if sig == signal.SIGHUP else signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _MASTER_SIGNALS)
        code = run_worker(index, sockets[index], config, metrics, tokens)
    except BaseException as exc:  # the child must never return into the master's code
        # Our own errors' messages are safe to log (they name files, never contents).
        detail = str(exc) if isinstance(exc, NodesmithError) else None
        _log("worker-failed", level="error", worker=index, error=type(exc).__name__, detail=detail)
    finally:
        os._exit(code)


def supervise(
    sockets: list[socket.socket], config: ServeConfig, metrics: SharedMetrics, tokens: TokenStore
) -> int:
    """The master: fork workers, forward SIGHUP, restart the dead, stop on SIGTERM/SIGINT.

    It reloads its own copy of the tokens on SIGHUP as the workers do, so that a worker it
    starts later inherits the last good set."""
    signal.pthread_sigmask(signal.SIG_BLOCK, _MASTER_SIGNALS)
    workers: dict[int, int] = {}  # pid -> slot
    started: dict[int, float] = {}  # slot -> start time
    for index in range(config.workers):
        workers[_spawn(index, sockets, config, metrics, tokens)] = index
        started[index] = time.monotonic()
    stopping = False
    deadline = 0.0
    while workers:
        info = signal.sigtimedwait(_MASTER_SIGNALS, 1.0)
        if info is not None and info.si_signo in _STOP_SIGNALS and not stopping:
            stopping = True
            _log("stopping", signal=signal.Signals(info.si_signo).name)
            for pid in workers:
                _kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + GRACEFUL_SECONDS + 2
        elif info is not None and info.si_signo == signal.SIGHUP and not stopping:
            reload_tokens(tokens, worker="master")
            for pid in workers:
                _kill(pid, signal.SIGHUP)
            _log("sighup-forwarded", workers=len(workers))
        while workers:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            if pid not in workers:
                continue
            index = workers.pop(pid)
            if stopping:
                continue
            _log(
                "worker-exited",
                level="error",
                worker=index,
                status=os.waitstatus_to_exitcode(status),
            )
            if time.monotonic() - started[index] < 1.0:
                time.sleep(1.0)  # crash loop: do not spin
            workers[_spawn(index, sockets, config, metrics, tokens)] = index
            started[index] = time.monotonic()
        if stopping and time.monotonic() > deadline:
            for pid in workers:
                _kill(pid, signal.SIGKILL)
    return 0


def _kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
