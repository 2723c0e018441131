"""The render pipeline for one Machine: check -> build each section -> render.

:func:`plan_for` checks everything about the Machine that does not depend on its role (the
Kubernetes version, the runtime, the image, the format); :func:`render_machine` builds the
documents from a :class:`~bootstrap.render.decide.Decision` (the role and the CAs, decided in
``decide``) and renders them. Nothing here decides a role, takes a lock or looks a CA up, and
nothing is written: the caller decides where the result goes. Raising is the only way out on
bad input, so a failed render can never leave a partial artifact.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

from bootstrap import __version__
from bootstrap.errors import TerminalError, invalid, is_small_number
from bootstrap.render import clc, ignition, kubeadm, pki
from bootstrap.render.bootstrap_script import (
    SCRIPT_CONFIG_PATH,
    SCRIPT_PATH,
    run_order,
    script_entry,
    script_form,
    shell_config,
)
from bootstrap.render.cloudconfig import (
    disk_sections,
    normal_path,
    ntp_section,
    user_entry,
    user_files,
)
from bootstrap.render.decide import INIT, JOIN_CP, WORKER, Decision
from bootstrap.render.discovery import discovery_kubeconfig, token_discovery
from bootstrap.render.external_etcd import external_etcd, external_etcd_files
from bootstrap.render.kubeadm_schema import check_document, drop_newer_fields
from bootstrap.render.resolve import Context
from bootstrap.render.result import AWS_USERDATA_LIMIT, RenderOptions, RenderResult
from bootstrap.render.runtime import SOCKETS, RuntimeChoice, check_image, choose_runtime
from bootstrap.render.templates import render
from bootstrap.render.versions import KubeVersion, parse_version

KUBEADM_INIT_PATH = "/run/kubeadm/kubeadm.yaml"
KUBEADM_JOIN_PATH = "/run/kubeadm/kubeadm-join-config.yaml"

RETRY_ANNOTATIONS = {
    "backoff": ("bootstrap.nodesmith.dev/retry-backoff", 5, 1, 600),
    "maxBackoff": ("bootstrap.nodesmith.dev/retry-max-backoff", 60, 1, 3600),
    "deadline": ("bootstrap.nodesmith.dev/retry-deadline", 900, 1, 86400),
}


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


def _file(path: str, content: str, permissions: str) -> dict[str, Any]:
    return {"path": path, "owner": "root:root", "permissions": permissions, "content": content}


@dataclass
class Plan:
    """What the builders below decide for one Machine, in the order they decide it."""

    ctx: Context
    options: RenderOptions
    builder: kubeadm.Builder
    runtime_socket: str | None
    install: list[str]
    warnings: list[str]
    decision: Decision = field(default_factory=lambda: Decision(WORKER))  # render_machine
    files: list[dict[str, Any]] = field(default_factory=list)  # PKI first, then the user's
    token_secret: dict[str, Any] | None = None
    redact: list[str] = field(default_factory=list)
    certificates_dir: str = pki.PKI_DIR
    script: dict[str, Any] = field(default_factory=dict)  # the on-node script's config
    ignition: bool = False  # format: ignition (Flatcar): other paths, the bash script
    snippet: dict[str, Any] | None = None  # additionalConfig as Ignition v3 (checked in plan)

    @property
    def role(self) -> str:
        return self.decision.role


def certificates_dir(ctx: Context) -> str:
    """Where kubeadm looks for the CAs: ``clusterConfiguration.certificatesDir`` or its default.

    The CAs nodesmith writes must land there, or kubeadm generates a second, unpinned CA.
    """
    given = (ctx.config.spec.cluster_configuration or {}).get("certificatesDir")
    if given is None or given == "":
        return pki.PKI_DIR
    field_ = "spec.clusterConfiguration.certificatesDir"
    if not isinstance(given, str) or not given.startswith("/") or normal_path(given) == "/":
        raise invalid(ctx.config.ref, field_, given, "must be an absolute directory path")
    return normal_path(given)


def seed_control_plane_version(ctx: Context, kubelet: KubeVersion) -> str:
    """A seed-era Machine's ``versions.controlPlane``: what ``kubeadm init`` installs.

    It may differ from ``versions.kubelet``, within Kubernetes' skew policy: a kubelet is
    never newer than its control plane, nor more than three minors older.
    """
    machine = ctx.machine
    field_ = "spec.versions.controlPlane"
    assert machine.control_plane_version is not None
    version = parse_version(machine.control_plane_version, machine.ref, field_)
    if (kubelet.major, kubelet.minor) > (version.major, version.minor) or (
        version.minor - kubelet.minor > 3
    ):
        raise invalid(
            machine.ref,
            field_,
            machine.control_plane_version,
            f"is outside the version skew of spec.versions.kubelet {kubelet} (a kubelet is "
            "never newer than its control plane, nor more than three minors older)",
        )
    return str(version)


def kubeadm_documents(plan: Plan) -> tuple[list[dict[str, Any]], str, str]:
    """The kubeadm documents, where they go and the verb: init's Cluster/Init/Kubelet
    configuration, or a join's JoinConfiguration with its discovery resolved.

    Control planes also get their PKI files here, from the decision's CAs.
    """
    ctx, spec, b = plan.ctx, plan.ctx.config.spec, plan.builder
    if plan.role in (INIT, JOIN_CP):
        decision = plan.decision
        plan.files += pki.pki_files(decision.cas, plan.certificates_dir, decision.kinds)
        etcd = external_etcd(ctx)
        if etcd:
            plan.files += external_etcd_files(ctx, etcd)
    if plan.role == INIT:
        if ctx.cluster.endpoint is None:
            plan.warnings.append(
                f"{ctx.cluster.ref} has no control-plane endpoint: the cluster "
                "cannot grow past this one control-plane node"
            )
        init = kubeadm.init_configuration(b, spec.init_configuration, plan.runtime_socket)
        cluster_doc = kubeadm.cluster_configuration(
            b, spec.cluster_configuration, ctx.cluster, init
        )
        if ctx.machine.control_plane_version:
            cluster_doc["kubernetesVersion"] = seed_control_plane_version(ctx, b.version)
        documents = [cluster_doc, init, kubeadm.kubelet_configuration(b, ctx.cluster, cluster_doc)]
        path, verb = kubeadm_path(plan, KUBEADM_INIT_PATH), "init"
    else:
        discovery, token, plan.token_secret = token_discovery(ctx, plan.options, plan.warnings)
        kubeconfig = discovery_kubeconfig(ctx, (b.version.major, b.version.minor) >= (1, 24))
        if kubeconfig is not None:
            plan.files.append(kubeconfig)
        if token:
            plan.redact.append(token)
        join = kubeadm.join_configuration(
            b,
            spec.join_configuration,
            plan.runtime_socket,
            plan.role == JOIN_CP,
            discovery,
            uninitialized_taint=not ctx.machine.seed,
        )
        documents = [join]
        path, verb = kubeadm_path(plan, KUBEADM_JOIN_PATH), "join"
    for document in documents:
        for dropped in drop_newer_fields(document):
            kind, _, rest = dropped.partition(".")  # ClusterConfiguration.x -> spec.clusterConf...
            plan.warnings.append(
                f"spec.{kind[0].lower()}{kind[1:]}.{rest} dropped: {document['apiVersion']} "
                f"(Kubernetes {b.version}) has no such field"
            )
        check_document(document, str(ctx.config.ref))
    return documents, path, verb


def script_config(plan: Plan, path: str, verb: str) -> dict[str, Any]:
    """The on-node script's config: the exact kubeadm command line, the user's commands,
    retry settings and the strings to redact from what it logs."""
    spec = plan.ctx.config.spec
    command = ["kubeadm", verb, "--config", path, *plan.builder.flags]
    if spec.verbosity is not None:
        command += ["--v", str(spec.verbosity)]
    report = plan.options.status_report
    if report is not None:
        plan.redact.append(report.credential)
    return {
        "role": plan.role,
        "verb": verb,
        "pre": plan.install + list(spec.pre_kubeadm_commands),  # in the order they run
        "command": command,
        "post": list(spec.post_kubeadm_commands),
        **_retry_settings(plan.ctx),
        "redact": plan.redact,
        # kubeadm reset empties it; the script puts nodesmith's CAs back before a retry.
        **({"pkiDir": plan.certificates_dir} if plan.certificates_dir != pki.PKI_DIR else {}),
        # the node reports its phases here (never blocking on it): the controller's endpoint
        **({"reportUrl": report.url, "reportCredential": report.credential} if report else {}),
        **({"reportCA": report.ca} if report and report.ca else {}),
        # Ignition's kubeadm file is on disk: moved to /run once used, as CABPK moves it away
        **({"consumeConfig": path} if plan.ignition else {}),
    }


def kubeadm_path(plan: Plan, path: str) -> str:
    """Where the kubeadm file goes: CABPK's paths, where the providers' own pre-commands edit
    it: ``/run/kubeadm/kubeadm.yaml`` or ``kubeadm-join-config.yaml`` (cloud-init),
    ``/etc/kubeadm.yml`` (Ignition, which writes the root before /run is mounted)."""
    return ignition.KUBEADM_PATH if plan.ignition else path


def write_files(plan: Plan, documents: list[dict[str, Any]], path: str, verb: str) -> list[Any]:
    """``write_files``: PKI, the user's files (never over a reserved path), the kubeadm
    config and the script's config (both 0600: they hold tokens)."""
    spec, ref = plan.ctx.config.spec, plan.ctx.config.ref
    plan.script = script_config(plan, path, verb)
    reserved_too: set[str] = set()
    if plan.ignition:  # the bash twin reads bash variables
        script_path, config_path = ignition.SCRIPT_PATH, ignition.CONFIG_PATH
        reserved_too = {ignition.KUBEADM_SH}
        config = shell_config(plan.script)
    else:
        script_path, config_path = SCRIPT_PATH, SCRIPT_CONFIG_PATH
        config = json.dumps(plan.script, indent=2) + "\n"  # read by operators: an item a line
    reserved = {path, script_path, config_path, *reserved_too} | {f["path"] for f in plan.files}
    return [
        *plan.files,
        *user_files(spec, plan.ctx.secret, ref, reserved),
        _file(path, render("kubeadm.yaml.j2", documents=documents), "0600"),
        _file(config_path, config, "0600"),
    ]


