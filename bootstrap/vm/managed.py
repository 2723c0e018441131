"""``nodesmith vm cluster --via-controller``: the same cluster, its userdata from the controller.

Where :func:`bootstrap.vm.cluster.up` renders the bundle itself, this run stands up what a
Cluster API user has and lets nodesmith's controller do CABPK's job:

* a management cluster: a real kube-apiserver v1.20.2 (the project's Kubernetes build) over
  Debian's etcd on 127.0.0.1, the provider installed from ``nodesmith controller manifests``
  and Cluster API's core CRDs (``bootstrap.controller.capi_crds``);
* ``nodesmith controller run`` as the provider's ServiceAccount, with its node report endpoint;
* the bundle applied there (Cluster, Machines, their KubeadmConfigs owned by them, Secrets);
* this module plays Cluster API's core and infrastructure controllers, and nothing more: it
  marks the Cluster's infrastructure ready, boots each Machine's VM from the data Secret *the
  controller wrote*, writes ``<cluster>-kubeconfig`` once the control plane answers (reached
  through a loopback forward, so the API server gets ``127.0.0.1`` as an extra SAN) and sets
  ControlPlaneInitialized and each Machine's nodeRef, as CAPI's Cluster and Machine
  controllers do.

The nodes report their bootstrap phases to the controller through a qemu ``guestfwd``
(``http://10.0.2.100:8443`` inside each VM, relayed by ``bootstrap.vm.relay`` to the
controller's endpoint on the host's loopback),
and the run ends only when every KubeadmConfig says ``BootstrapSucceeded``.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from lightkube import ApiError

from bootstrap.controller import capi_crds, kube
from bootstrap.controller.manifests import (
    NAMESPACE,
    SA_GROUPS,
    SA_USER,
    Webhook,
    manifests,
    render_yaml,
)
from bootstrap.controller.status import now_text
from bootstrap.errors import TerminalError, TransientError, show_value
from bootstrap.hostutil import free_port
from bootstrap.kubernetes.apiserver import APIServer, Etcd
from bootstrap.kubernetes.build import current
from bootstrap.render.decide import INIT, JOIN_CP, WORKER
from bootstrap.render.objects import CONTROL_PLANE_LABEL
from bootstrap.vm import qemu, selfhosted
from bootstrap.vm.accel import Accel
from bootstrap.vm.cluster import (
    ADMIN,
    ClusterRun,
    Node,
    Progress,
    _boot,
    _cloud_init_done,
    _infra_address,
    ssh,
    wait_bootstrapped,
    wait_ready,
)

REPORT_GUEST = "10.0.2.100"  # the report endpoint as the VMs see it (qemu guestfwd)
REPORT_GUEST_PORT = 8443
MGMT_KINDS = ("Cluster", "Secret")
Obj = dict[str, Any]


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _fresh(obj: Obj) -> Obj:
    """``obj`` as a new object for the API: no uid, version, timestamps or status."""
    out = copy.deepcopy(obj)
    out.pop("status", None)
    meta = out.setdefault("metadata", {})
    for key in ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"):
        meta.pop(key, None)
    meta.setdefault("namespace", "default")
    return out


@dataclass
class Management:
    """The management cluster of the run and the controller acting on it."""

    workdir: Path
    etcd: Etcd
    server: APIServer
    admin: kube.Api
    kubectl_bin: Path
    controller: subprocess.Popen[bytes] | None = None
    report_port: int = field(default_factory=free_port)
    webhook_port: int = field(default_factory=free_port)

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run(
            [str(self.kubectl_bin), f"--kubeconfig={self.server.kubeconfig()}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            raise TransientError(
                f"kubectl {' '.join(args[:2])} on the management cluster failed: "
                f"{result.stderr.strip()[-400:]}",
                reason="ManagementKubectlFailed",
            )
        return result.stdout

    def start_controller(self) -> None:
        log = (self.workdir / "controller.log").open("ab")
        self.controller = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bootstrap.cli",
                "controller",
                "run",
                f"--kubeconfig={self.server.kubeconfig(SA_USER)}",
                f"--leader-election-namespace={NAMESPACE}",
                "--metrics-bind=0",
                f"--report-bind=127.0.0.1:{self.report_port}",
                f"--report-url=http://{REPORT_GUEST}:{REPORT_GUEST_PORT}",
                # TCG: the control plane may take many minutes; the token must outlive it
                "--bootstrap-token-ttl=1h",
                # the CRDs name this URL; the controller makes its certificate and CA
                f"--webhook-bind=127.0.0.1:{self.webhook_port}",
                "--webhook-self-signed",
                "--webhook-name=127.0.0.1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
            start_new_session=True,
        )

    def wait_converting(self, deadline: float) -> None:
        """Until the API server converts v1beta1 KubeadmConfigs through the controller."""
        selfhosted.wait_trusted(self.admin, deadline)

    def stop(self) -> None:
        if self.controller is not None and self.controller.poll() is None:
            self.controller.send_signal(signal.SIGTERM)
            try:
                self.controller.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.controller.kill()
        stop_and_forget(self.etcd, self.server)


def stop_and_forget(etcd: Etcd, server: APIServer) -> None:
    """Stop a management cluster and drop its state, keeping only the logs: nobody can restart
    it, and etcd holds the workload cluster's CA keys and tokens, the server dir its own keys.
    Runs in ``finally`` blocks: it never raises over the error that brought it there."""
    server.stop()
    etcd.stop()
    for directory in (etcd.directory, server.directory):
        for path in directory.iterdir() if directory.is_dir() else ():
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            elif path.suffix != ".log":
                path.unlink(missing_ok=True)


def start_management(workdir: Path, progress: Progress) -> Management:
    build = current()
    if build is None:
        raise TerminalError(
            "no Kubernetes build on this machine: run 'nodesmith kubernetes build'",
            reason="NoKubernetesBuild",
        )
    bin_dir = build.path / "bin"
    etcd = Etcd(workdir / "etcd")
    server = APIServer(
        bin_dir / "kube-apiserver", workdir / "management", etcd, users={SA_USER: SA_GROUPS}
    )
    started = time.monotonic()
    try:
        etcd.start()
        server.start()
        mgmt = Management(
            workdir,
            etcd,
            server,
            kube.Api(kube.connect(server.kubeconfig_dict())),
            bin_dir / "kubectl",
        )
        hook = Webhook(self_signed=True, url=f"https://127.0.0.1:{mgmt.webhook_port}/convert")
        mgmt.kubectl("apply", "-f", "-", stdin=render_yaml(manifests("nodesmith:local", hook=hook)))
        mgmt.kubectl("apply", "-f", "-", stdin=capi_crds.render_yaml())
        for crd in ("kubeadmconfigs.bootstrap.cluster.x-k8s.io", "clusters.cluster.x-k8s.io",
                    "machines.cluster.x-k8s.io"):  # fmt: skip
            mgmt.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd}")
    except BaseException:
        stop_and_forget(etcd, server)
        raise
    progress(
        f"cluster: management API server {server.url} up, provider installed "
        f"({time.monotonic() - started:.0f}s)"
    )
    return mgmt


def apply_bundle(mgmt: Management, objects: list[Obj]) -> list[Obj]:
    """Create the bundle's objects on the management cluster; returns its Machines in order."""
    admin = mgmt.admin
    machines = [o for o in objects if o.get("kind") == "Machine"]
    for obj in objects:
        if obj.get("kind") == "Cluster":
            created = admin.create(kube.Cluster, _fresh(obj))
            admin.merge_patch(  # CAPI's infrastructure provider: the network is there
                kube.Cluster,
                _meta(created)["name"],
                _meta(created)["namespace"],
                {"status": {"infrastructureReady": True}},
                status=True,
            )
        elif obj.get("kind") == "Secret":
            admin.create(kube.Secret, _fresh(obj))
    configs = {
        (_meta(o).get("namespace", "default"), _meta(o)["name"]): o
        for o in objects
        if o.get("kind") == "KubeadmConfig"
    }
    for machine in machines:
        created = admin.create(kube.Machine, _fresh(machine))
        ns = _meta(created)["namespace"]
        ref = ((created.get("spec") or {}).get("bootstrap") or {}).get("configRef") or {}
        config = configs.get((ns, str(ref.get("name"))))
        if config is None:
            raise TerminalError(
                f"names KubeadmConfig {show_value(ref.get('name'))}, which is not in the input",
                obj=f"Machine {ns}/{_meta(created)['name']}",
                field="spec.bootstrap.configRef",
                reason="ConfigNotFound",
            )
        fresh = _fresh(config)
        _meta(fresh)["ownerReferences"] = [
            {
                "apiVersion": created["apiVersion"],
                "kind": "Machine",
                "name": _meta(created)["name"],
                "uid": _meta(created)["uid"],
            }
        ]
        if CONTROL_PLANE_LABEL in (_meta(created).get("labels") or {}):
            # the controller reaches this API server through a loopback forward
            api_server = (
                fresh.setdefault("spec", {})
                .setdefault("clusterConfiguration", {})
                .setdefault("apiServer", {})
            )
            sans = api_server.setdefault("certSANs", [])
            if "127.0.0.1" not in sans:
                sans.append("127.0.0.1")
        admin.create(kube.KubeadmConfigV1Beta1, fresh)
    return machines


