"""Shared helpers for the render tests: the real cloud-init validator, userdata readers and
the golden bundle's documents (``base_docs``, ``find``) that tests mutate case by case.

``assert_valid_cloud_config`` runs Debian's ``cloud-init schema --config-file`` (the real
validator, not a re-implementation) on every rendered cloud-config. It is slow-ish (~0.8 s a
call), so results are cached by content hash and ``assert_all_valid`` validates many documents
in parallel. cloud-init 22.4 accepts unknown top-level keys, so the helper also refuses keys
outside the cloud-init modules nodesmith writes: a typo there would be silently ignored on the
node.
"""

from __future__ import annotations

import base64
import copy
import gzip
import hashlib
import json
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

DATA = Path(__file__).resolve().parent / "data" / "render"
GOLDEN = DATA / "golden"
CA_SECRETS = DATA / "ca-secrets.yaml"
BASE = DATA / "v1beta1-v1beta4" / "bundle.yaml"
FIXED_NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)

GENERATIONS = ("v1alpha1", "v1beta1", "v1beta2")
KUBEADM_APIS = ("v1beta2", "v1beta3", "v1beta4")
ROLE_MACHINES = {
    "init-control-plane": "cp-0",
    "join-control-plane": "cp-1",
    "worker-join": "md-0",
}
KUBE_VERSIONS = {"v1beta2": "v1.20.2", "v1beta3": "v1.30.6", "v1beta4": "v1.31.4"}
INITIALIZED = {"conditions": [{"type": "ControlPlaneInitialized", "status": "True"}]}

# cloud-init modules' top-level keys nodesmith may write (plus a few users commonly add).
CLOUD_CONFIG_KEYS = frozenset(
    {
        "write_files",
        "users",
        "ntp",
        "disk_setup",
        "fs_setup",
        "mounts",
        "bootcmd",
        "runcmd",
    }
)
CLOUD_INIT = shutil.which("cloud-init") or "/usr/bin/cloud-init"

_validated: dict[str, str] = {}


def cloud_init_schema(text: str | bytes) -> tuple[bool, str]:
    """Run ``cloud-init schema --config-file`` on ``text``: (valid, validator output)."""
    data = text.encode() if isinstance(text, str) else text
    key = hashlib.sha256(data).hexdigest()
    if key in _validated:
        return True, _validated[key]
    if not Path(CLOUD_INIT).exists():
        raise AssertionError(
            "cloud-init is not installed (apt-get install cloud-init); the render tests "
            "validate with the real cloud-init schema validator"
        )
    with tempfile.NamedTemporaryFile(suffix=".cloud-config") as tmp:
        tmp.write(data)
        tmp.flush()
        proc = subprocess.run(
            [CLOUD_INIT, "schema", "--config-file", tmp.name],
            capture_output=True,
            text=True,
            timeout=60,
        )
    output = (proc.stdout + proc.stderr).strip()
    ok = proc.returncode == 0 and "Valid cloud-config" in proc.stdout
    if ok:
        _validated[key] = output
    return ok, output


def assert_valid_cloud_config(text: str | bytes) -> dict[str, Any]:
    """Assert ``text`` passes the real validator and uses known keys; return it parsed."""
    data = text.decode() if isinstance(text, bytes) else text
    assert data.startswith("#cloud-config\n"), data[:80]
    parsed = yaml.safe_load(data)
    assert isinstance(parsed, dict), "cloud-config is not a mapping"
    unknown = set(parsed) - CLOUD_CONFIG_KEYS
    assert not unknown, f"keys cloud-init would silently ignore: {sorted(unknown)}"
    ok, output = cloud_init_schema(data)
    assert ok, f"cloud-init schema rejected the userdata:\n{output}"
    return parsed


