"""The pipeline's decisions, directly: the role from the cluster's state (CABPK's rule), one
init per run, where the CAs go, external etcd, and what waits instead of failing."""

from __future__ import annotations

import base64
import copy
import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from render_helpers import (
    CA_SECRETS,
    CLOUD_INIT,
    DATA,
    FIXED_NOW,
    assert_valid_cloud_config,
    files_by_path,
    script_config,
)

from bootstrap.errors import NodesmithError, TerminalError, TransientError
from bootstrap.render import RenderOptions, RenderResult, render_one
from bootstrap.render import pki as pki_module
from bootstrap.render.batch import render_all
from bootstrap.render.decide import INIT, JOIN_CP, WORKER
from bootstrap.render.loader import load_paths
from bootstrap.render.resolve import Bundle

BASE = DATA / "v1beta1-v1beta4" / "bundle.yaml"
OPTIONS = RenderOptions(now=FIXED_NOW)
CP_LABEL = "cluster.x-k8s.io/control-plane"
INITIALIZED = {"conditions": [{"type": "ControlPlaneInitialized", "status": "True"}]}


def objects(status: dict[str, Any] | None = None, ca: bool = True) -> list[dict[str, Any]]:
    docs = load_paths([str(BASE), *([str(CA_SECRETS)] if ca else [])])
    if status is not None:
        find(docs, "Cluster", "alpha")["status"] = copy.deepcopy(status)
    return docs


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for doc in docs:
        meta = doc["metadata"]
        if (doc["kind"], meta["name"], meta.get("namespace")) == (kind, name, "prod"):
            return doc
    raise KeyError((kind, name))


def cloud_config(result: RenderResult) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(result.userdata)
    return loaded


def _unlabel(docs: list[dict[str, Any]], name: str) -> None:
    find(docs, "Machine", name)["metadata"].pop("labels", None)


def _scale_up_config(docs: list[dict[str, Any]], name: str) -> None:
    """What KubeadmControlPlane writes for a scale-up: the ClusterConfiguration, no join."""
    spec = find(docs, "KubeadmConfig", name)["spec"]
    spec.pop("joinConfiguration", None)
    spec.pop("initConfiguration", None)
    spec["clusterConfiguration"] = {"apiServer": {"certSANs": ["cp.example.org"]}}


def _worker_asks_for_control_plane(docs: list[dict[str, Any]], name: str) -> None:
    find(docs, "KubeadmConfig", name)["spec"]["joinConfiguration"]["controlPlane"] = {}


# ---------------------------------------------------------------- the role, one Machine alone

V1BETA2_INIT = {"initialization": {"controlPlaneInitialized": True}}
V1BETA1_WITH_V1BETA2 = {"v1beta2": {"conditions": INITIALIZED["conditions"]}}
NOT_YET = {"conditions": [{"type": "ControlPlaneInitialized", "status": "False"}]}


@pytest.mark.parametrize(
    ("machine", "status", "edit", "want"),
    [
        ("cp-0", None, None, INIT),
        ("cp-0", NOT_YET, None, INIT),
        ("cp-0", INITIALIZED, None, JOIN_CP),
        ("cp-0", V1BETA2_INIT, None, JOIN_CP),
        ("cp-0", V1BETA1_WITH_V1BETA2, None, JOIN_CP),
        ("cp-0", {"controlPlaneInitialized": True}, None, JOIN_CP),
        ("cp-0", INITIALIZED, _scale_up_config, JOIN_CP),  # never a second cluster
        ("cp-1", None, None, INIT),  # the lock is free: CABPK inits it too
        ("cp-1", INITIALIZED, None, JOIN_CP),
        ("md-0", INITIALIZED, None, WORKER),
        ("md-0", None, None, "WaitingForControlPlaneInitialized"),
        ("md-0", NOT_YET, None, "WaitingForControlPlaneInitialized"),
        ("md-0", INITIALIZED, _worker_asks_for_control_plane, "WorkerAsksForControlPlane"),
        ("md-0", None, _worker_asks_for_control_plane, "WorkerAsksForControlPlane"),
    ],
)
def test_role_comes_from_the_label_and_the_cluster_state(
    machine: str, status: dict[str, Any] | None, edit: Any, want: str
) -> None:
    docs = objects(status)
    if edit is not None:
        edit(docs, machine)
    if want in (INIT, JOIN_CP, WORKER):
        assert render_one(docs, f"prod/{machine}", OPTIONS).role == want
        return
    with pytest.raises(NodesmithError) as caught:
        render_one(docs, f"prod/{machine}", OPTIONS)
    assert caught.value.reason == want
    waiting = want.startswith("Waiting")
    assert isinstance(caught.value, TransientError if waiting else TerminalError)
    assert caught.value.exit_code == (75 if waiting else 65)


