"""Cluster CAs and the service-account key pair, in the shapes kubeadm and Cluster API use.

A control-plane Machine needs the cluster CA, the etcd CA, the front-proxy CA and the
service-account key pair under ``/etc/kubernetes/pki`` before ``kubeadm init``/``join`` runs,
and every joining node pins the cluster CA by the SHA-256 of its SubjectPublicKeyInfo. When
the input carries no ``<cluster>-ca`` (etc.) Secrets we generate the set here, as CABPK does
for standalone control planes, and hand them back as CAPI-convention Secrets so later joins
pin the same CA.

Key algorithm: RSA-2048 for everything. It is kubeadm's default ``encryptionAlgorithm``, the
only choice v1beta3 knows, and what CAPI's own generator uses, so certificates we make are
indistinguishable from theirs. ECDSA-P256 is ~1000x faster to generate, but RSA-2048 costs
~50 ms per key here (~0.2-0.5 s for the four keys) and only once per cluster, never per
Machine, so compatibility wins. The service-account key must be RSA anyway (kubeadm's
``sa.key``; CAPI's ``<cluster>-sa`` Secret holds its PKIX public key in ``tls.crt``).

Private keys are written as PKCS#1 ``RSA PRIVATE KEY`` PEM, as kubeadm and CAPI do.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

KINDS = ("ca", "etcd", "proxy", "sa")
"""The four pairs a control plane needs, in the order CAPI lists them."""

SECRET_SUFFIXES = {"ca": "ca", "etcd": "etcd", "proxy": "proxy", "sa": "sa"}
"""kind -> suffix of the management-cluster Secret ``<cluster>-<suffix>`` holding it."""

CA_COMMON_NAMES = {"ca": "kubernetes", "etcd": "etcd-ca", "proxy": "front-proxy-ca"}
"""kubeadm's CA subjects (``certs.KubeadmCertRootCA`` etc.)."""

CA_VALIDITY = timedelta(hours=87600)
"""kubeadm's ``caCertificateValidityPeriod`` default: 10 years."""

_BACKDATE = timedelta(minutes=5)
"""kubeadm backdates NotBefore a little so a node with a slightly slow clock accepts the CA."""

_RSA_BITS = 2048
PKI_DIR = "/etc/kubernetes/pki"  # kubeadm's default certificatesDir

# kind -> (certificate path, key path) under /etc/kubernetes/pki, as kubeadm expects them.
_FILES = {
    "ca": ("ca.crt", "ca.key"),
    "etcd": ("etcd/ca.crt", "etcd/ca.key"),
    "proxy": ("front-proxy-ca.crt", "front-proxy-ca.key"),
    "sa": ("sa.pub", "sa.key"),
}


@dataclass(frozen=True)
class KeyPair:
    """One PEM pair. For ``sa``, ``cert_pem`` holds the PUBLIC KEY PEM (as CAPI's Secret)."""

    cert_pem: bytes
    key_pem: bytes

    def __repr__(self) -> str:  # keep private keys out of logs and tracebacks
        return f"KeyPair(cert_pem=<{len(self.cert_pem)} bytes>, key_pem=<redacted>)"


def _new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=_RSA_BITS)


