"""Boot every Machine of a bundle as a VM on one private segment until its Nodes are Ready.

This is the smallest honest stand-in for a Cluster API management cluster plus an
infrastructure provider, and it does only what those do, around nodesmith's real output:

* the infrastructure side: one qemu VM per Machine, booted from the node image with that
  Machine's rendered userdata, a second NIC on a segment only this run's VMs share (qemu's
  socket netdev over 127.0.0.1, see :class:`~bootstrap.vm.qemu.Link`), and the address the
  Machine's ``QemuMachine`` object names, given through NoCloud network-config;
* the CABPK side: the bootstrap-token Secrets nodesmith generated are created in the
  workload cluster once its API server answers (workers retry their join until then), and
  CAPI's ``node.cluster.x-k8s.io/uninitialized`` taint is removed once a Node exists.

Everything else (kubeadm init and join, the kubelet, the API server, CNI) is the real thing
inside the VMs. kubectl runs on the control-plane node with its admin.conf, over SSH.
"""

from __future__ import annotations

import ipaddress
import json
import shlex
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import paramiko
import yaml

from bootstrap.errors import TerminalError, TransientError, invalid, show_value
from bootstrap.hostutil import free_port
from bootstrap.render import RenderOptions, RenderResult
from bootstrap.render.batch import render_all
from bootstrap.render.decide import INIT
from bootstrap.render.resolve import Bundle
from bootstrap.render.yamlio import dump_stream
from bootstrap.vm import qemu
from bootstrap.vm.accel import Accel

Progress = Callable[[str], None]
INFRA_KIND = "QemuMachine"
STATUS_FILE = "/run/cluster-api/bootstrap-status.json"
ADMIN = "/etc/kubernetes/admin.conf"
UNINITIALIZED = "node.cluster.x-k8s.io/uninitialized"
MGMT_MAC = "52:54:00:12:34:56"  # qemu's default for the first NIC (user networking)
TOKEN_TTL = timedelta(hours=1)
BOOTSTRAP_LOG = "/var/log/cloud-init-output.log"  # the node script's output, secrets redacted


@dataclass
class Node:
    """One Machine's VM and what was measured about it."""

    machine: str  # namespace/name
    name: str
    role: str
    address: str  # CIDR on the private segment
    mac: str
    userdata: bytes = b""
    state: qemu.VMState | None = None
    timeline: dict[str, float] = field(default_factory=dict)  # seconds since qemu start

    @property
    def vm(self) -> qemu.VMState:
        if self.state is None:
            raise TerminalError("not booted", obj=self.machine, reason="NotBooted")
        return self.state


@dataclass
class ClusterRun:
    """The booted cluster: its nodes, control plane first."""

    nodes: list[Node]
    root: Path | None = None

    @property
    def control_plane(self) -> Node:
        return self.nodes[0]

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
        """Run kubectl on the control plane against its real API server; raises on failure."""
        argv = ["sudo", "kubectl", f"--kubeconfig={ADMIN}", *args]
        code, out, err = ssh(self.control_plane.vm, shlex.join(argv), stdin, timeout)
        if code != 0:
            raise TransientError(
                f"kubectl {' '.join(args[:2])} failed ({code}): {err.strip()[-400:]}",
                obj=self.control_plane.machine,
                reason="KubectlFailed",
            )
        return out

    def down(self) -> None:
        for node in reversed(self.nodes):
            if node.state is not None:
                qemu.down(node.state.name, self.root)


def ssh(
    state: qemu.VMState, command: str, stdin: str | None = None, timeout: float = 120
) -> tuple[int, str, str]:
    """Run ``command`` on the VM over its pinned SSH key: (exit code, stdout, stderr)."""
    client = qemu.pinned_client(state)
    try:
        channel_in, out, err = client.exec_command(command, timeout=timeout)
        if stdin is not None:
            channel_in.write(stdin)
            channel_in.channel.shutdown_write()
        text, errors = out.read().decode(errors="replace"), err.read().decode(errors="replace")
        return out.channel.recv_exit_status(), text, errors
    finally:
        client.close()