def _read_v1beta1(api: kube.Api, name: str, ns: str, errors: list[str]) -> Obj:
    """The config as a v1beta1 reader gets it; an API error (a 500 while the webhook's Pod is
    restarting, say) is kept in ``errors`` and read as nothing yet: the caller polls again."""
    try:
        return api.get(kube.KubeadmConfigV1Beta1, name, ns) or {}
    except ApiError as exc:
        errors.append(str(exc.status.message or exc)[-300:])
        return {}


def wait_data(api: kube.Api, machine: Obj, deadline: float, progress: Progress) -> bytes:
    """The userdata the controller wrote for ``machine``'s config; a terminal failure stops.
    Read as a Cluster API v1beta1 controller reads it: through the conversion webhook."""
    ns, name = _meta(machine).get("namespace", "default"), _meta(machine)["name"]
    config_name = str(machine["spec"]["bootstrap"]["configRef"]["name"])
    said = ""
    errors: list[str] = []
    while time.monotonic() < deadline:
        config = _read_v1beta1(api, config_name, ns, errors)
        st = config.get("status") or {}
        if st.get("failureReason"):
            raise TerminalError(
                f"the controller failed it: {st['failureReason']}: {st.get('failureMessage')}",
                obj=f"KubeadmConfig {ns}/{config_name}",
                reason="ControllerFailed",
            )
        if st.get("ready") and st.get("dataSecretName"):
            secret = api.get(kube.Secret, str(st["dataSecretName"]), ns)
            if secret is not None:
                progress(f"cluster: {name}: bootstrap data from Secret {ns}/{st['dataSecretName']}")
                return base64.b64decode(secret["data"]["value"])
        waiting: Obj = next(
            (c for c in st.get("conditions") or [] if c.get("type") == "DataSecretAvailable"), {}
        )
        if waiting.get("reason") and waiting["reason"] != said:
            said = waiting["reason"]
            progress(f"cluster: {name}: the controller waits ({said})")
        time.sleep(1)
    raise TransientError(
        "the controller wrote no bootstrap data in time"
        + (f" (last API error: {errors[-1]})" if errors else ""),
        obj=f"KubeadmConfig {ns}/{config_name}",
        reason="NoBootstrapData",
    )


