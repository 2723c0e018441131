"""The render pipeline for one Machine: resolve -> decide the role -> build -> render.

Everything a render needs is computed here in order, and nothing is written: the caller
decides where the result goes. Raising is the only way out on bad input, so a failed render
can never leave a partial artifact.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from bootstrap import __version__
from bootstrap.errors import ObjectRef, TerminalError, TransientError
from bootstrap.render import kubeadm, pki, tokens
from bootstrap.render.cloudconfig import disk_sections, ntp_section, user_entry, user_files
from bootstrap.render.kubeadm_schema import check_document
from bootstrap.render.resolve import Bundle, Context, resolve
from bootstrap.render.result import AWS_USERDATA_LIMIT, RenderOptions, RenderResult
from bootstrap.render.runtime import check_image, choose_runtime
from bootstrap.render.templates import packed_script, render
from bootstrap.render.versions import parse_version
from bootstrap.render.yamlio import dump

INIT = "init-control-plane"
JOIN_CP = "join-control-plane"
WORKER = "worker-join"

KUBEADM_INIT_PATH = "/run/kubeadm/kubeadm.yaml"
KUBEADM_JOIN_PATH = "/run/kubeadm/kubeadm-join-config.yaml"
SCRIPT_PATH = "/usr/local/sbin/nodesmith-bootstrap"
SCRIPT_CONFIG_PATH = "/run/kubeadm/nodesmith-bootstrap.json"

RETRY_ANNOTATIONS = {
    "backoff": ("bootstrap.nodesmith.dev/retry-backoff", 5, 1, 600),
    "maxBackoff": ("bootstrap.nodesmith.dev/retry-max-backoff", 60, 1, 3600),
    "deadline": ("bootstrap.nodesmith.dev/retry-deadline", 900, 1, 86400),
}


def role_of(ctx: Context) -> str:
    spec = ctx.config.spec
    join = spec.join_configuration or {}
    if join.get("controlPlane") is not None:
        return JOIN_CP
    if spec.init_configuration is not None or spec.cluster_configuration is not None:
        return INIT
    return WORKER


def _retry_settings(ctx: Context) -> dict[str, int]:
    settings: dict[str, int] = {}
    for key, (annotation, default, low, high) in RETRY_ANNOTATIONS.items():
        raw = ctx.machine.annotations.get(annotation)
        if raw is None:
            settings[key] = default
            continue
        text = raw.strip().removesuffix("s")
        if not text.isdigit() or not low <= int(text) <= high:
            raise TerminalError(
                f"must be a whole number of seconds from {low} to {high} (got {raw!r})",
                obj=ctx.machine.ref,
                field=f"metadata.annotations[{annotation}]",
                reason="InvalidAnnotation",
            )
        settings[key] = int(text)
    return settings


@lru_cache(maxsize=256)
def _ca_hash(cert_pem: bytes) -> str:
    return pki.spki_sha256(cert_pem)


def _secret_pair(ctx: Context, kind: str) -> pki.KeyPair | None:
    name = f"{ctx.cluster.name}-{pki.SECRET_SUFFIXES[kind]}"
    secret = ctx.secret(name)
    if secret is None:
        return None
    cert, key = secret.data.get("tls.crt"), secret.data.get("tls.key")
    if not cert or not key:
        missing = "tls.crt" if not cert else "tls.key"
        raise TerminalError(
            f"Secret {ctx.machine.ref.namespace}/{name} has no {missing}",
            obj=secret.ref,
            field=f"data[{missing}]",
            reason="InvalidSecret",
        )
    try:
        return pki.load_pair(cert, key, kind)
    except ValueError as exc:
        raise TerminalError(
            f"is not a usable {kind} key pair: {exc}",
            obj=secret.ref,
            field="data",
            reason="InvalidSecret",
        ) from None


def _control_plane_pki(
    ctx: Context, role: str, options: RenderOptions
) -> tuple[dict[str, pki.KeyPair], list[dict[str, Any]]]:
    pairs: dict[str, pki.KeyPair] = {}
    missing: list[str] = []
    for kind in pki.SECRET_SUFFIXES:
        pair = _secret_pair(ctx, kind)
        if pair is None:
            missing.append(kind)
        else:
            pairs[kind] = pair
    generated: list[dict[str, Any]] = []
    if missing and role == JOIN_CP:
        names = ", ".join(f"{ctx.cluster.name}-{pki.SECRET_SUFFIXES[k]}" for k in missing)
        raise TerminalError(
            f"a control-plane join needs the cluster's CA Secrets; missing {names}",
            obj=ctx.machine.ref,
            reason="CANotFound",
        )
    if missing:
        fresh = pki.generate_cluster_pki(ctx.cluster.name, options.clock())
        pairs.update({k: fresh[k] for k in missing})
        # Only the Secrets that were missing are new (CABPK's LookupOrGenerate, per pair).
        wanted = {f"{ctx.cluster.name}-{pki.SECRET_SUFFIXES[k]}" for k in missing}
        generated = [
            s
            for s in pki.pki_secrets(ctx.cluster.name, ctx.machine.ref.namespace, fresh)
            if s["metadata"]["name"] in wanted
        ]
    return pairs, generated


def _discovery(
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
        if cert:
            try:
                values["caCertHashes"] = [_ca_hash(cert)]
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
            raise TerminalError(
                f"cannot pin the cluster CA for discovery: Secret "
                f"{ctx.machine.ref.namespace}/{ca_name} (tls.crt) is not in the input; "
                "add it or pass --unsafe-skip-ca-verification",
                obj=ctx.machine.ref,
                reason="CANotFound",
            )
    return values, str(token), token_secret


@lru_cache(maxsize=1)
def _script_entry_yaml() -> str:
    """The on-node script's write_files item as YAML, dumped once.

    It is the same ~2.5 KB for every Machine; dumping it per render was a fifth of a worker
    render's time. The template appends it to the write_files list.
    """
    entry = {
        "path": SCRIPT_PATH,
        "owner": "root:root",
        "permissions": "0755",
        "encoding": "gz+b64",
        "content": packed_script("nodesmith-bootstrap.py"),
    }
    return dump([entry])


def _file(path: str, content: str, permissions: str) -> dict[str, Any]:
    return {"path": path, "owner": "root:root", "permissions": permissions, "content": content}


def render_machine(
    objects: list[dict[str, Any]] | Bundle, machine: str, options: RenderOptions | None = None
) -> RenderResult:
    """Render the bootstrap data of ``machine`` ("NAMESPACE/NAME" or "NAME") from ``objects``.

    The one entry point the CLI, the HTTP service and the VM tools share, so a Machine renders
    the same wherever it is asked for. Raises ``MachineNotFound``, ``TerminalError`` (the
    input is wrong) or ``TransientError`` (something it needs has not appeared yet).
    """
    options = options or RenderOptions()
    bundle = objects if isinstance(objects, Bundle) else Bundle(objects)
    ctx = resolve(bundle, machine)
    spec, config_ref = ctx.config.spec, ctx.config.ref
    if spec.format == "ignition":
        raise TerminalError(
            "Ignition is not supported yet; use format cloud-config",
            obj=config_ref,
            field="spec.format",
            reason="FormatNotSupported",
        )
    warnings: list[str] = []
    if spec.use_experimental_retry_join:
        warnings.append(
            "spec.useExperimentalRetryJoin is ignored: nodesmith always retries "
            "transient kubeadm failures"
        )
    version = parse_version(ctx.machine.version, ctx.machine.ref, ctx.machine.version_field)
    runtime = choose_runtime(ctx.machine)
    install: list[str] = []
    if options.image_manifest is not None:
        install = check_image(
            ctx.machine, runtime, version, options.image_manifest, options.allow_runtime_install
        )
    role = role_of(ctx)
    builder = kubeadm.Builder(obj=config_ref, version=version, warnings=warnings)
    where = str(config_ref)

    files: list[dict[str, Any]] = []
    generated: list[dict[str, Any]] = []
    token_secret = None
    redact: list[str] = []
    if role in (INIT, JOIN_CP):
        pairs, generated = _control_plane_pki(ctx, role, options)
        files += pki.pki_files(pairs)
    if role == INIT:
        if ctx.cluster.endpoint is None:
            warnings.append(
                f"{ctx.cluster.ref} has no control-plane endpoint: the cluster "
                "cannot grow past this one control-plane node"
            )
        init = kubeadm.init_configuration(builder, spec.init_configuration, runtime.socket)
        documents = [
            kubeadm.cluster_configuration(builder, spec.cluster_configuration, ctx.cluster, init),
            init,
            kubeadm.kubelet_configuration(builder, ctx.cluster),
        ]
        config_path, verb = KUBEADM_INIT_PATH, "init"
    else:
        discovery, token, token_secret = _discovery(ctx, options, warnings)
        if token:
            redact.append(token)
        documents = [
            kubeadm.join_configuration(
                builder, spec.join_configuration, runtime.socket, role == JOIN_CP, discovery
            )
        ]
        config_path, verb = KUBEADM_JOIN_PATH, "join"
    for document in documents:
        check_document(document, where)

    command = ["kubeadm", verb, "--config", config_path, *builder.flags]
    if spec.verbosity is not None:
        command += ["--v", str(spec.verbosity)]
    script_config = {
        "role": role,
        "verb": verb,
        "command": command,
        "pre": install + list(spec.pre_kubeadm_commands),
        "post": list(spec.post_kubeadm_commands),
        **_retry_settings(ctx),
        "redact": redact,
    }
    reserved = {config_path, SCRIPT_PATH, SCRIPT_CONFIG_PATH} | {f["path"] for f in files}
    lookup = ctx.secret
    files += user_files(spec, lookup, config_ref, reserved)
    files += [
        _file(config_path, render("kubeadm.yaml.j2", documents=documents), "0600"),
        _file(SCRIPT_CONFIG_PATH, json.dumps(script_config, separators=(",", ":")), "0600"),
    ]
    sections: dict[str, Any] = {"write_files": files}
    users = [user_entry(u, i, lookup, config_ref) for i, u in enumerate(spec.users)]
    if users:
        sections["users"] = users
    sections.update(ntp_section(spec))
    sections.update(disk_sections(spec))
    if spec.boot_commands:
        sections["bootcmd"] = list(spec.boot_commands)
    sections["runcmd"] = [[SCRIPT_PATH, SCRIPT_CONFIG_PATH]]
    text = render(
        "cloud-config.yaml.j2",
        sections=sections,
        nodesmith_version=__version__,
        role=role,
        machine=f"{ctx.machine.ref.namespace}/{ctx.machine.name}",
        cluster=ctx.cluster.name,
        write_files_tail=_script_entry_yaml(),
    )
    userdata = text.encode()
    if not options.gzip and len(userdata) > AWS_USERDATA_LIMIT:
        warnings.append(
            f"userdata is {len(userdata)} bytes, over the 16 KiB AWS limit; "
            "use --gzip (cloud-init reads gzipped userdata)"
        )
    return RenderResult(
        machine=f"{ctx.machine.ref.namespace}/{ctx.machine.name}",
        config_name=config_ref.name,
        namespace=config_ref.namespace,
        cluster_name=ctx.cluster.name,
        role=role,
        format="cloud-config",
        userdata=userdata,
        gzipped=options.gzip,
        warnings=warnings,
        config_uid=ctx.config.uid,
        config_api_version=ctx.config.api_version,
        bootstrap_token_secret=token_secret,
        generated_secrets=generated,
    )


__all__ = ["INIT", "JOIN_CP", "WORKER", "ObjectRef", "render_machine"]