def network_config(node: Node) -> bytes:
    """NoCloud network-config v2: DHCP on the management NIC (SSH only), the Machine's
    address on the private segment, with a default route there so the service CIDR routes."""
    gateway = str(next(iter(_network(node.address).hosts())))
    doc = {
        "version": 2,
        "ethernets": {
            "mgmt0": {"match": {"macaddress": MGMT_MAC}, "set-name": "mgmt0", "dhcp4": True},
            "cluster0": {
                "match": {"macaddress": node.mac},
                "set-name": "cluster0",
                "addresses": [node.address],
                "gateway4": gateway,
            },
        },
    }
    return yaml.safe_dump(doc, sort_keys=False).encode()


def _network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_interface(cidr).network


def _infra_address(objects: list[dict[str, Any]], machine: dict[str, Any]) -> str:
    meta = machine.get("metadata") or {}
    ref = (machine.get("spec") or {}).get("infrastructureRef") or {}
    where = f"Machine {meta.get('namespace', 'default')}/{meta.get('name')}"
    if ref.get("kind") != INFRA_KIND:
        raise invalid(
            where,
            "spec.infrastructureRef",
            ref.get("kind"),
            f"needs an infrastructureRef to a {INFRA_KIND}",
            reason="NoInfrastructure",
        )
    for obj in objects:
        m = obj.get("metadata") or {}
        if (obj.get("kind"), m.get("name"), m.get("namespace", "default")) == (
            INFRA_KIND,
            ref.get("name"),
            meta.get("namespace", "default"),
        ):
            address = str((obj.get("spec") or {}).get("address") or "")
            try:
                if "/" not in address:  # a bare address would be a /32: no segment at all
                    raise ValueError(address)
                _network(address)
            except ValueError:
                raise invalid(
                    f"{INFRA_KIND} {m.get('name')}",
                    "spec.address",
                    address,
                    "is not an address with a prefix like 192.168.57.10/24",
                    reason="InvalidAddress",
                ) from None
            return address
    raise TransientError(
        f"{INFRA_KIND} {show_value(ref.get('name'))} is not in the input",
        obj=where,
        field="spec.infrastructureRef",
        reason="InfrastructureMissing",
    )


def plan(
    objects: list[dict[str, Any]], options: RenderOptions
) -> tuple[list[Node], list[dict[str, Any]]]:
    """Render every Machine (init first); returns the nodes and the bootstrap-token Secrets
    that must exist in the workload cluster for the joins."""
    bundle = Bundle(objects)
    names = [f"{ns}/{name}" for ns, name in bundle.machines]
    batch = render_all(bundle, names, options)
    if batch.worst is not None:
        raise batch.worst
    results: list[RenderResult] = sorted(batch.results, key=lambda r: r.role != INIT)
    if not results or results[0].role != INIT:
        raise TerminalError(
            "the input has no control plane to init", obj="input", reason="NoInitMachine"
        )
    machines = {
        f"{(o.get('metadata') or {}).get('namespace', 'default')}/{o['metadata']['name']}": o
        for o in objects
        if o.get("kind") == "Machine"
    }
    nodes = []
    for index, result in enumerate(results):
        nodes.append(
            Node(
                machine=result.machine,
                name=result.machine.rpartition("/")[2],
                role=result.role,
                address=_infra_address(objects, machines[result.machine]),
                mac=f"52:54:00:57:00:{index + 10:02x}",
                userdata=result.userdata,
            )
        )
    tokens = [r.bootstrap_token_secret for r in results if r.bootstrap_token_secret]
    return nodes, tokens


def _boot(
    node: Node,
    image: Path,
    link: qemu.Link,
    accel: Accel,
    root: Path | None,
    memory: int,
    progress: Progress,
    forwards: tuple[str, ...] = (),
) -> None:
    node.state = qemu.up(
        image,
        node.userdata,
        name=node.name,
        machine=node.machine,
        accel=accel,
        memory=memory,
        root=root,
        progress=progress,
        link=link,
        network_config=network_config(node),
        forwards=forwards,
    )
    node.timeline["ssh"] = round(node.vm.ssh_ready_s or 0.0, 1)


def _since_start(node: Node, stamp: str | None) -> float | None:
    if not stamp:
        return None
    moment = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return round(moment - node.vm.started_at, 1)