def users(plan: Plan) -> list[dict[str, Any]]:
    """``users``: the config's users, passwords and keys resolved from their Secrets."""
    spec, ref = plan.ctx.config.spec, plan.ctx.config.ref
    return [user_entry(u, i, plan.ctx.secret, ref) for i, u in enumerate(spec.users)]


def sections(plan: Plan) -> dict[str, Any]:
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


def known_socket(runtime: RuntimeChoice, options: RenderOptions) -> str | None:
    """The CRI socket when something says which runtime the node has, else None.

    The Machine (``versions.containerRuntime`` or the runtime annotation) or the image
    manifest may say it; with neither, kubeadm's own detection finds the socket on the node,
    which a guessed containerd socket would override wrongly on a CRI-O image.
    """
    if runtime.field != "default":
        return runtime.socket
    manifest = options.image_manifest
    if manifest is not None:
        return manifest.runtime.cri_socket or SOCKETS.get(manifest.runtime.name.lower())
    return None


def check_ignition(ctx: Context) -> None:
    """What an Ignition node cannot be given is refused, naming the field, never dropped
    (what CABPK's webhook refuses for Ignition, and cloud-init's Jinja)."""
    spec, ref = ctx.config.spec, ctx.config.ref
    parts = list(enumerate(spec.disk_setup.partitions if spec.disk_setup else []))
    filesystems = list(enumerate(spec.disk_setup.filesystems if spec.disk_setup else []))
    refused = [
        *((f"spec.diskSetup.partitions[{i}].tableType", p.table_type == "mbr",
           "Ignition partitions GPT disks only") for i, p in parts),
        *((f"spec.diskSetup.partitions[{i}].diskLayout", bool(p.disk_layout),
           "percentage layouts are not rendered for Ignition") for i, p in parts),
        *((f"spec.diskSetup.filesystems[{i}].partition", f.partition is not None,
           "Ignition makes a filesystem on a device, not on a partition of it")
          for i, f in filesystems),
        *((f"spec.diskSetup.filesystems[{i}].replaceFS", f.replace_fs is not None,
           "Ignition has no replaceFS") for i, f in filesystems),
        *((f"spec.mounts[{i}]", len(m) < 2 or not m[1].startswith("/")
           or any(c.isspace() for c in m[1]),
           "needs a device and an absolute mount point without blanks (swap entries are not "
           "rendered for Ignition)") for i, m in enumerate(spec.mounts)),
        ("spec", ctx.config.jinja,
         "uses cloud-init Jinja ({{ }} or {% %}), which Ignition never renders"),
    ]  # fmt: skip
    for field_, present, why in refused:
        if present:
            raise TerminalError(
                f"{why} (format: ignition)",
                obj=ref,
                field=field_,
                reason="FormatNotSupported",
            )


