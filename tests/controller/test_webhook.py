"""The conversion webhook, for real: the session's API server converts through it (the
testbed's ``nodesmith controller webhook``), and a webhook without its certificate refuses to
start naming the Secret."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import pytest
from controller_harness import Testbed, wait_for
from lightkube import ApiError

from bootstrap.controller import kube, servingcert
from bootstrap.controller.manifests import NAMESPACE, SA_USER
from bootstrap.errors import EXIT_TERMINAL, EXIT_TRANSIENT
from bootstrap.hostutil import free_port

V1 = f"{kube.GROUP}/v1beta1"
SPEC_V1: dict[str, Any] = {
    "clusterConfiguration": {
        "apiServer": {
            "extraArgs": {"v": "2", "audit-log-maxage": "7"},
            "timeoutForControlPlane": "20m",
        },
        "kubernetesVersion": "v1.20.2",
    },
    "joinConfiguration": {"discovery": {"timeout": "5m0s"}},
    "useExperimentalRetryJoin": True,
}


def _config(ns: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": V1, "kind": "KubeadmConfig",
            "metadata": {"name": name, "namespace": ns}, "spec": spec}  # fmt: skip


def test_the_api_server_stores_v1beta2_and_serves_v1beta1_back_unchanged(
    testbed: Testbed, ns: str
) -> None:
    testbed.admin.create(kube.KubeadmConfigV1Beta1, _config(ns, "conv", SPEC_V1))
    stored = testbed.admin.get(kube.KubeadmConfig, "conv", ns)
    assert stored is not None
    spec = stored["spec"]
    assert spec["clusterConfiguration"]["apiServer"] == {
        "extraArgs": [{"name": "audit-log-maxage", "value": "7"}, {"name": "v", "value": "2"}]
    }
    assert spec["initConfiguration"]["timeouts"]["controlPlaneComponentHealthCheckSeconds"] == 1200
    assert spec["joinConfiguration"]["timeouts"]["tlsBootstrapSeconds"] == 300
    assert "useExperimentalRetryJoin" not in spec
    # what v1beta2 cannot hold is kept for the way back, and comes back exactly
    assert "cluster.x-k8s.io/conversion-data" in stored["metadata"]["annotations"]
    back = testbed.admin.get(kube.KubeadmConfigV1Beta1, "conv", ns)
    assert back is not None
    assert back["spec"] == SPEC_V1
    assert "cluster.x-k8s.io/conversion-data" not in (back["metadata"].get("annotations") or {})


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"initConfiguration": {"bootstrapTokens": [{"ttl": "a day"}]}},
         "spec.initConfiguration.bootstrapTokens[0].ttl"),
        ({"clusterConfiguration": {"apiServer": {"extraArgs": {"v": 2}}}},
         "spec.clusterConfiguration.apiServer.extraArgs"),
    ],
)  # fmt: skip
def test_an_unconvertible_object_is_refused_naming_the_field(
    testbed: Testbed, ns: str, spec: dict[str, Any], field: str
) -> None:
    with pytest.raises(ApiError) as refused:
        testbed.admin.create(kube.KubeadmConfigV1Beta1, _config(ns, "bad", spec))
    assert field in str(refused.value.status.message)
    assert testbed.admin.get(kube.KubeadmConfig, "bad", ns) is None


def test_the_webhook_answers_a_review_over_tls_its_ca_trusts(testbed: Testbed) -> None:
    """The CA the CRDs carry (written there by the webhook itself) verifies its certificate."""
    crd = testbed.admin.get(kube.CRD, f"kubeadmconfigs.{kube.GROUP}")
    assert crd is not None
    bundle = crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"]
    context = ssl.create_default_context(cadata=base64.b64decode(bundle).decode())
    review = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {"uid": "u-1", "desiredAPIVersion": f"{kube.GROUP}/v1beta2",
                    "objects": [_config("default", "x", {"verbosity": 3})]},
    }  # fmt: skip
    request = urllib.request.Request(
        f"https://127.0.0.1:{testbed.webhook_port}/convert",
        data=json.dumps(review).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        answer = json.loads(response.read())
    assert answer["response"]["uid"] == "u-1"
    assert answer["response"]["result"] == {"status": "Success"}
    (converted,) = answer["response"]["convertedObjects"]
    assert (converted["apiVersion"], converted["spec"]) == (
        f"{kube.GROUP}/v1beta2",
        {"verbosity": 3},
    )


def _webhook(testbed: Testbed, secret: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bootstrap.cli", "controller", "webhook",
         f"--kubeconfig={testbed.management.kubeconfig(SA_USER)}",
         f"--leader-election-namespace={NAMESPACE}", f"--webhook-bind=127.0.0.1:{free_port()}",
         f"--webhook-secret={secret}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_a_webhook_without_its_certificate_refuses_to_start_naming_the_secret(
    testbed: Testbed,
) -> None:
    missing = _webhook(testbed, "no-such-cert")
    assert missing.returncode == EXIT_TRANSIENT  # cert-manager may not have issued it yet
    assert f"Secret {NAMESPACE}/no-such-cert" in missing.stderr
    assert "Traceback" not in missing.stderr
    # a Secret whose key is not its certificate's: terminal, naming the field
    one, other = servingcert.make(["a.example"]), servingcert.make(["b.example"])
    data = {"tls.crt": one.cert, "tls.key": other.key, "ca.crt": one.ca}
    meta = {"name": "mismatched-cert", "namespace": NAMESPACE}
    encoded = {k: base64.b64encode(v).decode() for k, v in data.items()}
    testbed.admin.create(
        kube.Secret, {"metadata": meta, "type": "kubernetes.io/tls", "data": encoded}
    )
    wrong = _webhook(testbed, "mismatched-cert")
    assert wrong.returncode == EXIT_TERMINAL
    assert f"Secret {NAMESPACE}/mismatched-cert" in wrong.stderr
    assert "data[tls.key]" in wrong.stderr and "Traceback" not in wrong.stderr


def _secret(name: str, cert: servingcert.ServingCert) -> dict[str, Any]:
    data = {"tls.crt": cert.cert, "tls.key": cert.key, "ca.crt": cert.ca}
    return {
        "metadata": {"name": name, "namespace": NAMESPACE},
        "type": "kubernetes.io/tls",
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


def _served(port: int) -> str:
    try:
        return ssl.get_server_certificate(("127.0.0.1", port), timeout=5)
    except OSError:
        return ""


def test_a_renewed_certificate_is_served_without_a_restart(testbed: Testbed) -> None:
    """cert-manager renews the Secret in place: the webhook serves the new certificate."""
    first, second = servingcert.make(["127.0.0.1"]), servingcert.make(["127.0.0.1"])
    testbed.admin.create(kube.Secret, _secret("rotating-cert", first))
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "bootstrap.cli", "controller", "webhook",
         f"--kubeconfig={testbed.management.kubeconfig(SA_USER)}",
         f"--leader-election-namespace={NAMESPACE}", f"--webhook-bind=127.0.0.1:{port}",
         "--webhook-secret=rotating-cert", "--webhook-reload=1s"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for("the first certificate", lambda: _served(port) == first.cert.decode(), 30)
        current = testbed.admin.get(kube.Secret, "rotating-cert", NAMESPACE)
        assert current is not None
        testbed.admin.replace(kube.Secret, {**current, "data": _secret("", second)["data"]})
        wait_for("the renewed certificate", lambda: _served(port) == second.cert.decode(), 30)
        assert process.poll() is None  # the same process: no restart
    finally:
        process.terminate()
        _, err = process.communicate(timeout=30)
    assert '"result":"reloaded"' in err


def _post(port: int, context: ssl.SSLContext, body: bytes, path: str = "/convert") -> int:
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}{path}", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_bad_requests_get_a_status_and_the_webhook_keeps_serving(testbed: Testbed) -> None:
    crd = testbed.admin.get(kube.CRD, f"kubeadmconfigs.{kube.GROUP}")
    assert crd is not None
    bundle = crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"]
    context = ssl.create_default_context(cadata=base64.b64decode(bundle).decode())
    port = testbed.webhook_port
    rows = [
        (b"{not json", "/convert", 400),
        (b"[" * 200_000 + b"]" * 200_000, "/convert", 400),  # nested past any object's depth
        (b"{}", "/elsewhere", 404),
        (b"{}", "/convert", 200),  # a malformed review: answered, as a Failure result
    ]
    assert [_post(port, context, body, path) for body, path, _ in rows] == [c for _, _, c in rows]
    # a client that is no TLS client at all (a TCP probe speaking plain HTTP) changes nothing
    with socket.create_connection(("127.0.0.1", port), timeout=5) as plain:
        plain.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        plain.recv(100)
    review = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
              "request": {"uid": "u", "desiredAPIVersion": f"{kube.GROUP}/v1beta2",
                          "objects": []}}  # fmt: skip
    assert _post(port, context, json.dumps(review).encode()) == 200
    log = (testbed.workdir / "webhook.log").read_text()
    assert "Traceback" not in log and '"result":"ClientError"' in log
