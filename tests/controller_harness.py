"""A management cluster and a workload cluster for the controller's tests and benchmark.

Both are real kube-apiservers v1.20.2 from the project's Kubernetes build over one Debian etcd
(the workload under its own prefix), RBAC on. The provider is installed the way an operator
installs it: ``nodesmith controller manifests | kubectl apply -f -`` with the build's kubectl,
plus the Cluster API core CRDs nodesmith writes (``bootstrap.controller.capi_crds``). The
controller runs as its own process (``nodesmith controller run``) acting as the manifests'
ServiceAccount, so RBAC judges the manifests' rules for real.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from bootstrap.controller import capi_crds, kube
from bootstrap.controller.manifests import (
    NAMESPACE,
    SA_GROUPS,
    SA_USER,
    Webhook,
    manifests,
    render_yaml,
)
from bootstrap.hostutil import free_port
from bootstrap.kubernetes.apiserver import APIServer, Etcd
from bootstrap.render import pki

VERSION = "v1.20.2"

Obj = dict[str, Any]


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60, every: float = 0.2) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


def start_webhook(kubeconfig: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    """``nodesmith controller webhook`` (self-signed, for 127.0.0.1), up when its CA is in the
    CRDs and it answers."""
    import ssl
    import urllib.request

    out = log.open("ab")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bootstrap.cli",
            "controller",
            "webhook",
            f"--kubeconfig={kubeconfig}",
            f"--leader-election-namespace={NAMESPACE}",
            f"--webhook-bind=127.0.0.1:{port}",
            "--webhook-self-signed",
            "--webhook-name=127.0.0.1",
        ],
        stdout=out,
        stderr=subprocess.STDOUT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    insecure = ssl.create_default_context()
    insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE

    def answers() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"the webhook exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(
                f"https://127.0.0.1:{port}/healthz", timeout=2, context=insecure
            ) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    wait_for("the conversion webhook", answers, timeout=60)
    return process


class ControllerProcess:
    """``nodesmith controller run`` as a child process, its JSON log in a file."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self.metrics_port = free_port()
        env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        self._out = log.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bootstrap.cli",
                "controller",
                "run",
                *args,
                f"--metrics-bind=127.0.0.1:{self.metrics_port}",
            ],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env=env,
        )

    def lines(self) -> list[Obj]:
        out = []
        for raw in self.log.read_text(errors="replace").splitlines():
            try:
                doc = json.loads(raw)
            except ValueError:
                continue
            if isinstance(doc, dict):
                out.append(doc)
        return out

    def reconciles(self, config: str | None = None) -> list[Obj]:
        return [
            line
            for line in self.lines()
            if line.get("event") == "reconcile" and (config is None or line["config"] == config)
        ]

    def last(self, config: str, result: str | None = None) -> Obj | None:
        """The latest reconcile line of ``config`` (of that ``result``, if given), or None."""
        lines = [r for r in self.reconciles(config) if result is None or r["result"] == result]
        return lines[-1] if lines else None

    def metrics(self) -> str:
        import urllib.request

        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return str(response.read().decode())
        except OSError:  # not listening yet (the process is starting)
            return ""

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 40) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            return self.process.wait(timeout=timeout)
        finally:
            self._out.close()

    def alive(self) -> bool:
        return self.process.poll() is None


