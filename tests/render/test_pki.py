"""The generated cluster PKI is what kubeadm expects, and bad pairs are refused."""

from __future__ import annotations

import base64
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from render_helpers import openssl_spki_hash

from bootstrap.render import pki

NOW = datetime(2026, 12, 2, 18, 0, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def pairs() -> dict[str, pki.KeyPair]:
    return pki.generate_cluster_pki("c1", now=NOW)


@pytest.fixture(scope="module")
def other() -> dict[str, pki.KeyPair]:
    return pki.generate_cluster_pki("c2", now=NOW)


def test_generates_the_four_pairs(pairs: dict[str, pki.KeyPair]) -> None:
    assert set(pairs) == {"ca", "etcd", "proxy", "sa"}
    keys = {kind: serialization.load_pem_private_key(p.key_pem, None) for kind, p in pairs.items()}
    for kind, key in keys.items():
        assert isinstance(key, rsa.RSAPrivateKey), kind
        assert key.key_size == 2048
        assert pairs[kind].key_pem.startswith(b"-----BEGIN RSA PRIVATE KEY-----")
    # four distinct keys
    assert len({p.key_pem for p in pairs.values()}) == 4


@pytest.mark.parametrize(
    ("kind", "cn"), [("ca", "kubernetes"), ("etcd", "etcd-ca"), ("proxy", "front-proxy-ca")]
)
def test_ca_certificates_look_like_kubeadms(
    pairs: dict[str, pki.KeyPair], kind: str, cn: str, tmp_path: Path
) -> None:
    cert = x509.load_pem_x509_certificate(pairs[kind].cert_pem)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == cn
    assert cert.issuer == cert.subject
    cert.verify_directly_issued_by(cert)  # self-signed, signature valid

    bc = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and bc.value.ca
    ku = cert.extensions.get_extension_for_class(x509.KeyUsage)
    assert ku.critical
    assert ku.value.digital_signature and ku.value.key_encipherment and ku.value.key_cert_sign
    assert not ku.value.crl_sign
    ski = cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    assert ski.value == x509.SubjectKeyIdentifier.from_public_key(cert.public_key())

    assert cert.not_valid_before_utc <= NOW < cert.not_valid_after_utc
    assert cert.not_valid_after_utc - NOW == timedelta(hours=87600)

    # openssl agrees that it is a usable CA
    path = tmp_path / "ca.crt"
    path.write_bytes(pairs[kind].cert_pem)
    verify = subprocess.run(
        ["openssl", "verify", "-CAfile", str(path), str(path)], capture_output=True, text=True
    )
    assert verify.returncode == 0, verify.stderr


def test_sa_pair_is_a_public_key_and_its_private_key(pairs: dict[str, pki.KeyPair]) -> None:
    sa = pairs["sa"]
    assert sa.cert_pem.startswith(b"-----BEGIN PUBLIC KEY-----")
    public = serialization.load_pem_public_key(sa.cert_pem)
    key = serialization.load_pem_private_key(sa.key_pem, None)
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert public.public_bytes(*fmt) == key.public_key().public_bytes(*fmt)


@pytest.mark.parametrize("kind", ["ca", "etcd", "proxy"])
def test_spki_hash_matches_openssl(pairs: dict[str, pki.KeyPair], kind: str) -> None:
    got = pki.spki_sha256(pairs[kind].cert_pem)
    assert got == openssl_spki_hash(pairs[kind].cert_pem)
    assert len(got) == len("sha256:") + 64


def test_spki_hash_differs_between_cas(pairs: dict[str, pki.KeyPair]) -> None:
    assert pki.spki_sha256(pairs["ca"].cert_pem) != pki.spki_sha256(pairs["etcd"].cert_pem)


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        b"hello",
        b"-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n",
        b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    ],
)
def test_spki_hash_refuses_bad_pem(bad: bytes) -> None:
    with pytest.raises(ValueError, match=r"certificate"):
        pki.spki_sha256(bad)


def test_spki_hash_refuses_a_private_key(pairs: dict[str, pki.KeyPair]) -> None:
    with pytest.raises(ValueError):
        pki.spki_sha256(pairs["ca"].key_pem)


@pytest.mark.parametrize("kind", ["ca", "etcd", "proxy", "sa"])
def test_load_pair_accepts_generated_pairs(pairs: dict[str, pki.KeyPair], kind: str) -> None:
    p = pairs[kind]
    assert pki.load_pair(p.cert_pem, p.key_pem, kind) == p


def test_text_pem_is_accepted(pairs: dict[str, pki.KeyPair]) -> None:
    ca = pairs["ca"]
    assert pki.load_pair(ca.cert_pem.decode(), ca.key_pem.decode(), "ca") == ca
    assert pki.spki_sha256(ca.cert_pem.decode()) == pki.spki_sha256(ca.cert_pem)


def test_load_pair_refuses_key_of_another_ca(pairs: dict[str, pki.KeyPair]) -> None:
    with pytest.raises(ValueError, match="does not match"):
        pki.load_pair(pairs["ca"].cert_pem, pairs["etcd"].key_pem, "ca")


def test_load_pair_refuses_sa_public_key_of_another_cluster(
    pairs: dict[str, pki.KeyPair], other: dict[str, pki.KeyPair]
) -> None:
    with pytest.raises(ValueError, match="does not match"):
        pki.load_pair(other["sa"].cert_pem, pairs["sa"].key_pem, "sa")