def additional_config(ctx: Context) -> dict[str, Any] | None:
    """The config's Container Linux Config snippet as Ignition v3 sections, or None."""
    clc_config = (ctx.config.spec.ignition or {}).get("containerLinuxConfig") or {}
    text = clc_config.get("additionalConfig") if isinstance(clc_config, dict) else None
    if text is None or text == "":
        return None
    if not isinstance(text, str):
        raise invalid(ctx.config.ref, clc.FIELD, text, "must be a string of YAML")
    return clc.translate(clc.parse(text, ctx.config.ref), ctx.config.ref)


MANIFESTS_CHECK = "DirAvailable--etc-kubernetes-manifests"


def static_pod_warning(ctx: Context) -> list[str]:
    """``kubeadm join`` refuses a non-empty ``/etc/kubernetes/manifests`` (its preflight's
    DirAvailable check): a join whose files put a static pod there must ignore that check,
    as the providers' kube-vip templates do, or it fails on the node."""
    spec = ctx.config.spec
    pods = [f.path for f in spec.files if f.path.startswith("/etc/kubernetes/manifests/")]
    registration = (spec.join_configuration or {}).get("nodeRegistration")
    ignored = registration.get("ignorePreflightErrors") if isinstance(registration, dict) else None
    names = {str(x).lower() for x in ignored} if isinstance(ignored, list) else set()
    if not pods or {MANIFESTS_CHECK.lower(), "all"} & names:
        return []
    return [
        f"spec.files writes {pods[0]}, but kubeadm join refuses a non-empty "
        f"/etc/kubernetes/manifests: add {MANIFESTS_CHECK} to "
        "spec.joinConfiguration.nodeRegistration.ignorePreflightErrors"
    ]