def _node(objects: list[Obj], machine: Obj, index: int, role: str, data: bytes) -> Node:
    ns = _meta(machine).get("namespace", "default")
    return Node(
        machine=f"{ns}/{_meta(machine)['name']}",
        name=_meta(machine)["name"],
        role=role,
        address=_infra_address(objects, machine),
        mac=f"52:54:00:57:00:{index + 10:02x}",
        userdata=data,
    )


def _set_status(api: kube.Api, res: Any, obj: Obj, status: Obj) -> None:
    api.merge_patch(
        res, _meta(obj)["name"], _meta(obj).get("namespace", "default"), {"status": status}, True
    )


def wait_reports(api: kube.Api, machines: list[Obj], deadline: float, progress: Progress) -> Obj:
    """Every config's BootstrapSucceeded, as the nodes reported it to the controller."""
    found: Obj = {}
    errors: list[str] = []
    while time.monotonic() < deadline:
        for machine in machines:
            ns = _meta(machine).get("namespace", "default")
            name = str(machine["spec"]["bootstrap"]["configRef"]["name"])
            config = _read_v1beta1(api, name, ns, errors)
            for cond in (config.get("status") or {}).get("conditions") or []:
                if cond.get("type") == "BootstrapSucceeded" and cond.get("status") == "True":
                    if f"{ns}/{name}" not in found:
                        progress(f"cluster: {name}: the node reported {cond.get('reason')}")
                    found[f"{ns}/{name}"] = {"status": "True", "reason": cond.get("reason")}
        if len(found) == len(machines):
            return found
        time.sleep(2)
    raise TransientError(
        "not every node's bootstrap report reached the controller"
        + (f" (last API error: {errors[-1]})" if errors else ""),
        obj="cluster",
        reason="ReportsMissing",
    )


