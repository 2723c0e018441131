"""Generate the SSH key pairs a local VM run needs: the client key and the VM's host key.

The host key is generated here and handed to cloud-init (``ssh_keys``) so that the run
knows the VM's identity before it boots and can refuse any other key: no trust on first use,
no scraping of the serial console. Both keys are fresh per boot, so two VMs never share one.
Shared by ``vm`` and ``image`` (Packer's builder VM gets a per-run key), so it lives above both.
"""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

# Host key types sshd loads by default; giving cloud-init all three means nothing is left for
# the image's first-boot ``ssh-keygen -A`` (an RSA keygen takes ~30 s under TCG).
HOST_KEY_TYPES = ("ed25519", "ecdsa", "rsa")


@dataclass(frozen=True)
class KeyPair:
    private_openssh: str  # "-----BEGIN OPENSSH PRIVATE KEY-----..."
    public_openssh: str  # "ssh-ed25519 AAAA... comment"

    @property
    def public_blob(self) -> bytes:
        return base64.b64decode(self.public_openssh.split()[1])

    @property
    def sha256_fingerprint(self) -> str:
        """``SHA256:...`` as ``ssh-keygen -l`` prints it."""
        digest = hashlib.sha256(self.public_blob).digest()
        return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")

    def write_private(self, path: Path) -> Path:
        """Write the private key at mode 0600 (ssh refuses looser ones)."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(self.private_openssh)
        return path


def generate(comment: str, kind: str = "ed25519") -> KeyPair:
    """A new key pair (``ed25519``, ``ecdsa`` P-256 or ``rsa`` 3072) in OpenSSH formats."""
    key: Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
    if kind == "ed25519":
        key = Ed25519PrivateKey.generate()
    elif kind == "ecdsa":
        key = ec.generate_private_key(ec.SECP256R1())
    elif kind == "rsa":
        key = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    else:
        raise ValueError(f"unknown SSH key type {kind!r}")
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode("ascii")
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode("ascii")
    )
    return KeyPair(private, f"{public} {comment}")


def fingerprint_of_blob(blob: bytes) -> str:
    """``SHA256:...`` fingerprint of a raw public key blob (for keys read back from a server)."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