class Testbed:
    """etcd + a management and a workload kube-apiserver, the provider installed."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self, workdir: Path, bin_dir: Path) -> None:
        self.workdir = workdir
        self.bin_dir = bin_dir
        self.etcd = Etcd(workdir / "etcd")
        self.management = APIServer(
            bin_dir / "kube-apiserver",
            workdir / "management",
            self.etcd,
            users={SA_USER: SA_GROUPS},
        )
        self.workload = APIServer(
            bin_dir / "kube-apiserver", workdir / "workload", self.etcd, prefix="/workload"
        )
        self.processes: list[ControllerProcess] = []
        self.webhook_port = free_port()
        self.webhook: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.etcd.start()
        self.management.start()
        self.workload.start()
        self.admin = kube.Api(kube.connect(self.management.kubeconfig_dict()))
        self.workload_admin = kube.Api(kube.connect(self.workload.kubeconfig_dict()))
        # the conversion webhook outside the cluster: the CRDs name its URL, and it makes its
        # own certificate and writes the CA into them, as the provider's Pod does without
        # cert-manager; one for the session (the tests read and write v1beta1 through it)
        hook = Webhook(self_signed=True, url=f"https://127.0.0.1:{self.webhook_port}/convert")
        self.kubectl("apply", "-f", "-", stdin=render_yaml(manifests("nodesmith:test", hook=hook)))
        self.kubectl("apply", "-f", "-", stdin=capi_crds.render_yaml())
        for crd in (
            "kubeadmconfigs.bootstrap.cluster.x-k8s.io",
            "clusters.cluster.x-k8s.io",
            "machines.cluster.x-k8s.io",
        ):
            self.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd}")
        self.webhook = start_webhook(
            self.management.kubeconfig(SA_USER), self.webhook_port, self.workdir / "webhook.log"
        )
        probe = {
            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
            "kind": "KubeadmConfig",
            "metadata": {"name": "conversion-probe", "namespace": "default"},
            "spec": {},
        }

        def converts() -> bool:  # the API server has the CA (a CRD update takes a moment)
            try:
                self.kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(probe))
            except AssertionError:
                return False
            return True

        wait_for("the API server to trust the conversion webhook", converts, timeout=60)

    def stop(self) -> None:
        if self.webhook is not None and self.webhook.poll() is None:
            self.webhook.kill()
            self.webhook.wait()
        for process in self.processes:
            if process.alive():
                process.stop(signal.SIGKILL)
        self.management.stop()
        self.workload.stop()
        self.etcd.stop()

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run(
            [
                str(self.bin_dir / "kubectl"),
                f"--kubeconfig={self.management.kubeconfig()}",
                *args,
            ],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: {result.stderr}")
        return result.stdout

    def controller(
        self, *extra: str, name: str = "controller", env: dict[str, str] | None = None
    ) -> ControllerProcess:
        """Start a replica acting as the provider's ServiceAccount."""
        args = [
            f"--kubeconfig={self.management.kubeconfig(SA_USER)}",
            f"--leader-election-namespace={NAMESPACE}",
            "--lease-duration=4s",
            "--lease-renew=1s",
            f"--identity={name}",
            *extra,
        ]
        process = ControllerProcess(args, self.workdir / f"{name}.log", env)
        self.processes.append(process)
        return process

    # ------------------------------------------------------------------ objects

    def namespace(self, name: str) -> str:
        self.admin.create(kube.Namespace, {"metadata": {"name": name}})
        return name

    def cluster(
        self,
        namespace: str,
        name: str,
        *,
        infrastructure_ready: bool = True,
        initialized: bool = False,
        paused: bool = False,
        kubeconfig: bool = True,
    ) -> Obj:
        obj = self.admin.create(
            kube.Cluster,
            {
                "apiVersion": "cluster.x-k8s.io/v1beta1",
                "kind": "Cluster",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {
                    "paused": paused,
                    "clusterNetwork": {
                        "pods": {"cidrBlocks": ["10.244.0.0/16"]},
                        "services": {"cidrBlocks": ["10.96.0.0/12"]},
                        "serviceDomain": "cluster.local",
                    },
                    "controlPlaneEndpoint": {"host": "192.168.57.10", "port": 6443},
                },
            },
        )
        self.set_cluster_status(namespace, name, infrastructure_ready, initialized)
        if initialized:  # its init happened elsewhere: the CA Secrets it left behind
            for secret in pki.pki_secrets(name, namespace, pki.generate_cluster_pki(name)):
                self.admin.create(kube.Secret, secret)
        if kubeconfig:
            self.kubeconfig_secret(namespace, name)
        return obj

    def set_cluster_status(
        self, namespace: str, name: str, infrastructure_ready: bool, initialized: bool
    ) -> None:
        conditions = (
            [
                {
                    "type": "ControlPlaneInitialized",
                    "status": "True",
                    "lastTransitionTime": "2026-12-05T00:00:00Z",
                }
            ]
            if initialized
            else []
        )
        self.admin.merge_patch(
            kube.Cluster,
            name,
            namespace,
            {"status": {"infrastructureReady": infrastructure_ready, "conditions": conditions}},
            status=True,
        )

    def kubeconfig_secret(self, namespace: str, cluster: str) -> None:
        """``<cluster>-kubeconfig``: the workload API server (as CAPI writes it)."""
        value = yaml.safe_dump(self.workload.kubeconfig_dict())
        self.admin.create(
            kube.Secret,
            {
                "metadata": {
                    "name": f"{cluster}-kubeconfig",
                    "namespace": namespace,
                    "labels": {"cluster.x-k8s.io/cluster-name": cluster},
                },
                "type": "cluster.x-k8s.io/secret",
                "data": {"value": base64.b64encode(value.encode()).decode()},
            },
        )

    def machine(
        self,
        namespace: str,
        name: str,
        cluster: str,
        *,
        control_plane: bool = False,
        version: str = VERSION,
    ) -> Obj:
        labels = {"cluster.x-k8s.io/cluster-name": cluster}
        if control_plane:
            labels["cluster.x-k8s.io/control-plane"] = ""
        return self.admin.create(
            kube.Machine,
            {
                "apiVersion": "cluster.x-k8s.io/v1beta1",
                "kind": "Machine",
                "metadata": {"name": name, "namespace": namespace, "labels": labels},
                "spec": {
                    "clusterName": cluster,
                    "version": version,
                    "bootstrap": {
                        "configRef": {
                            "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
                            "kind": "KubeadmConfig",
                            "name": name,
                        }
                    },
                },
            },
        )

    def config(
        self, namespace: str, name: str, machine: Obj | None, spec: Obj | None = None
    ) -> Obj:
        meta: Obj = {
            "name": name,
            "namespace": namespace,
        }
        if machine is not None:
            meta["ownerReferences"] = [
                {
                    "apiVersion": "cluster.x-k8s.io/v1beta1",
                    "kind": "Machine",
                    "name": machine["metadata"]["name"],
                    "uid": machine["metadata"]["uid"],
                }
            ]
        return self.admin.create(
            kube.KubeadmConfigV1Beta1,
            {
                "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
                "kind": "KubeadmConfig",
                "metadata": meta,
                "spec": spec or {},
            },
        )

    def node(
        self,
        namespace: str,
        name: str,
        cluster: str,
        *,
        control_plane: bool = False,
        spec: Obj | None = None,
        version: str = VERSION,
    ) -> tuple[Obj, Obj]:
        """A Machine and its KubeadmConfig, owned by it."""
        machine = self.machine(
            namespace, name, cluster, control_plane=control_plane, version=version
        )
        return machine, self.config(namespace, name, machine, spec)

    def get_config(self, namespace: str, name: str) -> Obj:
        found = self.admin.get(kube.KubeadmConfigV1Beta1, name, namespace)
        assert found is not None, f"KubeadmConfig {namespace}/{name} is gone"
        return found

    def status(self, namespace: str, name: str) -> Obj:
        return dict(self.get_config(namespace, name).get("status") or {})

    def condition(self, namespace: str, name: str, type_: str) -> Obj | None:
        for c in self.status(namespace, name).get("conditions") or []:
            if c.get("type") == type_:
                return dict(c)
        return None

    def userdata(self, namespace: str, name: str) -> str:
        secret = self.admin.get(kube.Secret, name, namespace)
        assert secret is not None, f"no data Secret {namespace}/{name}"
        return base64.b64decode(secret["data"]["value"]).decode()

    def secrets(self, namespace: str) -> list[Obj]:
        return [dict(s) for s in self.admin.client.list(kube.Secret, namespace=namespace)]
