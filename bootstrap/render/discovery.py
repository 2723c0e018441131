"""Token discovery for a join: the token (given, or generated with its Secret), the API
endpoint and the pinned CA hash, each waiting (transient) while what it needs is not there yet;
and the kubeconfig a ``discovery.file.kubeConfig`` describes."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from bootstrap.errors import TerminalError, TransientError
from bootstrap.render import pki, tokens
from bootstrap.render.discovery_file import kubeconfig_file
from bootstrap.render.resolve import Context
from bootstrap.render.result import RenderOptions


@lru_cache(maxsize=256)
def ca_hash(cert_pem: bytes) -> str:
    return pki.spki_sha256(cert_pem)


def discovery_kubeconfig(ctx: Context, exec_v1: bool) -> dict[str, Any] | None:
    """The kubeconfig file a ``discovery.file.kubeConfig`` describes (CABPK writes it too)."""
    join = ctx.config.spec.join_configuration or {}
    disc = join.get("discovery")
    file = disc.get("file") if isinstance(disc, dict) else None
    if not isinstance(file, dict):
        return None
    ca = ctx.secret(f"{ctx.cluster.name}-ca")
    return kubeconfig_file(
        ctx.config.ref,
        file,
        ctx.cluster.name,
        ctx.cluster.endpoint,
        ca.data.get("tls.crt") if ca else None,
        exec_v1,
    )


def token_discovery(
    ctx: Context, options: RenderOptions, warnings: list[str]
) -> tuple[dict[str, Any], str | None, dict[str, Any] | None]:
    """Token-discovery values, the token (for redaction) and a generated token's Secret."""
    join = ctx.config.spec.join_configuration or {}
    disc = join.get("discovery") if isinstance(join.get("discovery"), dict) else {}
    assert isinstance(disc, dict)
    if "file" in disc:
        return {}, None, None
    given = disc.get("bootstrapToken") if isinstance(disc.get("bootstrapToken"), dict) else {}
    assert isinstance(given, dict)
    values: dict[str, Any] = {}
    token_secret = None
    token = given.get("token")
    field = "spec.joinConfiguration.discovery.bootstrapToken.token"
    if token:
        if not isinstance(token, str) or not tokens.is_valid_token(token):
            raise TerminalError(
                "is not a bootstrap token of the form [a-z0-9]{6}.[a-z0-9]{16}",
                obj=ctx.config.ref,
                field=field,
                reason="InvalidToken",
            )
    else:
        token = tokens.generate_token()
        values["token"] = token
        token_secret = tokens.token_secret(
            token,
            options.token_ttl,
            options.clock(),
            description=f"nodesmith bootstrap token for Machine {ctx.machine.ref.namespace}/"
            f"{ctx.machine.name}",
        )
    if not given.get("apiServerEndpoint"):
        endpoint = ctx.cluster.endpoint
        if endpoint is None:
            raise TransientError(
                "has no control-plane endpoint yet; a join needs one",
                obj=ctx.cluster.ref,
                field=ctx.cluster.endpoint_field,
                reason="WaitingForControlPlaneEndpoint",
                retry_after=10,
            )
        values["apiServerEndpoint"] = endpoint
    if not given.get("caCertHashes") and not given.get("unsafeSkipCAVerification"):
        ca_name = f"{ctx.cluster.name}-ca"
        ca = ctx.secret(ca_name)
        cert = ca.data.get("tls.crt") if ca else None
        if ca is not None and not cert:
            raise TerminalError(
                "has no tls.crt", obj=ca.ref, field="data[tls.crt]", reason="InvalidSecret"
            )
        if cert:
            try:
                values["caCertHashes"] = [ca_hash(cert)]
            except ValueError as exc:
                raise TerminalError(
                    f"tls.crt is not a CA certificate: {exc}",
                    obj=ca.ref if ca else ca_name,
                    field="data[tls.crt]",
                    reason="InvalidSecret",
                ) from None
        elif options.unsafe_skip_ca_verification:
            values["unsafeSkipCAVerification"] = True
            warnings.append(
                f"no CA Secret {ctx.machine.ref.namespace}/{ca_name}: discovery does "
                "not pin the cluster CA (--unsafe-skip-ca-verification)"
            )
        else:
            # Not yet: the init that creates the CA may still be ahead (CABPK requeues).
            raise TransientError(
                f"cannot pin the cluster CA for discovery: Secret "
                f"{ctx.machine.ref.namespace}/{ca_name} (tls.crt) is not in the input yet; "
                "retry when it exists, or pass --unsafe-skip-ca-verification",
                obj=ctx.machine.ref,
                reason="CANotFound",
                retry_after=30,
            )
    return values, str(token), token_secret