def _initialized(api: kube.Api, cluster: Obj, machine: Obj, node: str) -> None:
    """CAPI's Cluster and Machine controllers: the control plane is initialized, its Node."""
    _set_status(
        api,
        kube.Cluster,
        cluster,
        {
            "infrastructureReady": True,
            "conditions": [
                {
                    "type": "ControlPlaneInitialized",
                    "status": "True",
                    "lastTransitionTime": now_text(),
                }
            ],
        },
    )
    _set_status(api, kube.Machine, machine, {"nodeRef": {"kind": "Node", "name": node}})


def _stamp(text: object) -> datetime:
    return datetime.fromisoformat(str(text).replace("Z", "+00:00"))


def _pod_figures(run: ClusterRun, moved_at: datetime) -> Obj:
    """The controller Pod: its name and image, from its container's start to its workers
    running (the webhook certified, the Lease taken, the caches synced), and from the move (the
    moved Cluster's creation) to its first reconcile; from the API server and the Pod's own log,
    both on the control plane's clock."""
    pods = json.loads(
        run.kubectl(
            "-n",
            NAMESPACE,
            "get",
            "pods",
            "-o",
            "json",
            "-l",
            "app.kubernetes.io/name=nodesmith-controller",
        )
    )["items"]
    pod = pods[0]
    name = pod["metadata"]["name"]
    started = _stamp(
        (pod["status"]["containerStatuses"][0]["state"].get("running") or {}).get("startedAt")
    )
    lines = [
        json.loads(x)
        for x in run.kubectl("-n", NAMESPACE, "logs", name).splitlines()
        if x.startswith("{")
    ]
    running = next(
        (x for x in lines if str(x.get("message", "")).startswith("controller running")), None
    )
    reconciles = [x for x in lines if x.get("event") == "reconcile"]
    judged = [x for x in reconciles if x["result"] != "ignored"]
    return {
        "pod": name,
        "image": pod["spec"]["containers"][0]["image"],
        "startToRunningSeconds": (
            round((_stamp(running["ts"]) - started).total_seconds(), 2) if running else None
        ),
        "moveToFirstReconcileSeconds": (  # the first that judged a config (not "Paused")
            round((_stamp(judged[0]["ts"]) - moved_at).total_seconds(), 2) if judged else None
        ),
        "reconciled": sorted({str(x["config"]) for x in reconciles if x["result"] == "ready"}),
    }