def test_a_worker_asking_for_control_plane_is_named_with_the_field() -> None:
    docs = objects(INITIALIZED)
    _worker_asks_for_control_plane(docs, "md-0")
    with pytest.raises(TerminalError) as caught:
        render_one(docs, "prod/md-0", OPTIONS)
    text = str(caught.value)
    assert "spec.joinConfiguration.controlPlane" in text and CP_LABEL in text


def test_an_unlabelled_machine_is_a_worker_whatever_its_config_says() -> None:
    docs = objects(INITIALIZED)
    _unlabel(docs, "cp-0")  # its config has init and cluster configurations
    result = render_one(docs, "prod/cp-0", OPTIONS)
    assert result.role == WORKER
    assert not any("/etc/kubernetes/pki/" in p for p in files_by_path(cloud_config(result)))


# ---------------------------------------------------------------- one run, one init


def test_two_init_candidates_in_one_run_give_one_init() -> None:
    docs = objects(ca=False)
    cp1 = find(docs, "KubeadmConfig", "cp-1")["spec"]
    cp1.pop("joinConfiguration")
    cp1["initConfiguration"] = {}
    batch = render_all(Bundle(docs), ["prod/md-0", "prod/cp-1", "prod/cp-0"], OPTIONS)
    assert not batch.failures
    roles = {r.machine: r.role for r in batch.results}
    # Both are written for init: the first asked gets the lock, the other joins it.
    assert roles == {"prod/cp-1": INIT, "prod/cp-0": JOIN_CP, "prod/md-0": WORKER}
    # The joins pin and carry the CA the init generated in this run.
    generated = {s["metadata"]["name"]: s for r in batch.results for s in r.generated_secrets}
    assert sorted(generated) == ["alpha-ca", "alpha-etcd", "alpha-proxy", "alpha-sa"]
    ca = base64.b64decode(generated["alpha-ca"]["data"]["tls.crt"]).decode()
    join = next(r for r in batch.results if r.role == JOIN_CP)
    assert files_by_path(cloud_config(join))["/etc/kubernetes/pki/ca.crt"]["content"] == ca


def test_the_config_written_for_init_takes_the_lock_whatever_the_order() -> None:
    batch = render_all(Bundle(objects()), ["prod/cp-1", "prod/md-0", "prod/cp-0"], OPTIONS)
    assert {r.machine: r.role for r in batch.results} == {
        "prod/cp-0": INIT, "prod/cp-1": JOIN_CP, "prod/md-0": WORKER,
    }  # fmt: skip


def test_a_failed_init_keeps_the_lock_and_the_others_wait() -> None:
    docs = objects()
    init = find(docs, "KubeadmConfig", "cp-0")["spec"]["initConfiguration"]
    init["nodeRegistration"] = {"taints": [{"key": "bad key", "effect": "NoSchedule"}]}
    batch = render_all(Bundle(docs), ["prod/cp-0", "prod/cp-1", "prod/md-0"], OPTIONS)
    assert not batch.results
    reasons = sorted((type(e).__name__, e.reason) for e in batch.failures)
    assert reasons == [
        ("TerminalError", "InvalidField"),
        ("TransientError", "WaitingForControlPlaneInitialized"),
        ("TransientError", "WaitingForControlPlaneInitialized"),
    ]
    assert isinstance(batch.worst, TerminalError)
    assert "prod/cp-0 holds the init lock" in str(
        next(e for e in batch.failures if "lock" in str(e))
    )