def test_load_pair_refuses_a_certificate_as_sa_public_key(pairs: dict[str, pki.KeyPair]) -> None:
    with pytest.raises(ValueError, match="PUBLIC KEY"):
        pki.load_pair(pairs["ca"].cert_pem, pairs["ca"].key_pem, "sa")


def test_load_pair_refuses_a_leaf_certificate(pairs: dict[str, pki.KeyPair]) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "leaf")])
    leaf = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(NOW)
        .not_valid_after(NOW + timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    with pytest.raises(ValueError, match="not a CA"):
        pki.load_pair(leaf.public_bytes(serialization.Encoding.PEM), key_pem, "ca")


def test_load_pair_accepts_pkcs8_and_ecdsa_ca() -> None:
    """A user-supplied CA may be ECDSA (kubeadm's ECDSA-P256) with a PKCS#8 key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kubernetes")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(7)
        .not_valid_before(NOW)
        .not_valid_after(NOW + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    assert pki.load_pair(cert_pem, key_pem, "ca").cert_pem == cert_pem
    assert pki.spki_sha256(cert_pem) == openssl_spki_hash(cert_pem)


def test_load_pair_refuses_encrypted_key(pairs: dict[str, pki.KeyPair]) -> None:
    key = serialization.load_pem_private_key(pairs["ca"].key_pem, None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"pw"),
    )
    with pytest.raises(ValueError, match="encrypted"):
        pki.load_pair(pairs["ca"].cert_pem, encrypted, "ca")


@pytest.mark.parametrize(
    "key_pem", [b"", b"junk", b"-----BEGIN PRIVATE KEY-----\nAA\n-----END PRIVATE KEY-----\n"]
)
def test_load_pair_refuses_bad_key(pairs: dict[str, pki.KeyPair], key_pem: bytes) -> None:
    with pytest.raises(ValueError, match="private key"):
        pki.load_pair(pairs["ca"].cert_pem, key_pem, "ca")


def test_load_pair_refuses_unknown_kind(pairs: dict[str, pki.KeyPair]) -> None:
    with pytest.raises(ValueError, match="kind"):
        pki.load_pair(pairs["ca"].cert_pem, pairs["ca"].key_pem, "kubelet")


def test_pki_files(pairs: dict[str, pki.KeyPair]) -> None:
    files = pki.pki_files(pairs)
    by_path = {f["path"]: f for f in files}
    expected = {
        "/etc/kubernetes/pki/ca.crt": ("ca", "cert_pem", "0640"),
        "/etc/kubernetes/pki/ca.key": ("ca", "key_pem", "0600"),
        "/etc/kubernetes/pki/etcd/ca.crt": ("etcd", "cert_pem", "0640"),
        "/etc/kubernetes/pki/etcd/ca.key": ("etcd", "key_pem", "0600"),
        "/etc/kubernetes/pki/front-proxy-ca.crt": ("proxy", "cert_pem", "0640"),
        "/etc/kubernetes/pki/front-proxy-ca.key": ("proxy", "key_pem", "0600"),
        "/etc/kubernetes/pki/sa.pub": ("sa", "cert_pem", "0640"),
        "/etc/kubernetes/pki/sa.key": ("sa", "key_pem", "0600"),
    }
    assert len(files) == 8 and set(by_path) == set(expected)
    for path, (kind, attr, mode) in expected.items():
        entry = by_path[path]
        assert entry["owner"] == "root:root"
        assert entry["permissions"] == mode
        assert entry["content"].encode() == getattr(pairs[kind], attr)


def test_pki_secrets_round_trip(pairs: dict[str, pki.KeyPair]) -> None:
    secrets = pki.pki_secrets("c1", "ns1", pairs)
    assert [s["metadata"]["name"] for s in secrets] == ["c1-ca", "c1-etcd", "c1-proxy", "c1-sa"]
    for secret, kind in zip(secrets, pki.KINDS, strict=True):
        assert secret["apiVersion"] == "v1" and secret["kind"] == "Secret"
        assert secret["type"] == "cluster.x-k8s.io/secret"
        assert secret["metadata"]["namespace"] == "ns1"
        assert secret["metadata"]["labels"] == {"cluster.x-k8s.io/cluster-name": "c1"}
        assert secret["metadata"]["name"] == f"c1-{pki.SECRET_SUFFIXES[kind]}"
        crt = base64.b64decode(secret["data"]["tls.crt"], validate=True)
        key = base64.b64decode(secret["data"]["tls.key"], validate=True)
        assert pki.load_pair(crt, key, kind) == pairs[kind]


def test_incomplete_sets_are_refused(pairs: dict[str, pki.KeyPair]) -> None:
    partial = {k: v for k, v in pairs.items() if k != "proxy"}
    with pytest.raises(ValueError, match="proxy"):
        pki.pki_files(partial)
    with pytest.raises(ValueError, match="proxy"):
        pki.pki_secrets("c1", "ns1", partial)


def test_repr_hides_private_key(pairs: dict[str, pki.KeyPair]) -> None:
    text = repr(pairs["ca"])
    assert "PRIVATE" not in text and "redacted" in text


def test_default_now_is_the_clock() -> None:
    before = datetime.now(UTC) - timedelta(seconds=1)
    cert = x509.load_pem_x509_certificate(pki.generate_cluster_pki("c3")["ca"].cert_pem)
    assert cert.not_valid_after_utc - before >= timedelta(hours=87600) - timedelta(seconds=2)
    assert cert.not_valid_before_utc <= datetime.now(UTC)


def test_empty_cluster_name_is_refused() -> None:
    with pytest.raises(ValueError, match="cluster name"):
        pki.generate_cluster_pki("")