def _key_pem(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _self_signed_ca(common_name: str, key: rsa.RSAPrivateKey, now: datetime) -> x509.Certificate:
    """A CA certificate with the extensions kubeadm's ``NewSelfSignedCACert`` gives it."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    public = key.public_key()
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=True,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )


def generate_cluster_pki(cluster_name: str, now: datetime | None = None) -> dict[str, KeyPair]:
    """Generate the cluster CA, etcd CA, front-proxy CA and SA key pair (keys of ``KINDS``).

    ``cluster_name`` is not put in the certificates (kubeadm's CA subjects are fixed names);
    it is taken so callers cannot forget which cluster a set belongs to, and is checked.
    ``now`` pins the validity window (tests, reproducible output); it defaults to the clock,
    and a naive ``now`` is taken to be UTC.
    """
    if not cluster_name:
        raise ValueError("cluster name is empty")
    now = now or datetime.now(UTC)
    now = now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)
    pairs: dict[str, KeyPair] = {}
    for kind, common_name in CA_COMMON_NAMES.items():
        key = _new_key()
        cert = _self_signed_ca(common_name, key, now)
        pairs[kind] = KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))
    sa_key = _new_key()
    sa_pub = sa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    pairs["sa"] = KeyPair(sa_pub, _key_pem(sa_key))
    return pairs


def _as_bytes(pem: bytes | str) -> bytes:
    """PEM from a decoded Secret is bytes; accept text too (stringData, files)."""
    return pem.encode("utf-8", "replace") if isinstance(pem, str) else pem


def _load_cert(cert_pem: bytes | str) -> x509.Certificate:
    cert_pem = _as_bytes(cert_pem)
    if not cert_pem or b"-----BEGIN CERTIFICATE-----" not in cert_pem:
        raise ValueError("not a PEM certificate (no BEGIN CERTIFICATE block)")
    try:
        return x509.load_pem_x509_certificate(cert_pem)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise ValueError(f"PEM certificate does not parse ({_short(exc)})") from None


def _short(exc: Exception) -> str:
    """The first line of a library error, short: its details never carry key material."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:120]


def spki_sha256(cert_pem: bytes | str) -> str:
    """kubeadm's ``caCertHashes`` entry for a CA: ``sha256:`` + hex SHA-256 of its DER SPKI."""
    cert = _load_cert(cert_pem)
    spki = cert.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def _spki_der(public_key: Any) -> bytes:
    der: bytes = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return der


def _load_key(key_pem: bytes) -> Any:
    """An unencrypted PEM private key, or ValueError with a short reason."""
    if not key_pem or b"PRIVATE KEY-----" not in key_pem:
        raise ValueError("not a PEM private key (no BEGIN ... PRIVATE KEY block)")
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except TypeError:
        raise ValueError("private key is encrypted; an unencrypted PEM key is needed") from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise ValueError(f"PEM private key does not parse ({_short(exc)})") from None
    return key


def _load_ca(cert_pem: bytes) -> x509.Certificate:
    """A certificate that is a CA (BasicConstraints CA:TRUE), or ValueError."""
    cert = _load_cert(cert_pem)
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    if not is_ca:
        raise ValueError("certificate is not a CA (BasicConstraints CA:TRUE missing)")
    return cert


def load_pair(cert_pem: bytes | str, key_pem: bytes | str, kind: str) -> KeyPair:
    """Validate a pair read from a ``<cluster>-<suffix>`` Secret and return it unchanged.

    For CA kinds the certificate must parse, be a CA, and belong to the private key; for
    ``sa`` ``cert_pem`` is the public key PEM and must belong to the RSA private key.
    Raises ValueError with a short reason (the caller adds the object and field). Text PEM
    is accepted and returned as bytes.
    """
    cert_pem, key_pem = _as_bytes(cert_pem), _as_bytes(key_pem)
    if kind not in KINDS:
        raise ValueError(f"unknown key pair kind {kind!r} (expected one of {', '.join(KINDS)})")
    key = _load_key(key_pem)

    if kind == "sa":
        if not isinstance(key, rsa.RSAPrivateKey):
            raise ValueError("service-account key must be RSA (kubeadm's sa.key)")
        if not cert_pem or b"-----BEGIN PUBLIC KEY-----" not in cert_pem:
            raise ValueError("service-account tls.crt must be a PEM PUBLIC KEY")
        try:
            public = serialization.load_pem_public_key(cert_pem)
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise ValueError(f"PEM public key does not parse ({_short(exc)})") from None
        if _spki_der(public) != _spki_der(key.public_key()):
            raise ValueError("public key does not match the private key")
        return KeyPair(cert_pem, key_pem)

    cert = _load_ca(cert_pem)
    if _spki_der(cert.public_key()) != _spki_der(key.public_key()):
        raise ValueError("certificate does not match the private key")
    return KeyPair(cert_pem, key_pem)


def load_client_pair(cert_pem: bytes | str, key_pem: bytes | str) -> KeyPair:
    """Validate a client certificate and its key (an external etcd's apiserver client pair):
    both parse and belong together. Raises ValueError with a short reason."""
    cert_pem, key_pem = _as_bytes(cert_pem), _as_bytes(key_pem)
    key = _load_key(key_pem)
    if _spki_der(_load_cert(cert_pem).public_key()) != _spki_der(key.public_key()):
        raise ValueError("certificate does not match the private key")
    return KeyPair(cert_pem, key_pem)


def check_ca_cert(cert_pem: bytes | str) -> bytes:
    """A CA certificate alone (an external etcd's CA: its key stays with etcd)."""
    cert_pem = _as_bytes(cert_pem)
    _load_ca(cert_pem)
    return cert_pem


def _require(pairs: dict[str, KeyPair]) -> None:
    missing = [kind for kind in KINDS if kind not in pairs]
    if missing:
        raise ValueError(f"missing key pairs: {', '.join(missing)}")


def pki_files(
    pairs: dict[str, KeyPair], directory: str = PKI_DIR, kinds: tuple[str, ...] = KINDS
) -> list[dict[str, str]]:
    """cloud-init ``write_files`` entries under ``directory`` (the ClusterConfiguration's
    certificatesDir, where kubeadm looks for the CAs): certs 0640, keys 0600.

    ``kinds`` leaves out ``etcd`` for an external etcd, whose CA key nodesmith never writes.
    """
    missing = [kind for kind in kinds if kind not in pairs]
    if missing:
        raise ValueError(f"missing key pairs: {', '.join(missing)}")
    files: list[dict[str, str]] = []
    for kind in kinds:
        cert_name, key_name = _FILES[kind]
        for name, data, mode in (
            (cert_name, pairs[kind].cert_pem, "0640"),
            (key_name, pairs[kind].key_pem, "0600"),
        ):
            files.append(
                {
                    "path": f"{directory}/{name}",
                    "owner": "root:root",
                    "permissions": mode,
                    "content": data.decode("ascii"),
                }
            )
    return files


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def pki_secrets(
    cluster_name: str, namespace: str, pairs: dict[str, KeyPair]
) -> list[dict[str, Any]]:
    """The CAPI-convention Secrets ``<cluster>-ca``, ``-etcd``, ``-proxy``, ``-sa``."""
    _require(pairs)
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": f"{cluster_name}-{SECRET_SUFFIXES[kind]}",
                "namespace": namespace,
                "labels": {"cluster.x-k8s.io/cluster-name": cluster_name},
            },
            "type": "cluster.x-k8s.io/secret",
            "data": {"tls.crt": _b64(pairs[kind].cert_pem), "tls.key": _b64(pairs[kind].key_pem)},
        }
        for kind in KINDS
    ]


__all__ = [
    "CA_COMMON_NAMES",
    "CA_VALIDITY",
    "KINDS",
    "SECRET_SUFFIXES",
    "KeyPair",
    "check_ca_cert",
    "generate_cluster_pki",
    "load_client_pair",
    "load_pair",
    "pki_files",
    "pki_secrets",
    "spki_sha256",
]
