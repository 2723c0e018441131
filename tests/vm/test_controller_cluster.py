"""The real cluster from the controller's data (CABPK's role), each outcome reported back.

``nodesmith vm cluster --via-controller`` stands up a management cluster (the project's
kube-apiserver v1.20.2 over Debian's etcd), installs the provider from its manifests, applies
examples/ there and runs ``nodesmith controller run``; each VM boots from the data Secret the
controller wrote, the worker's bootstrap token is created by the controller in the real workload
cluster, ``kubeadm init``/``join`` run for real, and each node's bootstrap script reports its
outcome to the controller, which records ``BootstrapSucceeded`` on the KubeadmConfig.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NODESMITH = str(REPO / ".venv" / "bin" / "nodesmith")

pytestmark = pytest.mark.vm


def test_nodes_ready_from_the_controllers_secrets_and_their_reports_recorded(
    cluster_image: Path, tmp_path: Path
) -> None:
    out = tmp_path / "cluster.json"
    proc = subprocess.run(
        [
            NODESMITH,
            "vm",
            "cluster",
            str(cluster_image / "image.qcow2"),
            "-f",
            str(REPO / "examples"),
            "--via-controller",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=3000,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-6000:]
    result = json.loads(out.read_text())
    assert result["ok"] is True
    assert {(n["name"], n["role"], n["ready"], n["kubelet"]) for n in result["nodes"]} == {
        ("demo-cp-0", "init-control-plane", True, "v1.20.2"),
        ("demo-md-0", "worker-join", True, "v1.20.2"),
    }
    # the worker's pre-command edited the kubeadm file where CABPK writes it (sed -i), and the
    # real kubeadm joined with the edit; the static pod from its files runs under its kubelet
    worker = next(n for n in result["nodes"] if n["name"] == "demo-md-0")
    assert worker["labels"]["nodesmith.dev/kubeadm-file"] == "edited"
    assert "kube-system/nodesmith-static-demo-md-0" in worker["staticPods"]
    # each node's own report, recorded by the controller on its KubeadmConfig
    assert result["management"]["bootstrapSucceeded"] == {
        "default/demo-cp-0": {"status": "True", "reason": "Bootstrapped"},
        "default/demo-md-0": {"status": "True", "reason": "Bootstrapped"},
    }
    assert "bootstrap data from Secret default/demo-cp-0" in proc.stderr
    assert "bootstrap data from Secret default/demo-md-0" in proc.stderr
    # the stopped management cluster leaves its logs, not its state (CA keys, tokens)
    (line,) = [x for x in proc.stderr.splitlines() if "management cluster and controller logs" in x]
    workdir = Path(line.rsplit(": ", 1)[1])
    left = sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*") if p.is_file())
    assert left == ["controller.log", "etcd/etcd.log", "management/kube-apiserver.log"]
