"""External etcd (``clusterConfiguration.etcd.external``): the paths kubeadm is told and the
certificates written there, as CABPK writes them. Neither the etcd CA nor the client pair is
ever generated: the etcd belongs to someone else, so a missing Secret waits."""

from __future__ import annotations

from typing import Any

from bootstrap.errors import TerminalError, TransientError, invalid
from bootstrap.render import pki
from bootstrap.render.cloudconfig import normal_path
from bootstrap.render.resolve import Context

EXTERNAL_ETCD_FILES = ("caFile", "certFile", "keyFile")
ETCD_CLIENT_SUFFIX = "apiserver-etcd-client"


def external_etcd(ctx: Context) -> dict[str, str] | None:
    """``clusterConfiguration.etcd.external``'s file paths, checked, or None (stacked etcd)."""
    etcd = (ctx.config.spec.cluster_configuration or {}).get("etcd")
    external = etcd.get("external") if isinstance(etcd, dict) else None
    if external is None:
        return None
    path = "spec.clusterConfiguration.etcd.external"
    if not isinstance(external, dict):
        raise invalid(ctx.config.ref, path, external, "must be a mapping")
    files: dict[str, str] = {}
    for key in EXTERNAL_ETCD_FILES:
        value = external.get(key)
        if not isinstance(value, str) or not value.startswith("/") or value.endswith("/"):
            raise invalid(ctx.config.ref, f"{path}.{key}", value, "must be an absolute file path")
        files[key] = normal_path(value)
    return files


def external_etcd_files(ctx: Context, paths: dict[str, str]) -> list[dict[str, Any]]:
    """CABPK's external-etcd certificates: the etcd CA certificate from ``<cluster>-etcd`` (its
    key, if the Secret has one, stays there) and the API server's client pair from
    ``<cluster>-apiserver-etcd-client``, written where the ClusterConfiguration says.

    Neither can be generated (the etcd is someone else's), so a missing Secret waits.
    """
    namespace, cluster = ctx.machine.ref.namespace, ctx.cluster.name
    found: dict[str, tuple[Any, bytes, bytes | None]] = {}
    for suffix, needs_key in (("etcd", False), (ETCD_CLIENT_SUFFIX, True)):
        name = f"{cluster}-{suffix}"
        secret = ctx.secret(name)
        if secret is None:
            raise TransientError(
                f"external etcd: Secret {namespace}/{name} is not in the input yet; nodesmith "
                "cannot generate another party's etcd certificates",
                obj=ctx.machine.ref,
                reason="ExternalEtcdSecretNotFound",
                retry_after=30,
            )
        cert, key = secret.tls(needs_key)
        found[suffix] = (secret.ref, cert, key)
    checks = (
        ("etcd", lambda cert, key: pki.KeyPair(pki.check_ca_cert(cert), b"")),
        (ETCD_CLIENT_SUFFIX, pki.load_client_pair),
    )
    loaded: dict[str, pki.KeyPair] = {}
    for suffix, check in checks:
        ref, cert, key = found[suffix]
        try:
            loaded[suffix] = check(cert, key or b"")
        except ValueError as exc:
            raise TerminalError(
                f"is not usable for the external etcd: {exc}",
                obj=ref,
                field="data",
                reason="InvalidSecret",
            ) from None
    ca, client = loaded["etcd"].cert_pem, loaded[ETCD_CLIENT_SUFFIX]
    return [
        pem_file(paths["caFile"], ca, "0640"),
        pem_file(paths["certFile"], client.cert_pem, "0640"),
        pem_file(paths["keyFile"], client.key_pem, "0600"),
    ]


def pem_file(path: str, pem: bytes, permissions: str) -> dict[str, Any]:
    return {"path": path, "owner": "root:root", "permissions": permissions, "content": pem.decode()}