def bootstrap_status(node: Node) -> dict[str, Any] | None:
    code, out, _ = ssh(node.vm, f"cat {STATUS_FILE} 2>/dev/null", timeout=30)
    return json.loads(out) if code == 0 and out.strip() else None


def wait_bootstrapped(node: Node, deadline: float, progress: Progress) -> dict[str, Any]:
    """Poll the node's bootstrap status until it is Succeeded; a Failed one stops the run.

    Every change of phase or attempt is shown; when the deadline passes, the tail of the
    node script's output is shown too, so a slow kubeadm can be told from a stuck one.
    """
    last: tuple[str, int] = ("", 0)
    while time.monotonic() < deadline:
        status = bootstrap_status(node)
        phase = (status or {}).get("phase", "Pending")
        if status and phase == "Succeeded":
            node.timeline["kubeadm"] = _since_start(node, status.get("finishedAt")) or 0.0
            return status
        if status and phase == "Failed":
            raise TerminalError(
                f"bootstrap failed: {status.get('reason')}: {status.get('message', '')[-300:]}",
                obj=node.machine,
                reason="BootstrapFailed",
            )
        attempts = int((status or {}).get("attempts") or 0)
        if (phase, attempts) != last:
            elapsed = time.time() - node.vm.started_at
            progress(
                f"cluster: {node.name}: bootstrap {phase} ({(status or {}).get('reason', '')}, "
                f"attempt {attempts}, {elapsed:.0f}s after qemu start)"
            )
            last = (phase, attempts)
        time.sleep(5)
    try:  # best effort: a node too stuck to answer must not hide the timeout itself
        _, tail, _ = ssh(node.vm, f"sudo tail -n 40 {BOOTSTRAP_LOG}", timeout=30)
        progress(f"cluster: {node.name}: last lines of {BOOTSTRAP_LOG}:\n{tail}")
    except (OSError, paramiko.SSHException) as exc:
        progress(f"cluster: {node.name}: could not read {BOOTSTRAP_LOG}: {exc}")
    raise TransientError(
        "bootstrap did not finish in time", obj=node.machine, reason="BootstrapTimeout"
    )


def _cloud_init_done(node: Node) -> None:
    code, out, _ = ssh(
        node.vm,
        "sudo cloud-init status --wait >/dev/null; stat -c %Y /run/cloud-init/result.json",
        timeout=600,
    )
    if code == 0 and out.strip().isdigit():
        node.timeline["cloudInit"] = round(int(out.strip()) - node.vm.started_at, 1)


def nodes_status(run: ClusterRun) -> dict[str, dict[str, Any]]:
    """Name -> the Node object, as the API server has it."""
    items = json.loads(run.kubectl("get", "nodes", "-o", "json"))["items"]
    return {item["metadata"]["name"]: item for item in items}