# ---------------------------------------------------------------- joins wait for the CA


@pytest.mark.parametrize("machine", ["cp-1", "md-0"])
def test_a_join_without_the_ca_secret_waits(machine: str) -> None:
    with pytest.raises(TransientError) as caught:
        render_one(objects(INITIALIZED, ca=False), f"prod/{machine}", OPTIONS)
    assert caught.value.reason == "CANotFound" and "alpha-ca" in str(caught.value)


# ---------------------------------------------------------------- certificatesDir

PKI2 = "/etc/kubernetes/pki2"


@pytest.mark.parametrize(("machine", "status"), [("cp-0", None), ("cp-1", INITIALIZED)])
def test_the_cas_go_where_kubeadm_looks_for_them(machine: str, status: Any) -> None:
    docs = objects(status)
    spec = find(docs, "KubeadmConfig", machine)["spec"]
    spec.setdefault("clusterConfiguration", {})["certificatesDir"] = PKI2 + "/"
    result = render_one(docs, f"prod/{machine}", OPTIONS)
    files = files_by_path(cloud_config(result))
    assert f"{PKI2}/ca.key" in files and f"{PKI2}/etcd/ca.key" in files
    assert files[f"{PKI2}/ca.key"]["permissions"] == "0600"
    assert not [p for p in files if p.startswith("/etc/kubernetes/pki/")]
    assert script_config(cloud_config(result))["pkiDir"] == PKI2


def test_the_default_certificates_dir_needs_no_script_setting() -> None:
    result = render_one(objects(), "prod/cp-0", OPTIONS)
    assert "pkiDir" not in script_config(cloud_config(result))


@pytest.mark.parametrize("given", ["relative/pki", "/", "//", 7])
def test_a_certificates_dir_that_is_no_directory_is_refused(given: Any) -> None:
    docs = objects()
    find(docs, "KubeadmConfig", "cp-0")["spec"]["clusterConfiguration"]["certificatesDir"] = given
    with pytest.raises(TerminalError) as caught:
        render_one(docs, "prod/cp-0", OPTIONS)
    assert "spec.clusterConfiguration.certificatesDir" in str(caught.value)


def test_a_user_file_cannot_replace_a_ca_key_in_the_certificates_dir() -> None:
    docs = objects()
    spec = find(docs, "KubeadmConfig", "cp-0")["spec"]
    spec["clusterConfiguration"]["certificatesDir"] = PKI2
    spec["files"].append({"path": f"{PKI2}//./ca.key", "content": "mine"})
    with pytest.raises(TerminalError) as caught:
        render_one(docs, "prod/cp-0", OPTIONS)
    assert "spec.files[4].path" in str(caught.value) and "written by nodesmith" in str(caught.value)


# ---------------------------------------------------------------- external etcd

EXTERNAL = {
    "endpoints": ["https://etcd.example.org:2379"],
    "caFile": "/etc/etcd/ca.crt",
    "certFile": "/etc/etcd/apiserver-etcd-client.crt",
    "keyFile": "/etc/etcd/apiserver-etcd-client.key",
}


def _secret(name: str, data: dict[str, bytes]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "prod"},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


def _client_pair(ca: pki_module.KeyPair) -> tuple[bytes, bytes]:
    """A client certificate signed by ``ca``, as an etcd operator would hand one out."""
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver-etcd-client")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(ca_cert.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5)).not_valid_after(now + timedelta(days=1))
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )  # fmt: skip
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


