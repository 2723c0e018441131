"""The render pipeline for one Machine: resolve -> decide the role -> build -> render.

Everything a render needs is computed here in order, and nothing is written: the caller
decides where the result goes. Raising is the only way out on bad input, so a failed render
can never leave a partial artifact.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from bootstrap import __version__
from bootstrap.errors import ObjectRef, TerminalError, TransientError, invalid, is_small_number
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
    """init, control-plane join or worker join, from the shape of the KubeadmConfig.

    A ``joinConfiguration.controlPlane`` makes a control-plane join; an init or cluster
    configuration an init; anything else a worker. (CABPK decides from the control-plane
    label and the Cluster's ControlPlaneInitialized state instead; the open rendering issue
    moves nodesmith to that rule.)
    """
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
        # ASCII digits only ("²".isdigit() is True) and short, so int() cannot fail or crawl.
        if not is_small_number(text) or not low <= int(text) <= high:
            raise invalid(
                ctx.machine.ref,
                f"metadata.annotations[{annotation}]",
                raw,
                f"must be a whole number of seconds from {low} to {high}",
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


@dataclass
class _Plan:
    """What the builders below decide for one Machine, in the order they decide it."""

    ctx: Context
    options: RenderOptions
    role: str
    builder: kubeadm.Builder
    runtime_socket: str
    install: list[str]
    warnings: list[str]
    files: list[dict[str, Any]] = field(default_factory=list)  # PKI first, then the user's
    generated: list[dict[str, Any]] = field(default_factory=list)
    token_secret: dict[str, Any] | None = None
    redact: list[str] = field(default_factory=list)


def kubeadm_documents(plan: _Plan) -> tuple[list[dict[str, Any]], str, str]:
    """The kubeadm documents, where they go and the verb: init's Cluster/Init/Kubelet
    configuration, or a join's JoinConfiguration with its discovery resolved.

    Control planes also get their PKI files here (generated CAs go to ``plan.generated``).
    """
    ctx, spec, b = plan.ctx, plan.ctx.config.spec, plan.builder
    if plan.role in (INIT, JOIN_CP):
        pairs, plan.generated = _control_plane_pki(ctx, plan.role, plan.options)
        plan.files += pki.pki_files(pairs)
    if plan.role == INIT:
        if ctx.cluster.endpoint is None:
            plan.warnings.append(
                f"{ctx.cluster.ref} has no control-plane endpoint: the cluster "
                "cannot grow past this one control-plane node"
            )
        init = kubeadm.init_configuration(b, spec.init_configuration, plan.runtime_socket)
        documents = [
            kubeadm.cluster_configuration(b, spec.cluster_configuration, ctx.cluster, init),
            init,
            kubeadm.kubelet_configuration(b, ctx.cluster),
        ]
        path, verb = KUBEADM_INIT_PATH, "init"
    else:
        discovery, token, plan.token_secret = _discovery(ctx, plan.options, plan.warnings)
        if token:
            plan.redact.append(token)
        join = kubeadm.join_configuration(
            b, spec.join_configuration, plan.runtime_socket, plan.role == JOIN_CP, discovery
        )
        documents = [join]
        path, verb = KUBEADM_JOIN_PATH, "join"
    for document in documents:
        check_document(document, str(ctx.config.ref))
    return documents, path, verb


def script_config(plan: _Plan, path: str, verb: str) -> dict[str, Any]:
    """The on-node script's config: the exact kubeadm command line, the user's commands,
    retry settings and the strings to redact from what it logs."""
    spec = plan.ctx.config.spec
    command = ["kubeadm", verb, "--config", path, *plan.builder.flags]
    if spec.verbosity is not None:
        command += ["--v", str(spec.verbosity)]
    return {
        "role": plan.role,
        "verb": verb,
        "command": command,
        "pre": plan.install + list(spec.pre_kubeadm_commands),
        "post": list(spec.post_kubeadm_commands),
        **_retry_settings(plan.ctx),
        "redact": plan.redact,
    }


def write_files(plan: _Plan, documents: list[dict[str, Any]], path: str, verb: str) -> list[Any]:
    """``write_files``: PKI, the user's files (never over a reserved path), the kubeadm
    config and the script's config (both 0600: they hold tokens)."""
    spec, ref = plan.ctx.config.spec, plan.ctx.config.ref
    reserved = {path, SCRIPT_PATH, SCRIPT_CONFIG_PATH} | {f["path"] for f in plan.files}
    config = json.dumps(script_config(plan, path, verb), separators=(",", ":"))
    return [
        *plan.files,
        *user_files(spec, plan.ctx.secret, ref, reserved),
        _file(path, render("kubeadm.yaml.j2", documents=documents), "0600"),
        _file(SCRIPT_CONFIG_PATH, config, "0600"),
    ]


