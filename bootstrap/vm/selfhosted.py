"""The workload cluster made its own management cluster: ``clusterctl move``, the provider a Pod.

What Cluster API users do after bootstrapping from a temporary management cluster, done for
real on the booted control plane:

1. the controller's OCI image (``nodesmith controller image``) is in the control plane's
   containerd: preloaded by the node image build (``--preload-images``, as the control-plane
   images are), or else copied over SSH and imported (``ctr -n k8s.io images import``):
   air-gapped, no registry anywhere;
2. Cluster API's core CRDs and the provider's manifests (the self-signed webhook variant: there
   is no cert-manager) are applied with the node's own kubectl; the Deployment runs one
   replica, tolerating the control plane's taint (it is the only node yet), its node report
   endpoint a NodePort Service on the control plane's address;
3. the Cluster API objects are moved as ``clusterctl move`` moves them (those this run has:
   the Cluster, its Machines, their KubeadmConfigs, the Secrets; no MachineDeployments or
   templates here): the Cluster is paused at the source (unpaused again if the move fails),
   every object is created at the target with its owner references remapped to the new uids
   (KubeadmConfigs through the v1beta1 API: the Pod's conversion webhook answers
   the API server), statuses copied, the source's objects left paused, the target's Cluster
   unpaused.

From then on the controller *Pod* renders the worker's data Secret, creates its bootstrap
token, and records the worker's own report, in the cluster it runs in.
"""

from __future__ import annotations

import base64
import copy
import json
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from lightkube import ApiError

from bootstrap.controller import capi_crds, kube
from bootstrap.controller.manifests import (
    NAMESPACE,
    ReportEndpoint,
    Webhook,
    manifests,
    render_yaml,
)
from bootstrap.errors import TerminalError, TransientError
from bootstrap.vm import qemu
from bootstrap.vm.cluster import ClusterRun, Node, Progress, ssh

REPORT_NODE_PORT = 30843
Obj = dict[str, Any]


@dataclass(frozen=True)
class ControllerImage:
    """An OCI archive from ``nodesmith controller image`` and its tag."""

    archive: Path
    tag: str

    @property
    def ref(self) -> str:
        from bootstrap.image.container import REPOSITORY

        return f"{REPOSITORY}:{self.tag}"


def image_of(directory: Path) -> ControllerImage:
    """The image in ``nodesmith controller image``'s output directory, checked."""
    from bootstrap.image.container import ARCHIVE

    archive = directory / ARCHIVE
    if not archive.is_file():
        raise TerminalError(
            f"has no {ARCHIVE}: build it with 'nodesmith controller image --output DIR'",
            obj=str(directory),
            field="--controller-image",
            reason="ControllerImageMissing",
        )
    with_tag = directory / "image.json"
    tag = json.loads(with_tag.read_text())["tag"] if with_tag.is_file() else ""
    if not tag:
        raise TerminalError(
            "has no image.json naming the image's tag",
            obj=str(directory),
            field="--controller-image",
            reason="ControllerImageMissing",
        )
    return ControllerImage(archive, str(tag))


def _images(node: Node) -> list[str]:
    _, listed, _ = ssh(node.vm, "sudo ctr -n k8s.io images ls -q", timeout=60)
    return listed.split()


def ensure_image(node: Node, image: ControllerImage, progress: Progress) -> float:
    """The controller image in ``node``'s containerd: preloaded in the node image (air-gapped,
    the image build's ``--preload-images``), or else copied over SSH and imported now; returns
    the seconds the import took (0 when preloaded)."""
    if image.ref in _images(node):
        progress(f"cluster: controller image {image.ref} is preloaded on {node.name}")
        return 0.0
    started = time.monotonic()
    remote = f"/tmp/{image.archive.name}"
    client = qemu.pinned_client(node.vm)
    try:
        sftp = client.open_sftp()
        sftp.put(str(image.archive), remote)
        sftp.close()
    finally:
        client.close()
    command = f"sudo ctr -n k8s.io images import {shlex.quote(remote)}; rm -f {shlex.quote(remote)}"
    code, out, err = ssh(node.vm, command, timeout=600)
    if code != 0 or image.ref not in _images(node):
        raise TerminalError(
            f"ctr images import gave no {image.ref} ({code}): {(err or out).strip()[-400:]}",
            obj=node.machine,
            reason="ImageImportFailed",
        )
    seconds = time.monotonic() - started
    progress(f"cluster: controller image {image.ref} imported on {node.name} ({seconds:.0f}s)")
    return seconds


def install(run: ClusterRun, image: ControllerImage, report_url: str, progress: Progress) -> None:
    """Cluster API's CRDs and the provider, applied with the control plane's kubectl."""
    report = ReportEndpoint(report_url, service_type="NodePort", node_port=REPORT_NODE_PORT)
    objects = manifests(image.ref, NAMESPACE, 1, report, Webhook(self_signed=True))
    for obj in objects:  # air-gapped: the preloaded image or nothing
        if obj["kind"] == "Deployment":
            for container in obj["spec"]["template"]["spec"]["containers"]:
                container["imagePullPolicy"] = "Never"
                # TCG: the node's API server answers in seconds, not milliseconds; a lease
                # renewal missing the default 15 s would restart the only replica (and its
                # webhook) for nothing
                container["args"] += ["--lease-duration=60s", "--lease-renew=15s"]
    run.kubectl("apply", "-f", "-", stdin=capi_crds.render_yaml())
    run.kubectl("apply", "-f", "-", stdin=render_yaml(objects))
    run.kubectl(
        "-n", NAMESPACE, "rollout", "status", "deployment/nodesmith-controller", "--timeout=600s",
        timeout=660,
    )  # fmt: skip
    progress("cluster: the provider runs as a Pod on the control plane")


