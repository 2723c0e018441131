"""The install YAML: what the API server made of it (the testbed applied it with kubectl)."""

from __future__ import annotations

import subprocess
import sys

import pytest
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
        ("Service", "nodesmith-webhook-service"),
        ("Issuer", "nodesmith-selfsigned-issuer"),
        ("Certificate", "nodesmith-serving-cert"),
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
        assert found["metadata"]["labels"]["cluster.x-k8s.io/v1beta2"] == "v1beta2"
        assert found["status"]["storedVersions"] == ["v1beta2"]
        assert found["spec"]["conversion"]["strategy"] == "Webhook"


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


def _manifests_cli(*flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bootstrap.cli", "controller", "manifests", *flags],
        capture_output=True,
        text=True,
        check=False,
    )


HTTPS, HTTP = "https://mgmt.example:8443", "http://mgmt.example:8443"
TLS_SECRET = "--report-tls-secret=reports-tls"
TLS_ARGS = [
    "--report-tls-cert=/etc/nodesmith/report-tls/tls.crt",
    "--report-tls-key=/etc/nodesmith/report-tls/tls.key",
]
CA_ARG = "--report-ca=/etc/nodesmith/report-tls/ca.crt"


def report_args(url: str) -> list[str]:
    return ["--report-bind=0.0.0.0:8443", f"--report-url={url}"]


WARNING = "crosses the network unencrypted"


@pytest.mark.parametrize(
    ("flags", "args", "service", "tls_secret", "warned"),
    [
        ([], [], None, None, False),
        (
            [f"--report-url={HTTPS}", TLS_SECRET],
            report_args(HTTPS) + TLS_ARGS + [CA_ARG],
            "LoadBalancer",
            "reports-tls",
            False,
        ),
        (
            [f"--report-url={HTTPS}", TLS_SECRET, "--no-report-tls-ca"],
            report_args(HTTPS) + TLS_ARGS,
            "LoadBalancer",
            "reports-tls",
            False,
        ),
        (
            [f"--report-url={HTTPS}", TLS_SECRET, "--report-service-type=NodePort"],
            report_args(HTTPS) + TLS_ARGS + [CA_ARG],
            "NodePort",
            "reports-tls",
            False,
        ),
        ([f"--report-url={HTTP}"], report_args(HTTP), "LoadBalancer", None, True),
        (
            [f"--report-url={HTTP}", "--report-service-type=ClusterIP"],
            report_args(HTTP),
            "ClusterIP",
            None,
            False,
        ),
    ],
)
def test_the_report_endpoint_in_the_manifests(
    flags: list[str], args: list[str], service: str | None, tls_secret: str | None, warned: bool
) -> None:
    result = _manifests_cli(*flags)
    assert result.returncode == 0, result.stderr
    assert (WARNING in result.stderr) is warned
    assert "&id" not in result.stdout  # no YAML aliases in an install file
    objects = list(yaml.safe_load_all(result.stdout))
    pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert [a for a in container["args"] if a.startswith("--report")] == args
    services = [o for o in objects if o["kind"] == "Service" and "reports" in o["metadata"]["name"]]
    assert [s["spec"]["type"] for s in services] == ([service] if service else [])
    for s in services:
        assert s["spec"]["selector"] == pod_labels(objects)
        assert s["spec"]["ports"] == [{"name": "reports", "port": 8443, "targetPort": "reports"}]
        assert s["spec"]["publishNotReadyAddresses"] is True  # a NotReady node's replica serves
    volumes = [v for v in pod["volumes"] if "secret" in v]
    assert [v["secret"]["secretName"] for v in volumes] == ([tls_secret] if tls_secret else [])


def pod_labels(objects: list[dict[str, object]]) -> object:
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    return deployment["spec"]["template"]["metadata"]["labels"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        ([TLS_SECRET], "without --report-url"),
        (["--report-url=mgmt.example:8443"], "--report-url"),
        ([f"--report-url={HTTPS}"], "add --report-tls-secret"),
        (["--report-url=https://m:1", "--report-tls-secret=Reports_TLS"], "--report-tls-secret"),
        (["--report-url=https://m:1", "--report-service-type=Ingress"], "--report-service-type"),
        (["--replicas=0"], "--replicas"),
    ],
)
def test_bad_manifests_flags_exit_2_naming_the_flag(flags: list[str], named: str) -> None:
    result = _manifests_cli(*flags)
    assert result.returncode == 2 and named in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_the_report_manifests_are_accepted_by_a_real_api_server(testbed: Testbed) -> None:
    # without cert-manager (this API server has none): the controller certifies its webhook
    out = _manifests_cli(f"--report-url={HTTPS}", TLS_SECRET, "--webhook-self-signed").stdout
    applied = testbed.kubectl("apply", "--dry-run=server", "-f", "-", stdin=out)
    assert "deployment.apps/nodesmith-controller configured (server dry run)" in applied
    assert "service/nodesmith-reports created (server dry run)" in applied


def test_self_signed_the_controller_may_patch_its_two_crds_and_no_other() -> None:
    result = _manifests_cli("--webhook-self-signed")
    assert result.returncode == 0, result.stderr
    objects = list(yaml.safe_load_all(result.stdout))
    assert not [o for o in objects if o["kind"] in ("Issuer", "Certificate")]
    (role,) = [o for o in objects if o["kind"] == "ClusterRole"]
    names = [
        "kubeadmconfigs.bootstrap.cluster.x-k8s.io",
        "kubeadmconfigtemplates.bootstrap.cluster.x-k8s.io",
    ]
    assert [r for r in role["rules"] if "apiextensions.k8s.io" in r["apiGroups"]] == [
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
         "resourceNames": names, "verbs": ["get", "patch"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions/status"],
         "resourceNames": names, "verbs": ["patch"]},
    ]  # fmt: skip
    for crd in (o for o in objects if o["kind"] == "CustomResourceDefinition"):
        assert "annotations" not in crd["metadata"]  # no cert-manager injector to ask
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--webhook-self-signed" in container["args"]
    assert container["readinessProbe"]["httpGet"] == {
        "path": "/healthz", "port": "webhook-server", "scheme": "HTTPS",
    }  # fmt: skip
