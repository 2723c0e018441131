"""A clusterctl provider release: ``metadata.yaml`` and ``bootstrap-components.yaml``.

``clusterctl init --bootstrap nodesmith`` installs a provider from these two files, and checks
them against its contract (cluster-api's ``contracts/clusterctl.md``):

- ``metadata.yaml``: ``clusterctl.cluster.x-k8s.io/v1alpha3`` ``Metadata`` whose
  ``releaseSeries`` maps this release's ``major.minor`` to the Cluster API contract it speaks
  (strictly validated since clusterctl 1.11);
- ``bootstrap-components.yaml``: exactly one Namespace; every object labelled
  ``cluster.x-k8s.io/provider: bootstrap-nodesmith`` (how clusterctl finds, upgrades and deletes
  a provider's objects); settings as ``${VAR:=default}`` variables prefixed with the provider's
  name, which clusterctl substitutes; the Deployment's container named ``manager``, taking
  ``--namespace`` (the watched namespace; empty: all);
- webhooks certified by cert-manager (a ``Certificate`` and the ``inject-ca-from`` annotation on
  the CRDs), which ``clusterctl init`` installs first.

The objects are the provider's install YAML (``manifests``) with those additions, so what
clusterctl installs and what ``controller manifests | kubectl apply`` installs are one thing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bootstrap import __version__
from bootstrap.controller.manifests import NAMESPACE, ReportEndpoint, manifests, render_yaml
from bootstrap.fsutil import atomic_write

Obj = dict[str, Any]

PROVIDER = "bootstrap-nodesmith"
PROVIDER_LABEL = "cluster.x-k8s.io/provider"
# The contract of the stored version (Cluster API 1.11+); the CRDs serve v1beta1 too, converted
# by the webhook, and carry both contract labels.
CONTRACT = "v1beta2"
# clusterctl variables: name -> default (the manager's flag each one sets)
VARIABLES = {
    "NODESMITH_WATCH_NAMESPACE": ("--namespace", ""),
    "NODESMITH_BOOTSTRAP_TOKEN_TTL": ("--bootstrap-token-ttl", "15m"),
}


def metadata(version: str = __version__) -> Obj:
    major, minor = (int(part) for part in version.split(".")[:2])
    return {
        "apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3",
        "kind": "Metadata",
        "releaseSeries": [{"major": major, "minor": minor, "contract": CONTRACT}],
    }


def components(image: str, replicas: int = 2, report: ReportEndpoint | None = None) -> list[Obj]:
    """The install YAML as clusterctl expects it: labelled, variables in the manager's args."""
    objects = manifests(image, NAMESPACE, replicas, report)
    for obj in objects:
        obj["metadata"].setdefault("labels", {})[PROVIDER_LABEL] = PROVIDER
        if obj["kind"] == "Deployment":
            template = obj["spec"]["template"]
            template["metadata"]["labels"][PROVIDER_LABEL] = PROVIDER
            (manager,) = template["spec"]["containers"]
            manager["args"] += [
                f"{flag}=${{{name}:={default}}}" for name, (flag, default) in VARIABLES.items()
            ]
    return objects


def write_release(
    directory: Path, image: str, replicas: int = 2, report: ReportEndpoint | None = None
) -> list[Path]:
    """Write both files into ``directory`` (each complete or not at all); returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        directory / "metadata.yaml": render_yaml([metadata()]),
        directory / "bootstrap-components.yaml": render_yaml(components(image, replicas, report)),
    }
    for path, text in files.items():
        atomic_write(path, text.encode(), mode=0o644)
    return list(files)
