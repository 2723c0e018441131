"""The clusterctl release (``controller manifests --clusterctl DIR``), rule by rule of
clusterctl's provider contract, and applied to a real API server as clusterctl would apply it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from controller_harness import Testbed, wait_for

from bootstrap import __version__

VARIABLE = re.compile(r"\$\{([A-Za-z0-9_]+)(:=([^}]*))?\}")


def _release(tmp_path: Path) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    out = subprocess.run(
        [sys.executable, "-m", "bootstrap.cli", "controller", "manifests", "--image", "img:1",
         "--clusterctl", str(tmp_path / "release")],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    names = ("metadata.yaml", "bootstrap-components.yaml")
    assert out == [str(tmp_path / "release" / n) for n in names]
    text = (tmp_path / "release" / "bootstrap-components.yaml").read_text()
    metadata = yaml.safe_load((tmp_path / "release" / "metadata.yaml").read_text())
    return metadata, [d for d in yaml.safe_load_all(text) if d], text


def test_metadata_maps_this_release_to_its_contract(tmp_path: Path) -> None:
    metadata, _, _ = _release(tmp_path)
    major, minor = (int(p) for p in __version__.split(".")[:2])
    assert metadata == {
        "apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3",
        "kind": "Metadata",
        "releaseSeries": [{"major": major, "minor": minor, "contract": "v1beta2"}],
    }


def test_components_follow_the_provider_contract(tmp_path: Path) -> None:
    _, objects, text = _release(tmp_path)
    rules = {
        "exactly one Namespace": [o["metadata"]["name"] for o in objects
                                  if o["kind"] == "Namespace"] == ["nodesmith-system"],
        "the provider label on every object": all(
            o["metadata"]["labels"]["cluster.x-k8s.io/provider"] == "bootstrap-nodesmith"
            for o in objects),
        "every variable prefixed and defaulted": all(
            name.startswith("NODESMITH_") and default is not None
            for name, default, _ in VARIABLE.findall(text)) and bool(VARIABLE.findall(text)),
    }  # fmt: skip
    assert rules == dict.fromkeys(rules, True)
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    # the selector stays the plain install's: it is immutable, so an upgrade between the two
    assert deployment["spec"]["selector"] == {
        "matchLabels": {"app.kubernetes.io/name": "nodesmith-controller"}
    }
    (manager,) = deployment["spec"]["template"]["spec"]["containers"]
    assert manager["name"] == "manager"
    assert "--namespace=${NODESMITH_WATCH_NAMESPACE:=}" in manager["args"]
    assert "--bootstrap-token-ttl=${NODESMITH_BOOTSTRAP_TOKEN_TTL:=15m}" in manager["args"]


def test_the_webhook_is_certified_by_cert_manager(tmp_path: Path) -> None:
    """clusterctl installs cert-manager first: its Certificate writes the Secret the manager
    serves with, its CA injector fills the CRDs' caBundle, both named consistently."""
    _, objects, _ = _release(tmp_path)
    (cert,) = [o for o in objects if o["kind"] == "Certificate"]
    (issuer,) = [o for o in objects if o["kind"] == "Issuer"]
    (service,) = [o for o in objects if o["kind"] == "Service"]
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (manager,) = deployment["spec"]["template"]["spec"]["containers"]
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    ns, svc = "nodesmith-system", service["metadata"]["name"]
    assert cert["spec"]["issuerRef"] == {"kind": "Issuer", "name": issuer["metadata"]["name"]}
    assert cert["spec"]["dnsNames"] == [f"{svc}.{ns}.svc", f"{svc}.{ns}.svc.cluster.local"]
    assert f"--webhook-secret={cert['spec']['secretName']}" in manager["args"]
    assert "--webhook-self-signed" not in manager["args"]
    (role,) = [o for o in objects if o["kind"] == "ClusterRole"]
    crd_rules = {r["resources"][0]: r["verbs"] for r in role["rules"]
                 if "apiextensions.k8s.io" in r["apiGroups"]}  # fmt: skip
    # the CRDs read, their storedVersions written (migration): the caBundle is cert-manager's
    assert crd_rules == {
        "customresourcedefinitions": ["get"], "customresourcedefinitions/status": ["patch"],
    }  # fmt: skip
    for crd in crds:
        assert crd["metadata"]["annotations"] == {
            "cert-manager.io/inject-ca-from": f"{ns}/{cert['metadata']['name']}"
        }
        assert crd["metadata"]["labels"]["cluster.x-k8s.io/v1beta1"] == "v1beta1"
        assert crd["metadata"]["labels"]["cluster.x-k8s.io/v1beta2"] == "v1beta2"
        versions = {v["name"]: v["storage"] for v in crd["spec"]["versions"]}
        assert versions == {"v1beta1": False, "v1beta2": True}
        hook = crd["spec"]["conversion"]["webhook"]
        assert hook["clientConfig"]["service"] == {
            "name": svc, "namespace": ns, "path": "/convert", "port": 443,
        }  # fmt: skip


def test_a_release_refuses_a_namespace_of_its_own(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bootstrap.cli", "controller", "manifests", "--namespace", "x",
         "--clusterctl", str(tmp_path / "r")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 2
    assert "--namespace" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "r").exists()


def test_components_with_their_defaults_apply_to_a_real_api_server(
    testbed: Testbed, tmp_path: Path
) -> None:
    _, _, text = _release(tmp_path)
    substituted = VARIABLE.sub(lambda m: m.group(3) or "", text)  # clusterctl's defaults
    # this API server has no cert-manager: its two objects are checked above, not applied
    docs = [
        d for d in yaml.safe_load_all(substituted) if d["kind"] not in ("Issuer", "Certificate")
    ]
    out = testbed.kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump_all(docs))
    assert "deployment.apps/nodesmith-controller" in out


def test_a_controller_watching_one_namespace_leaves_the_others(testbed: Testbed) -> None:
    mine, other = testbed.namespace("watched"), testbed.namespace("unwatched")
    for ns in (mine, other):
        testbed.cluster(ns, "w", initialized=True)
        testbed.node(ns, "w-0", "w")
    controller = testbed.controller(f"--namespace={mine}", name="one-namespace")
    try:
        wait_for("the watched config", lambda: testbed.status(mine, "w-0").get("ready"))
        # its informers list and watch only that namespace: the other is never even seen
        assert controller.reconciles() and all(
            r["config"].startswith(f"{mine}/") for r in controller.reconciles()
        )
        assert testbed.status(other, "w-0") == {}
    finally:
        assert controller.stop() == 0