@pytest.fixture(scope="module")
def etcd_pki() -> tuple[pki_module.KeyPair, bytes, bytes]:
    ca = pki_module.generate_cluster_pki("alpha")["etcd"]
    return (ca, *_client_pair(ca))


def _external(docs: list[dict[str, Any]], etcd: Any, client: bool = True) -> None:
    ca, cert, key = etcd
    docs[:] = [d for d in docs if d["metadata"]["name"] != "alpha-etcd"]
    docs.append(_secret("alpha-etcd", {"tls.crt": ca.cert_pem}))  # the CA cert only
    if client:
        docs.append(_secret("alpha-apiserver-etcd-client", {"tls.crt": cert, "tls.key": key}))
    spec = find(docs, "KubeadmConfig", "cp-0")["spec"]["clusterConfiguration"]
    spec["etcd"] = {"external": dict(EXTERNAL)}


@pytest.mark.parametrize("ca", [True, False])
def test_external_etcd_writes_its_ca_cert_and_client_pair(ca: bool, etcd_pki: Any) -> None:
    docs = objects(ca=ca)
    _external(docs, etcd_pki)
    result = render_one(docs, "prod/cp-0", OPTIONS)
    files = files_by_path(cloud_config(result))
    etcd_ca, cert, key = etcd_pki
    assert files[EXTERNAL["caFile"]]["content"] == etcd_ca.cert_pem.decode()
    assert files[EXTERNAL["certFile"]]["content"] == cert.decode()
    assert files[EXTERNAL["keyFile"]] == {
        "path": EXTERNAL["keyFile"], "owner": "root:root", "permissions": "0600",
        "content": key.decode(),
    }  # fmt: skip
    assert not [p for p in files if p.startswith("/etc/kubernetes/pki/etcd/")]
    assert etcd_ca.key_pem.decode() not in result.userdata.decode()
    # Generated when missing: the cluster's own CAs, never the external etcd's.
    names = sorted(s["metadata"]["name"] for s in result.generated_secrets)
    assert names == ([] if ca else ["alpha-ca", "alpha-proxy", "alpha-sa"])


def test_external_etcd_without_its_client_secret_waits(etcd_pki: Any) -> None:
    docs = objects()
    _external(docs, etcd_pki, client=False)
    with pytest.raises(TransientError) as caught:
        render_one(docs, "prod/cp-0", OPTIONS)
    assert caught.value.reason == "ExternalEtcdSecretNotFound"
    assert "prod/alpha-apiserver-etcd-client" in str(caught.value)


def test_external_etcd_client_pair_must_belong_together(etcd_pki: Any) -> None:
    docs = objects()
    ca, cert, _ = etcd_pki
    _external(docs, (ca, cert, _client_pair(ca)[1]))
    with pytest.raises(TerminalError) as caught:
        render_one(docs, "prod/cp-0", OPTIONS)
    assert caught.value.reason == "InvalidSecret"
    assert "does not match the private key" in str(caught.value)


@pytest.mark.parametrize("key", ["caFile", "certFile", "keyFile"])
def test_external_etcd_paths_must_be_absolute_files(key: str, etcd_pki: Any) -> None:
    docs = objects()
    _external(docs, etcd_pki)
    external = find(docs, "KubeadmConfig", "cp-0")["spec"]["clusterConfiguration"]["etcd"]
    external["external"][key] = "etcd/relative"
    with pytest.raises(TerminalError) as caught:
        render_one(docs, "prod/cp-0", OPTIONS)
    assert f"spec.clusterConfiguration.etcd.external.{key}" in str(caught.value)


# ---------------------------------------------------------------- cloud-init Jinja

INSTANCE_DATA = {
    "v1": {"local_hostname": "node-7"},
    "ds": {"meta_data": {"local_hostname": "node-7.ec2.internal"}},
}
HOSTNAME_EXPR = "{{ ds.meta_data.local_hostname }}"