def up(
    image: Path,
    objects: list[Obj],
    *,
    accel: Accel,
    workdir: Path,
    root: Path | None = None,
    memory: int = qemu.DEFAULT_MEMORY_MB,
    timeout: float = 2400,
    progress: Progress = qemu._stderr,
    controller_image: Path | None = None,
) -> tuple[ClusterRun, Obj]:
    """Boot the bundle's cluster from the controller's data; returns the run (every Node
    Ready) and what the management cluster says of each config.

    With ``controller_image`` (``nodesmith controller image``'s output) the cluster becomes its
    own management cluster once its control plane is up (``bootstrap.vm.selfhosted``): the
    other Machines get their data from the controller *Pod*, and report to it."""
    hosted = selfhosted.image_of(controller_image) if controller_image is not None else None
    deadline = time.monotonic() + timeout
    workdir.mkdir(parents=True, exist_ok=True)
    mgmt = start_management(workdir, progress)
    run = ClusterRun([], root)
    try:
        mgmt.start_controller()
        mgmt.wait_converting(deadline)
        machines = apply_bundle(mgmt, objects)
        planes = [m for m in machines if CONTROL_PLANE_LABEL in (_meta(m).get("labels") or {})]
        workers = [m for m in machines if m not in planes]
        if not planes:
            raise TerminalError(
                "the input has no control plane to init", obj="input", reason="NoInitMachine"
            )
        api_port = free_port()
        # one relay per guest connection (a chardev target would be a single connection)
        relay = f"{sys.executable} -m bootstrap.vm.relay 127.0.0.1 {mgmt.report_port}"
        report = f"guestfwd=tcp:{REPORT_GUEST}:{REPORT_GUEST_PORT}-cmd:{relay}"
        first = planes[0]
        cp = _node(objects, first, 0, INIT, wait_data(mgmt.admin, first, deadline, progress))
        run.nodes.append(cp)
        port = free_port()
        _boot(cp, image, qemu.Link(port, True, cp.mac), accel, root, memory, progress,
              (f"hostfwd=tcp:127.0.0.1:{api_port}-:6443", report))  # fmt: skip
        wait_bootstrapped(cp, deadline, progress)
        _cloud_init_done(cp)
        # CAPI's Cluster controller: the workload cluster's kubeconfig, then initialized
        _, conf, _ = ssh(cp.vm, f"sudo cat {ADMIN}", timeout=30)
        kubeconfig = yaml.safe_load(conf)
        in_cluster = copy.deepcopy(kubeconfig)  # as Pods reach it: the advertised address
        for entry in kubeconfig.get("clusters") or []:
            entry["cluster"]["server"] = f"https://127.0.0.1:{api_port}"
        cluster_name = str(first["spec"]["clusterName"])
        ns = _meta(first).get("namespace", "default")
        mgmt.admin.create(
            kube.Secret,
            {
                "metadata": {
                    "name": f"{cluster_name}-kubeconfig",
                    "namespace": ns,
                    "labels": {"cluster.x-k8s.io/cluster-name": cluster_name},
                },
                "type": "cluster.x-k8s.io/secret",
                "data": {"value": base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()},
            },
        )
        cluster = mgmt.admin.get(kube.Cluster, cluster_name, ns) or {}
        api = mgmt.admin  # where the other Machines' configs are reconciled
        forwards: tuple[str, ...] = (report,)
        result: Obj = {"managementAPIServer": mgmt.server.url}
        reports: Obj = {}
        moved_at = datetime.now(UTC)
        if hosted is None:
            _initialized(api, cluster, first, cp.name)
            progress(
                "cluster: control plane initialized; its kubeconfig is on the management cluster"
            )
        else:
            _set_status(api, kube.Machine, first, {"nodeRef": {"kind": "Node", "name": cp.name}})
            # the control plane's own report is recorded here, before its objects move
            reports = wait_reports(api, [first], min(deadline, time.monotonic() + 120), progress)
            api = kube.Api(kube.connect(kubeconfig))
            cp_ip = cp.address.split("/")[0]
            for entry in in_cluster.get("clusters") or []:
                entry["cluster"]["server"] = f"https://{cp_ip}:6443"
            imported = selfhosted.ensure_image(cp, hosted, progress)
            report_url = f"http://{cp_ip}:{selfhosted.REPORT_NODE_PORT}"
            selfhosted.install(run, hosted, report_url, progress)
            selfhosted.wait_trusted(api, deadline)
            inputs = frozenset(
                str(_meta(o).get("name")) for o in objects if o.get("kind") == "Secret"
            )
            moved_at = _stamp(
                selfhosted.move(mgmt.admin, api, ns, cluster_name, in_cluster, progress, inputs)
            )
            _initialized(api, api.get(kube.Cluster, cluster_name, ns) or {}, first, cp.name)
            progress("cluster: control plane initialized, on the workload cluster itself")
            forwards = ()  # the nodes report to the Pod's NodePort on the segment
            result["selfHosted"] = {"imageImportSeconds": round(imported, 1)}
        for index, machine in enumerate([*planes[1:], *workers], start=1):
            role = JOIN_CP if machine in planes else WORKER
            node = _node(objects, machine, index, role, wait_data(api, machine, deadline, progress))
            run.nodes.append(node)
            _boot(node, image, qemu.Link(port, False, node.mac), accel, root, memory, progress,
                  forwards)  # fmt: skip
        for node in run.nodes[1:]:
            wait_bootstrapped(node, deadline, progress)
            _cloud_init_done(node)
        wait_ready(run, deadline, progress)
        for machine, node in zip([*planes, *workers][1:], run.nodes[1:], strict=True):
            _set_status(
                api, kube.Machine, machine, {"nodeRef": {"kind": "Node", "name": node.name}}
            )
        # the Succeeded report leaves before cloud-init ends: it is in, or lost, by now
        rest = [m for m in machines if hosted is None or m is not first]
        reports |= wait_reports(api, rest, min(deadline, time.monotonic() + 120), progress)
        result["bootstrapSucceeded"] = reports
        if hosted is not None:
            result["selfHosted"] |= _pod_figures(run, moved_at)
        return run, result
    except BaseException:
        run.down()
        raise
    finally:
        mgmt.stop()
