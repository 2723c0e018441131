"""The conversion webhook's serving certificate: read from a Secret, or made and injected.

The API server calls the webhook over TLS and trusts only the CA in each CRD's
``spec.conversion.webhook.clientConfig.caBundle``. Two ways to get there, as providers do:

* **cert-manager** (what ``clusterctl init`` installs): a ``Certificate`` writes the
  ``kubernetes.io/tls`` Secret and cert-manager's CA injector copies its CA into the CRDs
  (the ``cert-manager.io/inject-ca-from`` annotation). The controller only reads the Secret.
* **self-signed** (a cluster without cert-manager, such as an air-gapped one or the tests):
  the first replica makes a CA and a serving certificate for the webhook Service's names, keeps
  them in the same Secret (created once: a rival replica's 409 means it reads the winner's),
  and writes the CA into the CRDs itself.

A webhook without its certificate refuses to start naming the Secret: serving conversion with
nothing the API server trusts would fail every v1beta1 read and write, much later and far from
the cause.
"""

from __future__ import annotations

import base64
import ipaddress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from lightkube import ApiError

from bootstrap.controller import kube
from bootstrap.errors import TerminalError, TransientError

CRD_NAMES = (
    f"kubeadmconfigs.{kube.GROUP}",
    f"kubeadmconfigtemplates.{kube.GROUP}",
)
VALIDITY = timedelta(days=3650)


@dataclass(frozen=True)
class ServingCert:
    """PEM certificate (chain), key and the CA that signed it."""

    cert: bytes
    key: bytes
    ca: bytes


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def make(names: list[str], now: datetime | None = None) -> ServingCert:
    """A new CA and a serving certificate it signs for ``names`` (DNS names or IPs)."""
    now = now or datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "nodesmith-webhook-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName([_san(n) for n in names]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    return ServingCert(
        cert=cert.public_bytes(serialization.Encoding.PEM),
        key=_pem_key(key),
        ca=ca.public_bytes(serialization.Encoding.PEM),
    )


def _decoded(secret: kube.Obj, key: str, where: str) -> bytes:
    value = (secret.get("data") or {}).get(key)
    if not isinstance(value, str) or not value:
        raise TerminalError(
            f"has no {key}: it is not a serving certificate Secret (tls.crt, tls.key, ca.crt)",
            obj=where,
            field=f"data[{key}]",
            reason="InvalidServingCertificate",
        )
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise TerminalError(
            "is not valid base64", obj=where, field=f"data[{key}]", reason="InvalidField"
        ) from None


def _check(cert: ServingCert, where: str) -> ServingCert:
    """The pair must load and the key must be the certificate's: say so now, naming the Secret,
    not as a handshake failure of every request."""
    try:
        leaf = x509.load_pem_x509_certificate(cert.cert)
        key = serialization.load_pem_private_key(cert.key, password=None)
        x509.load_pem_x509_certificates(cert.ca)
    except ValueError as exc:
        raise TerminalError(
            f"does not hold a PEM certificate, key and CA: {exc}",
            obj=where,
            reason="InvalidServingCertificate",
        ) from None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if leaf.public_key().public_bytes(der, public) != key.public_key().public_bytes(der, public):
        raise TerminalError(
            "tls.key is not the key of tls.crt",
            obj=where,
            field="data[tls.key]",
            reason="InvalidServingCertificate",
        )
    return cert


def read(api: kube.Api, namespace: str, name: str) -> ServingCert:
    """The serving certificate in Secret ``namespace/name``; its absence is transient (cert-
    manager has not issued it yet), a malformed one terminal."""
    where = f"Secret {namespace}/{name}"
    secret = api.get(kube.Secret, name, namespace)
    if secret is None:
        raise TransientError(
            "the conversion webhook's serving certificate Secret does not exist: cert-manager "
            "writes it from the Certificate in the provider's manifests, or run the controller "
            "with --webhook-self-signed to make it",
            obj=where,
            reason="ServingCertificateMissing",
        )
    ca = (secret.get("data") or {}).get("ca.crt")
    pem = ServingCert(
        cert=_decoded(secret, "tls.crt", where),
        key=_decoded(secret, "tls.key", where),
        ca=_decoded(secret, "ca.crt", where) if ca else b"",
    )
    if not pem.ca:
        raise TerminalError(
            "has no ca.crt: the API server could not be told what to trust",
            obj=where,
            field="data[ca.crt]",
            reason="InvalidServingCertificate",
        )
    return _check(pem, where)


def ensure_self_signed(api: kube.Api, namespace: str, name: str, names: list[str]) -> ServingCert:
    """The Secret's certificate, made first if there is none (one CA for every replica)."""
    if api.get(kube.Secret, name, namespace) is None:
        made = make(names)
        secret = {
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/name": "nodesmith-controller"},
            },
            "type": "kubernetes.io/tls",
            "data": {
                "tls.crt": _b64(made.cert),
                "tls.key": _b64(made.key),
                "ca.crt": _b64(made.ca),
            },
        }
        try:
            api.create(kube.Secret, secret)
        except ApiError as exc:
            if kube.status_code(exc) != 409:  # a rival replica made it first: read theirs
                raise
    return read(api, namespace, name)


def inject(api: kube.Api, ca: bytes, crds: tuple[str, ...] = CRD_NAMES) -> int:
    """Write ``ca`` as each CRD's conversion caBundle where it differs; returns the writes."""
    bundle = _b64(ca)
    writes = 0
    for name in crds:
        crd = api.get(kube.CRD, name)
        if crd is None:
            raise TerminalError(
                "is not installed: apply the provider's manifests first",
                obj=f"CustomResourceDefinition {name}",
                reason="CRDMissing",
            )
        webhook = ((crd.get("spec") or {}).get("conversion") or {}).get("webhook") or {}
        if (webhook.get("clientConfig") or {}).get("caBundle") == bundle:
            continue
        api.merge_patch(
            kube.CRD,
            name,
            None,
            {"spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": bundle}}}}},
        )
        writes += 1
    return writes