def wait_trusted(api: kube.Api, deadline: float) -> None:
    """Until the API server converts through the Pod's webhook (its CA injected)."""
    probe: Obj = {
        "apiVersion": f"{kube.GROUP}/v1beta1",
        "kind": "KubeadmConfig",
        "metadata": {"name": "conversion-probe", "namespace": "default"},
        "spec": {},
    }
    last = ""
    resource: Any = kube.KubeadmConfigV1Beta1  # a generic resource takes the raw object
    while time.monotonic() < deadline:
        try:
            api.client.create(resource(probe), dry_run=True)
            return
        except ApiError as exc:
            last = str(exc.status.message or exc)[-300:]
        time.sleep(2)
    raise TransientError(
        f"the API server could not convert through the Pod's webhook: {last}",
        obj="workload cluster",
        reason="WebhookUnreachable",
    )


# ------------------------------------------------------------------ clusterctl move


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _fresh(obj: Obj, uids: dict[str, str]) -> Obj:
    """``obj`` for the target: no server fields, its owners' uids the target's."""
    out = copy.deepcopy(obj)
    out.pop("status", None)
    meta = out.setdefault("metadata", {})
    for key in ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"):
        meta.pop(key, None)
    owners = []
    for ref in meta.get("ownerReferences") or []:
        if ref.get("uid") in uids:
            owners.append({**ref, "uid": uids[ref["uid"]]})
    if owners:
        meta["ownerReferences"] = owners
    else:
        meta.pop("ownerReferences", None)
    return out


def move(
    source: kube.Api,
    target: kube.Api,
    namespace: str,
    cluster_name: str,
    kubeconfig: Obj,
    progress: Progress,
    secrets: frozenset[str] = frozenset(),
) -> str:
    """Move ``cluster_name``'s objects from ``source`` to ``target`` as clusterctl does: what
    they own, what carries the cluster-name label, and the named ``secrets`` (the input's).
    Returns when the target's API server created the Cluster (its clock, not this host's)."""
    source.merge_patch(kube.Cluster, cluster_name, namespace, {"spec": {"paused": True}})
    try:
        return _move(source, target, namespace, cluster_name, kubeconfig, progress, secrets)
    except BaseException:  # the source keeps the cluster, unpaused, as clusterctl leaves it
        source.merge_patch(kube.Cluster, cluster_name, namespace, {"spec": {"paused": False}})
        raise


def _move(
    source: kube.Api,
    target: kube.Api,
    namespace: str,
    cluster_name: str,
    kubeconfig: Obj,
    progress: Progress,
    secrets: frozenset[str],
) -> str:
    cluster = source.get(kube.Cluster, cluster_name, namespace)
    if cluster is None:
        raise TerminalError("is gone", obj=f"Cluster {namespace}/{cluster_name}", reason="Gone")
    uids: dict[str, str] = {}
    statuses: list[tuple[Any, Obj, Obj]] = []

    def put(res: Any, obj: Obj) -> Obj:
        created = target.create(res, _fresh(obj, uids))
        uids[str(_meta(obj)["uid"])] = str(_meta(created)["uid"])
        if obj.get("status"):
            statuses.append((res, created, obj["status"]))
        return created

    moved = put(kube.Cluster, cluster)
    moved_at = str(_meta(moved).get("creationTimestamp"))
    machines = [
        dict(m)
        for m in source.client.list(kube.Machine, namespace=namespace)
        if (m.get("spec") or {}).get("clusterName") == cluster_name
    ]
    for machine in machines:
        put(kube.Machine, machine)
    for machine in machines:
        ref = ((machine.get("spec") or {}).get("bootstrap") or {}).get("configRef") or {}
        config = source.get(kube.KubeadmConfigV1Beta1, str(ref.get("name")), namespace)
        if config is not None:  # through both webhooks: v1beta1 out, v1beta1 in
            put(kube.KubeadmConfigV1Beta1, config)
    count = 0
    for secret in source.client.list(kube.Secret, namespace=namespace):
        doc = dict(secret)
        owned = any(r.get("uid") in uids for r in _meta(doc).get("ownerReferences") or [])
        labelled = _meta(doc).get("labels", {}).get("cluster.x-k8s.io/cluster-name")
        if not owned and labelled != cluster_name and _meta(doc)["name"] not in secrets:
            continue
        if _meta(doc)["name"] == f"{cluster_name}-kubeconfig":
            doc["data"] = {"value": base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()}
        put(kube.Secret, doc)
        count += 1
    for res, made, status in statuses:
        if res is kube.Secret:
            continue
        if "observedGeneration" in status:  # the target's object starts its own count
            status = {**status, "observedGeneration": _meta(made).get("generation")}
        target.merge_patch(res, _meta(made)["name"], namespace, {"status": status}, status=True)
    target.merge_patch(kube.Cluster, cluster_name, namespace, {"spec": {"paused": False}})
    progress(
        f"cluster: moved Cluster {namespace}/{cluster_name}, {len(machines)} Machines, their "
        f"KubeadmConfigs and {count} Secrets to the workload cluster (source left paused)"
    )
    return moved_at
