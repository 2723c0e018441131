"""Build test bundles whose worker Machines carry the kubeadm stand-in in their ``files``.

The stand-in reaches the node the way any user file does: as a KubeadmConfig ``files`` entry
that cloud-init writes. Its behaviour comes from a second file, ``/etc/nodesmith-standin/
kubeadm.json``, so each Machine can be told to succeed, fail transiently N times, or fail
terminally. The retry annotations shorten the bootstrap script's backoff for the tests.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
STANDIN = Path(__file__).resolve().parent / "kubeadm"
STANDIN_PATH = "/usr/local/bin/kubeadm"
CONTROL_PATH = "/etc/nodesmith-standin/kubeadm.json"
STATUS = "/run/cluster-api/bootstrap-status.json"
SENTINEL = "/run/cluster-api/bootstrap-success.complete"
CALLS = "/var/lib/kubeadm-standin/calls.jsonl"
BOOTSTRAP = "/usr/local/sbin/nodesmith-bootstrap"
BOOTSTRAP_CONFIG = "/run/kubeadm/nodesmith-bootstrap.json"


def _load(name: str) -> list[dict[str, Any]]:
    text = (REPO / "examples" / name).read_text(encoding="utf-8")
    return [d for d in yaml.safe_load_all(text) if d]


def standin_files(control: dict[str, Any]) -> list[dict[str, Any]]:
    """The two KubeadmConfig ``files`` entries: the stand-in and what it should do."""
    return [
        {
            "path": STANDIN_PATH,
            "owner": "root:root",
            "permissions": "0755",
            "content": STANDIN.read_text(encoding="utf-8"),
        },
        {
            "path": CONTROL_PATH,
            "owner": "root:root",
            "permissions": "0644",
            "content": json.dumps(control) + "\n",
        },
    ]


def worker_bundle(
    dest: Path, machines: dict[str, dict[str, Any]], *, backoff: int = 1, deadline: int = 120
) -> Path:
    """Write examples' Cluster (initialized) plus one worker Machine/KubeadmConfig per entry of
    ``machines`` (name -> stand-in control) to ``dest/bundle.yaml``."""
    objects = _load("cluster.yaml")
    # The stand-in control plane "exists": the workers join now instead of waiting for it.
    cluster = next(o for o in objects if o["kind"] == "Cluster")
    cluster["status"] = {"conditions": [{"type": "ControlPlaneInitialized", "status": "True"}]}
    worker = _load("worker.yaml")
    machine = next(o for o in worker if o["kind"] == "Machine")
    config = next(o for o in worker if o["kind"] == "KubeadmConfig")
    others = [o for o in worker if o["kind"] not in ("Machine", "KubeadmConfig")]
    for name, control in machines.items():
        m = copy.deepcopy(machine)
        m["metadata"]["name"] = name
        m["metadata"].setdefault("annotations", {}).update(
            {
                "bootstrap.nodesmith.dev/retry-backoff": str(backoff),
                "bootstrap.nodesmith.dev/retry-deadline": str(deadline),
            }
        )
        m["spec"]["bootstrap"]["configRef"]["name"] = name
        m["spec"]["infrastructureRef"]["name"] = name
        c = copy.deepcopy(config)
        c["metadata"]["name"] = name
        c["spec"]["files"] = list(c["spec"].get("files", [])) + standin_files(control)
        objects += [m, c]
    objects += others
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / "bundle.yaml"
    out.write_text(yaml.safe_dump_all(objects, sort_keys=False), encoding="utf-8")
    return out