def _cloud_init_render(userdata: bytes, tmp_path: Path) -> str:
    """cloud-init's own template step (``cloud-init devel render``), with fixed instance data."""
    (tmp_path / "user-data").write_bytes(userdata)
    (tmp_path / "instance-data.json").write_text(json.dumps(INSTANCE_DATA))
    proc = subprocess.run(
        [CLOUD_INIT, "devel", "render", str(tmp_path / "user-data"),
         "-i", str(tmp_path / "instance-data.json")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0 and "Failed" not in proc.stderr, proc.stderr
    return proc.stdout


def test_jinja_in_the_config_gets_the_header_and_only_its_expressions_change(
    tmp_path: Path,
) -> None:
    docs = objects(ca=False)
    for name in ("cp-0", "cp-1", "md-0"):
        spec = find(docs, "KubeadmConfig", name)["spec"]
        for key in ("initConfiguration", "joinConfiguration"):
            if spec.get(key) is not None:
                spec[key].setdefault("nodeRegistration", {})["name"] = HOSTNAME_EXPR
        spec["preKubeadmCommands"] = ["echo {{ v1.local_hostname }} > /run/hostname-seen"]
    batch = render_all(Bundle(docs), ["prod/cp-0", "prod/cp-1", "prod/md-0"], OPTIONS)
    assert not batch.failures
    for result in batch.results:
        text = result.userdata.decode()
        assert text.startswith("## template: jinja\n#cloud-config\n")
        rendered = _cloud_init_render(result.userdata, tmp_path)
        # Everything nodesmith wrote (PKI, kubeadm YAML, the script and its JSON config) is
        # literal under Jinja: only the user's expressions change.
        expected = (
            text.removeprefix("## template: jinja\n")
            .replace(HOSTNAME_EXPR, "node-7.ec2.internal")
            .replace("{{ v1.local_hostname }}", "node-7")
        )
        assert rendered.rstrip("\n") == expected.rstrip("\n")
        assert_valid_cloud_config(rendered)


def test_no_jinja_no_header() -> None:
    text = render_one(objects(), "prod/cp-0", OPTIONS).userdata.decode()
    assert text.startswith("#cloud-config\n") and "template: jinja" not in text


# ---------------------------------------------------------------- fields by version


def test_fields_the_target_api_lacks_are_dropped_with_a_warning_naming_them() -> None:
    docs = load_paths([str(DATA / "v1beta1-v1beta3" / "bundle.yaml"), str(CA_SECRETS)])
    spec = find(docs, "KubeadmConfig", "cp-0")["spec"]
    spec["clusterConfiguration"]["encryptionAlgorithm"] = "ECDSA-P256"  # v1beta4 only
    spec["initConfiguration"]["bootstrapTokens"] = [
        {"token": "abcdef.0123456789abcdef", "ttlSeconds": 600}  # CAPI v1beta2's spelling
    ]
    result = render_one(docs, "prod/cp-0", OPTIONS)
    assert (
        "spec.clusterConfiguration.encryptionAlgorithm dropped: kubeadm.k8s.io/v1beta3 "
        "(Kubernetes v1.30.6) has no such field"
    ) in result.warnings
    text = result.userdata.decode()
    assert "encryptionAlgorithm" not in text and "ttlSeconds" not in text
    assert "ttl: 600s" in text


# ---------------------------------------------------------------- file discovery


def test_file_discovery_writes_the_kubeconfig_and_hands_kubeadm_its_path() -> None:
    docs = objects(INITIALIZED)
    join = find(docs, "KubeadmConfig", "md-0")["spec"]["joinConfiguration"]
    join["discovery"] = {
        "file": {
            "kubeConfigPath": "/etc/kubernetes/discovery.conf",
            "kubeConfig": {"user": {"exec": {"command": "/usr/bin/aws-iam-authenticator"}}},
        }
    }
    cc = cloud_config(render_one(docs, "prod/md-0", OPTIONS))
    files = files_by_path(cc)
    kubeconfig = yaml.safe_load(files["/etc/kubernetes/discovery.conf"]["content"])
    assert kubeconfig["clusters"][0]["cluster"]["server"] == "https://192.0.2.10:6443"
    (document,) = yaml.safe_load_all(files["/run/kubeadm/kubeadm-join-config.yaml"]["content"])
    assert document["discovery"] == {"file": {"kubeConfigPath": "/etc/kubernetes/discovery.conf"}}
    assert_valid_cloud_config(render_one(docs, "prod/md-0", OPTIONS).userdata)


# ---------------------------------------------------------------- the seed-era Machine alone

SEED = DATA / "v1alpha1-v1beta3" / "bundle.yaml"
IMAGE_RUNTIME = ("containerd", "1.6.20~ds1-1")  # what Debian 12's image manifest records


def seed_objects() -> list[dict[str, Any]]:
    return load_paths([str(SEED), str(CA_SECRETS)])


def test_a_lone_seed_worker_joins_once_the_cluster_reports_its_endpoint() -> None:
    """v1alpha1 has no initialized state; its actuators joined workers once status.apiEndpoints
    was reported. Without them the worker waits (75), naming that field."""
    result = render_one(seed_objects(), "prod/md-0", OPTIONS)
    assert result.role == WORKER
    docs = seed_objects()
    del find(docs, "Cluster", "alpha")["status"]
    with pytest.raises(TransientError) as exc:
        render_one(docs, "prod/md-0", OPTIONS)
    assert (exc.value.reason, exc.value.field) == (
        "WaitingForControlPlaneInitialized",
        "status.apiEndpoints",
    )
    assert exc.value.exit_code == 75


@pytest.mark.parametrize(
    ("machine", "role"),
    [("cp-0", INIT), ("cp-1", INIT), ("md-0", WORKER)],  # alone: each control plane may init
)
def test_a_seed_machine_renders_without_any_bootstrap_config(machine: str, role: str) -> None:
    result = render_one(seed_objects(), f"prod/{machine}", OPTIONS)
    assert result.role == role
    assert (result.config_kind, result.config_api_version) == ("Machine", "cluster.k8s.io/v1alpha1")


def test_a_seed_machine_with_a_bootstrap_field_is_refused() -> None:
    """No v1alpha1 object ever carried spec.bootstrap (v1alpha2 brought it)."""
    docs = seed_objects()
    find(docs, "Machine", "md-0")["spec"]["bootstrap"] = {"configRef": {"name": "md-0"}}
    with pytest.raises(TerminalError) as exc:
        render_one(docs, "prod/md-0", OPTIONS)
    assert (exc.value.field, exc.value.exit_code) == ("spec.bootstrap", 65)
    assert "v1alpha2" in str(exc.value)


def test_the_seed_data_secret_is_owned_by_the_machine() -> None:
    from bootstrap.render.outputs import bootstrap_secret

    docs = seed_objects()
    find(docs, "Machine", "md-0")["metadata"]["uid"] = "5e1f0c7a-0000-4000-8000-000000000001"
    (owner,) = bootstrap_secret(render_one(docs, "prod/md-0", OPTIONS))["metadata"][
        "ownerReferences"
    ]
    assert owner == {
        "apiVersion": "cluster.k8s.io/v1alpha1",
        "kind": "Machine",
        "name": "md-0",
        "uid": "5e1f0c7a-0000-4000-8000-000000000001",
        "controller": True,
        "blockOwnerDeletion": True,
    }


@pytest.mark.parametrize(
    ("kubelet", "control_plane", "installed"),
    [
        ("1.30.6", "1.30.6", "v1.30.6"),
        ("1.29.3", "1.30.6", "v1.30.6"),  # kubeadm installs the control plane's version
        ("1.27.0", "1.30.6", "v1.30.6"),  # three minors older: still in skew
        ("1.26.0", "1.30.6", None),  # four: out of skew
        ("1.31.0", "1.30.6", None),  # a kubelet newer than its control plane
        ("1.30.6", "one-thirty", None),
    ],
)
def test_the_seed_control_plane_installs_versions_control_plane(
    kubelet: str, control_plane: str, installed: str | None
) -> None:
    docs = seed_objects()
    find(docs, "Machine", "cp-0")["spec"]["versions"].update(
        {"kubelet": kubelet, "controlPlane": control_plane}
    )
    if installed is None:
        with pytest.raises(TerminalError) as exc:
            render_one(docs, "prod/cp-0", OPTIONS)
        assert exc.value.field == "spec.versions.controlPlane"
        assert repr(control_plane) in str(exc.value) or control_plane in str(exc.value)
        return
    result = render_one(docs, "prod/cp-0", OPTIONS)
    (cluster, *_) = yaml.safe_load_all(
        files_by_path(cloud_config(result))["/run/kubeadm/kubeadm.yaml"]["content"]
    )
    assert cluster["kubernetesVersion"] == installed


@pytest.mark.parametrize(
    ("asked", "image", "outcome"),
    [
        ({"name": "containerd", "version": "1.6"}, IMAGE_RUNTIME, "ok"),
        ({"name": "containerd", "version": "1.7"}, IMAGE_RUNTIME, "RuntimeMismatch"),
        ({"name": "cri-o"}, IMAGE_RUNTIME, "RuntimeMismatch"),
        ({"name": "docker"}, IMAGE_RUNTIME, "UnknownRuntime"),
    ],
)  # fmt: skip
def test_the_seed_runtime_is_checked_against_the_image(
    asked: dict[str, str], image: tuple[str, str], outcome: str, tmp_path: Path
) -> None:
    from bootstrap.manifest import load_manifest

    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({
        "schemaVersion": 1, "name": "debian-12-k8s",
        "runtime": {"name": image[0], "version": image[1]},
        "kubernetes": {"kubelet": "1.30.6-1.1", "kubeadm": "1.30.6-1.1"},
    }))  # fmt: skip
    docs = seed_objects()
    find(docs, "Machine", "md-0")["spec"]["versions"]["containerRuntime"] = asked
    options = RenderOptions(now=FIXED_NOW, image_manifest=load_manifest(manifest))
    if outcome != "ok":
        with pytest.raises(TerminalError) as exc:
            render_one(docs, "prod/md-0", options)
        assert (exc.value.reason, exc.value.field) == (outcome, "spec.versions.containerRuntime")
        return
    (join,) = yaml.safe_load_all(
        files_by_path(cloud_config(render_one(docs, "prod/md-0", options)))[
            "/run/kubeadm/kubeadm-join-config.yaml"
        ]["content"]
    )
    assert join["nodeRegistration"]["criSocket"] == "unix:///var/run/containerd/containerd.sock"


@pytest.mark.parametrize(
    ("ignored", "warned"),
    [(None, True), (["FileExisting-crictl"], True), (["DirAvailable--etc-kubernetes-manifests"],
     False), (["all"], False)],
)  # fmt: skip
def test_a_join_with_a_static_pod_is_warned_of_kubeadms_manifests_check(
    ignored: list[str] | None, warned: bool
) -> None:
    docs = objects(INITIALIZED)
    spec = find(docs, "KubeadmConfig", "md-0")["spec"]
    spec.setdefault("files", []).append(
        {"path": "/etc/kubernetes/manifests/kube-vip.yaml", "content": "kind: Pod\n"}
    )
    registration = spec["joinConfiguration"].setdefault("nodeRegistration", {})
    registration.pop("ignorePreflightErrors", None)
    if ignored is not None:
        registration["ignorePreflightErrors"] = ignored
    warnings = render_one(docs, "prod/md-0", OPTIONS).warnings
    found = [w for w in warnings if "DirAvailable--etc-kubernetes-manifests" in w]
    assert bool(found) == warned, warnings