def plan_for(ctx: Context, options: RenderOptions) -> Plan:
    """Kubernetes version, runtime, image and format checks: everything about the Machine that
    holds whatever its role, checked before a role is decided (a wrong input is terminal
    before it can take the init lock or wait for a CA).

    Example: a worker Machine at v1.20.2 plans kubeadm v1beta2 (``plan.builder.version``).
    """
    spec = ctx.config.spec
    if spec.format == "ignition":
        check_ignition(ctx)
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
    plan = Plan(ctx, options, builder, known_socket(runtime, options), install, warnings)
    plan.certificates_dir = certificates_dir(ctx)
    plan.ignition = spec.format == "ignition"
    if plan.ignition:
        plan.snippet = additional_config(ctx)
    return plan


def render_machine(plan: Plan, decision: Decision) -> RenderResult:
    """Render the bootstrap data of the planned Machine in the role ``decision`` gives it,
    with the decision's CAs.

    Every driver calls this one function after ``decide`` (``batch.render_one`` for the command
    line, the HTTP service and the VM tools; the controller's reconcile), so a Machine renders
    the same wherever it is asked for. Raises ``TerminalError`` (the input is wrong) or
    ``TransientError`` (something it needs has not appeared yet).
    """
    plan.decision = decision
    ctx, options, spec = plan.ctx, plan.options, plan.ctx.config.spec
    # As CABPK: what this role does not use is ignored, but said (a join's ClusterConfiguration
    # still gives certificatesDir and external etcd).
    unused = ["initConfiguration"] if plan.role != INIT and spec.init_configuration else []
    if plan.role == WORKER and spec.cluster_configuration:
        unused.append("clusterConfiguration")
    for name in unused:
        plan.warnings.append(f"spec.{name} is ignored: this Machine renders {plan.role}")
    if plan.role != INIT:
        plan.warnings += static_pod_warning(ctx)
    built = sections(plan)

    if plan.ignition:  # the same budget rule: the script compressed only when it must be

        def ignition_with(compressed: bool, warnings: list[str]) -> bytes:
            doc = ignition.config(built, warnings, compressed, plan.script["command"])
            if plan.snippet is not None:
                clc.merge(doc, copy.deepcopy(plan.snippet), ctx.config.ref)
            return ignition.dump(doc)

        config = ignition_with(False, plan.warnings)
        if not options.gzip and len(config) > AWS_USERDATA_LIMIT:
            config = ignition_with(True, [])  # its warnings are said
        return _result(ctx, plan, options, config, "ignition")

    def userdata_with(compressed: bool, plain_size: int = 0) -> bytes:
        return render(
            "cloud-config.yaml.j2",
            sections=built,
            nodesmith_version=__version__,
            role=plan.role,
            machine=f"{ctx.machine.ref.namespace}/{ctx.machine.name}",
            cluster=ctx.cluster.name,
            run_order=run_order(plan.script),
            script_form=script_form(compressed, plain_size, AWS_USERDATA_LIMIT),
            write_files_tail=script_entry(compressed),
            jinja=ctx.config.jinja,
        ).encode()

    # The script ships readable unless that alone pushes the userdata over the budget (with
    # --gzip the whole userdata is compressed, so plain costs nothing there).
    userdata = userdata_with(compressed=False)
    if not options.gzip and len(userdata) > AWS_USERDATA_LIMIT:
        userdata = userdata_with(compressed=True, plain_size=len(userdata))
    return _result(ctx, plan, options, userdata, "cloud-config")


def _result(
    ctx: Context, plan: Plan, options: RenderOptions, userdata: bytes, format_: str
) -> RenderResult:
    """The render's result."""
    if not options.gzip and len(userdata) > AWS_USERDATA_LIMIT:
        reader = "Ignition" if plan.ignition else "cloud-init"
        plan.warnings.append(f"userdata is {len(userdata)} bytes, over the 16 KiB AWS limit; "
                             f"use --gzip ({reader} reads gzipped userdata)")  # fmt: skip
    ref = ctx.config.ref
    return RenderResult(
        machine=f"{ctx.machine.ref.namespace}/{ctx.machine.name}",
        config_name=ref.name,
        namespace=ref.namespace,
        cluster_name=ctx.cluster.name,
        role=plan.role,
        format=format_,
        userdata=userdata,
        gzipped=options.gzip,
        warnings=plan.warnings,
        config_uid=ctx.config.uid,
        config_kind=ctx.config.ref.kind,  # a seed-era Machine owns its own data Secret
        config_api_version=ctx.config.api_version,
        bootstrap_token_secret=plan.token_secret,
        generated_secrets=plan.decision.generated,
    )


__all__ = ["Plan", "plan_for", "render_machine"]