def users(plan: _Plan) -> list[dict[str, Any]]:
    """``users``: the config's users, passwords and keys resolved from their Secrets."""
    spec, ref = plan.ctx.config.spec, plan.ctx.config.ref
    return [user_entry(u, i, plan.ctx.secret, ref) for i, u in enumerate(spec.users)]


def sections(plan: _Plan) -> dict[str, Any]:
    """Every cloud-config section, in the order cloud-init's modules consume them."""
    spec = plan.ctx.config.spec
    documents, path, verb = kubeadm_documents(plan)
    out: dict[str, Any] = {"write_files": write_files(plan, documents, path, verb)}
    entries = users(plan)
    if entries:
        out["users"] = entries
    out.update(ntp_section(spec))
    out.update(disk_sections(spec))
    if spec.boot_commands:
        out["bootcmd"] = list(spec.boot_commands)
    out["runcmd"] = [[SCRIPT_PATH, SCRIPT_CONFIG_PATH]]
    return out


def plan_for(ctx: Context, options: RenderOptions) -> _Plan:
    """Role, kubeadm API, runtime and image checks: everything decided before any document.

    Example: a worker Machine at v1.20.2 plans ``worker-join`` with kubeadm v1beta2.
    """
    spec = ctx.config.spec
    if spec.format == "ignition":
        raise TerminalError(
            "Ignition is not supported yet; use format cloud-config",
            obj=ctx.config.ref,
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
    builder = kubeadm.Builder(obj=ctx.config.ref, version=version, warnings=warnings)
    return _Plan(ctx, options, role_of(ctx), builder, runtime.socket, install, warnings)


def render_machine(
    objects: list[dict[str, Any]] | Bundle, machine: str, options: RenderOptions | None = None
) -> RenderResult:
    """Render the bootstrap data of ``machine`` ("NAMESPACE/NAME" or "NAME") from ``objects``.

    The one entry point the CLI, the HTTP service and the VM tools share, so a Machine renders
    the same wherever it is asked for: parse (``Bundle``) -> resolve the Machine's context ->
    plan -> build each cloud-config section -> render the template. Raises
    ``MachineNotFound``, ``TerminalError`` (the input is wrong) or ``TransientError``
    (something it needs has not appeared yet).
    """
    options = options or RenderOptions()
    bundle = objects if isinstance(objects, Bundle) else Bundle(objects)
    ctx = resolve(bundle, machine)
    plan = plan_for(ctx, options)
    name = f"{ctx.machine.ref.namespace}/{ctx.machine.name}"
    text = render(
        "cloud-config.yaml.j2",
        sections=sections(plan),
        nodesmith_version=__version__,
        role=plan.role,
        machine=name,
        cluster=ctx.cluster.name,
        write_files_tail=_script_entry_yaml(),
    )
    userdata = text.encode()
    if not options.gzip and len(userdata) > AWS_USERDATA_LIMIT:
        plan.warnings.append(
            f"userdata is {len(userdata)} bytes, over the 16 KiB AWS limit; "
            "use --gzip (cloud-init reads gzipped userdata)"
        )
    ref = ctx.config.ref
    return RenderResult(
        machine=name,
        config_name=ref.name,
        namespace=ref.namespace,
        cluster_name=ctx.cluster.name,
        role=plan.role,
        format="cloud-config",
        userdata=userdata,
        gzipped=options.gzip,
        warnings=plan.warnings,
        config_uid=ctx.config.uid,
        config_api_version=ctx.config.api_version,
        bootstrap_token_secret=plan.token_secret,
        generated_secrets=plan.generated,
    )


__all__ = ["INIT", "JOIN_CP", "WORKER", "ObjectRef", "render_machine"]