def _ready_since(node_obj: dict[str, Any]) -> str | None:
    for cond in (node_obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready" and cond.get("status") == "True":
            return str(cond.get("lastTransitionTime"))
    return None


def up(
    image: Path,
    objects: list[dict[str, Any]],
    *,
    accel: Accel,
    options: RenderOptions | None = None,
    root: Path | None = None,
    memory: int = qemu.DEFAULT_MEMORY_MB,
    timeout: float = 1800,
    progress: Progress = qemu._stderr,
    workers_wait: bool = True,
) -> ClusterRun:
    """Boot the bundle's cluster and return once every Node is Ready (or raise).

    ``workers_wait`` (the default) boots the workers only once the control plane has
    initialized. Under TCG a worker booting beside it halves the control plane's CPU, and
    kubeadm v1.20 gives the control plane a fixed 4 minutes to come up (seen: init retried
    at 515 s, then ran out of its deadline); a worker's timeline is then its own join, too.
    """
    # CABPK refreshes a join's token until the Machine has a Node; this harness does not, so
    # it asks for tokens that outlive a slow control-plane init under TCG.
    options = replace(options or RenderOptions(), token_ttl=max(
        (options or RenderOptions()).token_ttl, TOKEN_TTL))  # fmt: skip
    nodes, tokens = plan(objects, options)
    run = ClusterRun(nodes, root)
    deadline = time.monotonic() + timeout
    port = free_port()

    def boot(node: Node) -> None:
        link = qemu.Link(port, node is nodes[0], node.mac)
        _boot(node, image, link, accel, root, memory, progress)

    try:
        cp, workers = nodes[0], nodes[1:]
        boot(cp)
        with ThreadPoolExecutor(max_workers=max(1, len(workers))) as pool:
            # Workers boot while the control plane inits (their joins retry until it
            # answers), unless asked to wait: then their timelines measure a join alone.
            booting = [] if workers_wait else [pool.submit(boot, node) for node in workers]
            wait_bootstrapped(cp, deadline, progress)
            _cloud_init_done(cp)
            if tokens:  # CABPK's job: the joins' tokens exist in the workload cluster
                run.kubectl("apply", "-f", "-", stdin=dump_stream(tokens).decode())
                progress(f"cluster: {len(tokens)} bootstrap token Secret(s) created")
            if workers_wait:
                booting = [pool.submit(boot, node) for node in workers]
            for future in booting:
                future.result()
        for node in workers:
            wait_bootstrapped(node, deadline, progress)
            _cloud_init_done(node)
        wait_ready(run, deadline, progress)
        return run
    except BaseException:
        run.down()
        raise


def wait_ready(run: ClusterRun, deadline: float, progress: Progress) -> None:
    """Remove CAPI's uninitialized taint (as its Machine controller does), wait for Ready."""
    untainted: set[str] = set()
    while time.monotonic() < deadline:
        found = nodes_status(run)
        for node in run.nodes:
            obj = found.get(node.name)
            if obj is None:
                continue
            taints = [t.get("key") for t in (obj.get("spec") or {}).get("taints") or []]
            if UNINITIALIZED in taints and node.name not in untainted:
                run.kubectl("taint", "nodes", node.name, f"{UNINITIALIZED}:NoSchedule-")
                untainted.add(node.name)
            since = _ready_since(obj)
            if since and "ready" not in node.timeline:
                node.timeline["ready"] = _since_start(node, since) or 0.0
                progress(
                    f"cluster: {node.name} Ready ({node.timeline['ready']:.0f}s after qemu start)"
                )
        if all("ready" in n.timeline for n in run.nodes):
            return
        time.sleep(3)
    raise TransientError(
        "not every Node turned Ready in time", obj="cluster", reason="NodesNotReady"
    )


def static_pods(run: ClusterRun) -> dict[str, list[str]]:
    """Node name -> the static pods its kubelet runs (their mirror pods in the API server),
    kubeadm's and the user's files' alike."""
    items = json.loads(run.kubectl("get", "pods", "--all-namespaces", "-o", "json"))["items"]
    out: dict[str, list[str]] = {}
    for pod in items:
        meta = pod.get("metadata") or {}
        if "kubernetes.io/config.mirror" in (meta.get("annotations") or {}):
            node = str((pod.get("spec") or {}).get("nodeName") or "")
            out.setdefault(node, []).append(f"{meta.get('namespace')}/{meta.get('name')}")
    return {node: sorted(pods) for node, pods in out.items()}


def report(run: ClusterRun) -> dict[str, Any]:
    """What the cluster looks like through its API server, and each node's timeline."""
    found = nodes_status(run)
    mirrors = static_pods(run)
    out = []
    for node in run.nodes:
        obj = found.get(node.name, {})
        info = (obj.get("status") or {}).get("nodeInfo") or {}
        out.append(
            {
                "name": node.name,
                "machine": node.machine,
                "role": node.role,
                "address": node.address,
                "ready": _ready_since(obj) is not None,
                "kubelet": info.get("kubeletVersion"),
                "containerRuntime": info.get("containerRuntimeVersion"),
                "osImage": info.get("osImage"),
                "kernel": info.get("kernelVersion"),
                "labels": dict((obj.get("metadata") or {}).get("labels") or {}),
                "staticPods": mirrors.get(node.name, []),
                "timeline": node.timeline,
            }
        )
    return {"nodes": out, "ok": all(n["ready"] for n in out)}
