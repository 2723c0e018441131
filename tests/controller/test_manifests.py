"""The install YAML: what the API server made of it (the testbed applied it with kubectl)."""

from __future__ import annotations

import subprocess
import sys

import yaml
from controller_harness import Testbed

from bootstrap.controller import kube
from bootstrap.controller.manifests import manifests


def test_manifests_command_prints_the_objects_in_apply_order() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bootstrap.cli", "controller", "manifests", "--image", "img:1"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    kinds = [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out)]
    assert kinds == [
        ("Namespace", "nodesmith-system"),
        ("CustomResourceDefinition", "kubeadmconfigs.bootstrap.cluster.x-k8s.io"),
        ("CustomResourceDefinition", "kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io"),
        ("ServiceAccount", "nodesmith-controller"),
        ("ClusterRole", "nodesmith-controller"),
        ("ClusterRoleBinding", "nodesmith-controller"),
        ("Role", "nodesmith-leader-election"),
        ("RoleBinding", "nodesmith-leader-election"),
        ("Deployment", "nodesmith-controller"),
    ]
    deployment = list(yaml.safe_load_all(out))[-1]
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "img:1"


def test_the_crds_are_structural_and_established_on_a_real_api_server(testbed: Testbed) -> None:
    for crd in manifests("x")[1:3]:
        found = testbed.admin.get(kube.CRD, crd["metadata"]["name"])
        assert found is not None
        conditions = {c["type"]: c["status"] for c in found["status"]["conditions"]}
        assert conditions.get("Established") == "True"
        assert conditions.get("NonStructuralSchema", "False") == "False"
        assert found["metadata"]["labels"]["cluster.x-k8s.io/v1beta1"] == "v1beta1"


def test_the_schema_refuses_a_wrong_type_naming_the_field(testbed: Testbed, ns: str) -> None:
    result = subprocess.run(
        [
            str(testbed.bin_dir / "kubectl"),
            f"--kubeconfig={testbed.management.kubeconfig()}",
            "apply",
            "--validate=false",  # the API server's own schema check, not kubectl's copy
            "-f",
            "-",
        ],
        input=yaml.safe_dump(
            {
                "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
                "kind": "KubeadmConfig",
                "metadata": {"name": "typed", "namespace": ns},
                "spec": {"format": "zip", "verbosity": "loud"},
            }
        ),
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "spec.format" in result.stderr and "spec.verbosity" in result.stderr


def test_the_controller_runs_with_exactly_the_manifests_rbac(testbed: Testbed) -> None:
    """The testbed's controllers act as the manifests' ServiceAccount; RBAC denies the rest."""
    from bootstrap.controller.manifests import SA_USER

    sa = kube.Api(kube.connect(testbed.management.kubeconfig_dict(SA_USER)))
    from lightkube import ApiError

    try:
        sa.create(kube.Namespace, {"metadata": {"name": "not-allowed"}})
    except ApiError as exc:
        assert kube.status_code(exc) == 403
    else:
        raise AssertionError("the controller's ServiceAccount may create Namespaces")