def assert_all_valid(texts: list[str | bytes]) -> list[dict[str, Any]]:
    """Validate several cloud-configs concurrently (each is a separate cloud-init process)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(cloud_init_schema, texts))  # warm the cache in parallel
    return [assert_valid_cloud_config(t) for t in texts]


def base_docs(ca: bool = True, initialized: bool = True) -> list[dict[str, Any]]:
    """The golden bundle; its Cluster initialized unless asked otherwise, so that md-0 and
    cp-1 join (they would wait for the control plane) and cp-0 joins as a control plane."""
    docs = [d for d in yaml.safe_load_all(BASE.read_text()) if d]
    if initialized:
        find(docs, "Cluster", "alpha")["status"] = copy.deepcopy(INITIALIZED)
    if ca:
        docs += [d for d in yaml.safe_load_all(CA_SECRETS.read_text()) if d]
    return docs


def find(docs: list[dict[str, Any]], kind: str, name: str, ns: str = "prod") -> dict[str, Any]:
    """The document of ``kind`` named ``ns/name`` (to mutate in place)."""
    for d in docs:
        meta = d["metadata"]
        if d["kind"] == kind and meta["name"] == name and meta.get("namespace") == ns:
            return d
    raise KeyError((kind, ns, name))


def files_by_path(cloud_config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    entries = cloud_config.get("write_files", [])
    paths = [e["path"] for e in entries]
    assert len(paths) == len(set(paths)), f"duplicate write_files paths: {paths}"
    return {e["path"]: e for e in entries}


def file_bytes(entry: dict[str, Any]) -> bytes:
    """The bytes cloud-init will write for a write_files entry."""
    content = entry.get("content", "")
    encoding = entry.get("encoding")
    if encoding in ("b64", "base64"):
        return base64.b64decode(content)
    if encoding in ("gz+b64", "gzip+base64", "gz+base64"):
        return gzip.decompress(base64.b64decode(content))
    assert encoding is None, encoding
    return str(content).encode()


def kubeadm_documents(cloud_config: dict[str, Any], path: str) -> list[dict[str, Any]]:
    entry = files_by_path(cloud_config)[path]
    return [d for d in yaml.safe_load_all(file_bytes(entry)) if d is not None]


def script_config(cloud_config: dict[str, Any]) -> dict[str, Any]:
    entry = files_by_path(cloud_config)["/run/kubeadm/nodesmith-bootstrap.json"]
    loaded: dict[str, Any] = json.loads(file_bytes(entry))
    return loaded


def openssl_spki_hash(cert_pem: bytes) -> str:
    """kubeadm's caCertHashes value computed the documented way, by the real openssl."""
    out = subprocess.run(
        "openssl x509 -pubkey -noout | openssl pkey -pubin -outform der | sha256sum",
        shell=True,
        input=cert_pem,
        capture_output=True,
        check=True,
    )
    return "sha256:" + out.stdout.decode().split()[0]


def secret_data(path: Path, name: str, namespace: str, key: str) -> bytes:
    for doc in yaml.safe_load_all(path.read_text()):
        meta = (doc or {}).get("metadata", {})
        if (doc.get("kind"), meta.get("name"), meta.get("namespace", "default")) == (
            "Secret",
            name,
            namespace,
        ):
            return base64.b64decode(doc["data"][key])
    raise KeyError(f"{namespace}/{name}[{key}] not in {path}")


def normalise_random(text: str) -> str:
    """Replace the parts of a render that are random by design with fixed markers.

    Generated bootstrap tokens (``[a-z0-9]{6}.[a-z0-9]{16}``) and generated PEM bodies differ
    on every run; goldens from inputs that give both need no normalising. Used only by tests
    that render with generated material and want to compare structure.
    """
    import re

    text = re.sub(r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b", "<token>", text)
    text = re.sub(
        r"(-----BEGIN [A-Z ]+-----)[\sA-Za-z0-9+/=]+?(-----END [A-Z ]+-----)",
        r"\1<pem>\2",
        text,
    )
    return re.sub(r"sha256:[0-9a-f]{64}", "sha256:<hash>", text)
