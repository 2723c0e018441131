"""A real kube-apiserver on 127.0.0.1, from the project's own Kubernetes build, with Debian's etcd.

The controller's tests and benchmark need a management cluster; the real thing exists here
(``nodesmith kubernetes build`` gives kube-apiserver v1.20.2, Debian gives etcd 3.4), so they
get one instead of a fake. Each server has its own CA and serving certificate, a static token
file for its users (an admin in ``system:masters`` and any identity a test wants to act as,
such as the controller's ServiceAccount user, which RBAC then judges for real) and RBAC
authorization. Two servers can share one etcd under different prefixes: the second plays a
workload cluster.

Nothing listens beyond loopback; etcd speaks plain HTTP there, which is a test setting.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from ipaddress import IPv4Address
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from bootstrap.errors import TransientError
from bootstrap.fsutil import atomic_write
from bootstrap.hostutil import free_port

ADMIN = "nodesmith-admin"


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def loopback_certificates(directory: Path) -> None:
    """CA, a serving certificate for 127.0.0.1/localhost, and the service-account key."""
    now = datetime.now(UTC)
    ca_key = _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nodesmith-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = _key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(IPv4Address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    sa = _key()
    files = {
        "ca.crt": ca.public_bytes(serialization.Encoding.PEM),
        "apiserver.crt": cert.public_bytes(serialization.Encoding.PEM),
        "apiserver.key": _pem_key(key),
        "sa.key": _pem_key(sa),
        "sa.pub": sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    }
    for name, data in files.items():
        atomic_write(directory / name, data, mode=0o600)


def _wait_http(url: str, token: str | None, cafile: Path | None, deadline: float) -> None:
    context = ssl.create_default_context(cafile=str(cafile)) if cafile else None
    last = ""
    while time.monotonic() < deadline:
        request = urllib.request.Request(url)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=2, context=context) as response:
                if response.status == 200:
                    return
        except OSError as exc:  # URLError, connection refused, 5xx while starting
            last = str(exc)
        time.sleep(0.2)
    raise TransientError(f"{url} did not become ready: {last}", reason="APIServerNotReady")


@dataclass
class Etcd:
    """Debian's etcd on a loopback port, its data in ``directory``."""

    directory: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        peer = free_port()
        log = (self.directory / "etcd.log").open("ab")
        self.process = subprocess.Popen(
            [
                shutil.which("etcd") or "/usr/bin/etcd",
                f"--data-dir={self.directory / 'data'}",
                f"--listen-client-urls={self.url}",
                f"--advertise-client-urls={self.url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=default=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",  # a test store: durability is not what is tested
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _wait_http(f"{self.url}/health", None, None, time.monotonic() + timeout)

    def stop(self) -> None:
        _stop(self.process)
        self.process = None


def _stop(process: subprocess.Popen[bytes] | None) -> None:
    if process is None or process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@dataclass
class APIServer:
    """kube-apiserver ``binary`` on 127.0.0.1:``port`` over ``etcd`` under ``prefix``.

    ``users`` maps a user name to its groups; each gets a random bearer token and
    :meth:`kubeconfig` writes a kubeconfig acting as it.
    """

    binary: Path
    directory: Path
    etcd: Etcd
    prefix: str = "/registry"
    users: dict[str, list[str]] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    tokens: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def _prepare(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if not (self.directory / "ca.crt").exists():
            loopback_certificates(self.directory)
        everyone = {ADMIN: ["system:masters"], **self.users}
        for user in everyone:
            self.tokens.setdefault(user, secrets.token_hex(24))
        lines = [f'{self.tokens[u]},{u},{u},"{",".join(groups)}"' for u, groups in everyone.items()]
        atomic_write(self.directory / "tokens.csv", ("\n".join(lines) + "\n").encode(), mode=0o600)

    def start(self, timeout: float = 90) -> None:
        self._prepare()
        d = self.directory
        log = (d / "kube-apiserver.log").open("ab")
        self.process = subprocess.Popen(
            [
                str(self.binary),
                f"--etcd-servers={self.etcd.url}",
                f"--etcd-prefix={self.prefix}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.port}",
                "--insecure-port=0",
                f"--tls-cert-file={d / 'apiserver.crt'}",
                f"--tls-private-key-file={d / 'apiserver.key'}",
                f"--token-auth-file={d / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={d / 'sa.pub'}",
                f"--service-account-signing-key-file={d / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/16",
                f"--cert-dir={d / 'certs'}",
                "--enable-priority-and-fairness=false",  # the benchmark's burst is wanted
                "--max-requests-inflight=2000",
                "--max-mutating-requests-inflight=1000",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        _wait_http(
            f"{self.url}/readyz", self.tokens[ADMIN], d / "ca.crt", time.monotonic() + timeout
        )

    def stop(self) -> None:
        _stop(self.process)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def kubeconfig_dict(self, user: str = ADMIN) -> dict[str, object]:
        """A kubeconfig acting as ``user``, with the server's CA inline."""
        import base64

        ca = base64.b64encode((self.directory / "ca.crt").read_bytes()).decode()
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "local", "cluster": {"server": self.url, "certificate-authority-data": ca}}
            ],
            "users": [{"name": user, "user": {"token": self.tokens[user]}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
            "current-context": "local",
        }

    def kubeconfig(self, user: str = ADMIN) -> Path:
        """Write the kubeconfig of ``user`` (mode 0600) and return its path."""
        path = self.directory / f"kubeconfig-{user.replace(':', '_')}"
        atomic_write(path, yaml.safe_dump(self.kubeconfig_dict(user)).encode(), mode=0o600)
        return path
