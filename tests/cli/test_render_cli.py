"""``nodesmith render`` through its command line: exit codes, messages, flags, outputs.

Most cases call ``bootstrap.cli.main.main`` in-process (fast); a few run the installed console
script in a subprocess to prove the real entry point maps errors to exit codes the same way.
Every successful userdata output is checked with the real ``cloud-init schema`` validator.
What a render contains is tested through the library, in ``tests/render/``.
"""

from __future__ import annotations

import base64
import copy
import gzip
import io
import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from render_helpers import (
    BASE,
    CA_SECRETS,
    DATA,
    assert_valid_cloud_config,
    base_docs,
    cloud_init_schema,
    file_bytes,
    files_by_path,
    find,
    kubeadm_documents,
    openssl_spki_hash,
    script_config,
    secret_data,
)

from bootstrap.cli import main as cli

NODESMITH = str(Path(sys.executable).with_name("nodesmith"))


# ---------------------------------------------------------------- helpers


def write(tmp_path: Path, docs: list[dict[str, Any]], name: str = "bundle.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return str(path)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = cli.main(["render", *args])
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(err: str, *needles: str) -> str:
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("nodesmith: error:")]
    assert len(lines) == 1, err
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    return lines[0]


def render_ok(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[str, str]:
    code, out, err = run(capsys, *args)
    assert code == 0, err
    return out, err


# ---------------------------------------------------------------- terminal errors (65)


def _mutate_ignition(docs: list[dict[str, Any]]) -> None:
    """Ignition for a config with a diskSetup, which Ignition output does not carry (yet)."""
    find(docs, "KubeadmConfig", "md-0")["spec"]["format"] = "ignition"


def _mutate_old_version(docs: list[dict[str, Any]]) -> None:
    find(docs, "Machine", "md-0")["spec"]["version"] = "v1.14.10"


def _mutate_bad_cidr(docs: list[dict[str, Any]]) -> None:
    net = find(docs, "Cluster", "alpha")["spec"]["clusterNetwork"]
    net["services"]["cidrBlocks"] = ["10.128.0.0/33"]


def _mutate_unknown_kubeadm_field(docs: list[dict[str, Any]]) -> None:
    join = find(docs, "KubeadmConfig", "md-0")["spec"]["joinConfiguration"]
    join["nodeRegistration"]["imagePullPolicyy"] = "Always"


def _mutate_content_and_from(docs: list[dict[str, Any]]) -> None:
    f = find(docs, "KubeadmConfig", "md-0")["spec"]["files"][2]
    f["content"] = "inline"


def _mutate_duplicate_path(docs: list[dict[str, Any]]) -> None:
    files = find(docs, "KubeadmConfig", "md-0")["spec"]["files"]
    files[1]["path"] = files[0]["path"]


def _mutate_bad_token(docs: list[dict[str, Any]]) -> None:
    join = find(docs, "KubeadmConfig", "md-0")["spec"]["joinConfiguration"]
    join["discovery"]["bootstrapToken"]["token"] = "NOTATOKEN.secretpart"


def _mutate_unknown_runtime(docs: list[dict[str, Any]]) -> None:
    meta = find(docs, "Machine", "md-0")["metadata"]
    meta["annotations"] = {"bootstrap.nodesmith.dev/container-runtime": "dockershim"}


TERMINAL = {
    "ignition": (_mutate_ignition, ["KubeadmConfig prod/md-0", "spec.diskSetup", "Ignition"]),
    "old-version": (_mutate_old_version, ["Machine prod/md-0", "spec.version", "v1.14.10"]),
    "bad-cidr": (
        _mutate_bad_cidr,
        ["Cluster prod/alpha", "spec.clusterNetwork.services.cidrBlocks[0]", "10.128.0.0/33"],
    ),
    "unknown-kubeadm-field": (
        _mutate_unknown_kubeadm_field,
        ["KubeadmConfig prod/md-0", "imagePullPolicyy", "unknown"],
    ),
    "content-and-contentFrom": (
        _mutate_content_and_from,
        ["KubeadmConfig prod/md-0", "spec.files[2]", "content and contentFrom"],
    ),
    "duplicate-path": (
        _mutate_duplicate_path,
        ["KubeadmConfig prod/md-0", "spec.files[1].path", "/etc/nodesmith/worker.txt"],
    ),
    "bad-token": (
        _mutate_bad_token,
        ["KubeadmConfig prod/md-0", "spec.joinConfiguration.discovery.bootstrapToken.token"],
    ),
    "unknown-runtime": (
        _mutate_unknown_runtime,
        [
            "Machine prod/md-0",
            "metadata.annotations[bootstrap.nodesmith.dev/container-runtime]",
            "dockershim",
        ],
    ),
}


SECRET_TEXT = "S3CRET-0123456789abcdef"


def _set_spec(field: str, value: Any) -> Any:
    def mutate(docs: list[dict[str, Any]]) -> None:
        find(docs, "KubeadmConfig", "md-0")["spec"][field] = value

    return mutate


def _set_init_tokens(docs: list[dict[str, Any]]) -> None:
    """On the init (cp-0 of a Cluster not initialized yet): a worker ignores initConfiguration."""
    find(docs, "Cluster", "alpha").pop("status")
    find(docs, "KubeadmConfig", "cp-0")["spec"]["initConfiguration"] = {
        "bootstrapTokens": {"token": "abcdef." + SECRET_TEXT[-16:]}
    }


# (mutation, the whole error line): secret-bearing or unknown fields are named, never shown;
# other values are shown shortened to one line.
SECRET_ERRORS = [
    (_set_spec("users", [{"name": "ops", "pasword": SECRET_TEXT + "\nline2"}]),
     "nodesmith: error: KubeadmConfig prod/md-0 spec.users[0].pasword: unknown field"),
    (_set_spec("files", [{"path": "/etc/x", "contents": SECRET_TEXT}]),
     "nodesmith: error: KubeadmConfig prod/md-0 spec.files[0].contents: unknown field"),
    (_set_spec("users", [{"name": "ops", "passwd": ["not", SECRET_TEXT]}]),
     "nodesmith: error: KubeadmConfig prod/md-0 spec.users[0].passwd: Input should be a valid "
     "string (got a list, not shown: it may be secret)"),
    (_set_init_tokens,
     "nodesmith: error: KubeadmConfig prod/cp-0 InitConfiguration.bootstrapTokens: expected a "
     "list of BootstrapToken{token, description, ttl, expires, usages, groups} "
     "(kubeadm.k8s.io/v1beta4) (got a map with keys ['token'])"),
    (_set_spec("format", "y" * 3000 + "\nz"),
     "nodesmith: error: KubeadmConfig prod/md-0 spec.format: Input should be 'cloud-config', "
     "'ignition' or '' (got '" + "y" * 76 + "...)"),
]  # fmt: skip


def _set_machine(path: str, value: str) -> Any:
    def mutate(docs: list[dict[str, Any]]) -> None:
        node = find(docs, "Machine", "md-0")["spec"]
        *parents, last = path.split(".")
        for part in parents:
            node = node[part]
        node[last] = value

    return mutate


# A reference to a name that cannot exist is terminal (65), never "not there yet" (75).
IMPOSSIBLE_NAMES = [
    (_set_machine("clusterName", "Demo_X"),
     "Machine prod/md-0 spec.clusterName: must be a lowercase RFC 1123 name (got 'Demo_X')"),
    (_set_machine("bootstrap.configRef.name", "md\n0"),
     "Machine prod/md-0 spec.bootstrap.configRef.name: must be a lowercase RFC 1123 name "
     "(got 'md\\n0')"),
    (_set_spec("files", [{"path": "/etc/x", "contentFrom": {"secret": {"name": "Bad_Name",
                                                                         "key": "k"}}}]),
     "KubeadmConfig prod/md-0 spec.files[0].contentFrom.secret.name: must be a lowercase "
     "RFC 1123 name (got 'Bad_Name')"),
    (_set_spec("users", [{"name": "ops", "passwdFrom": {"secret": {"name": "pw.", "key": "k"}}}]),
     "KubeadmConfig prod/md-0 spec.users[0].passwdFrom.secret.name: must be a lowercase "
     "RFC 1123 name (got 'pw.')"),
]  # fmt: skip


@pytest.mark.parametrize(("mutate", "tail"), IMPOSSIBLE_NAMES)
def test_impossible_names_are_terminal(
    mutate: Any, tail: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = base_docs()
    mutate(docs)
    code, out, err = run(capsys, "-f", write(tmp_path, docs), "--machine", "prod/md-0")
    assert (code, out, err.strip()) == (65, "", "nodesmith: error: " + tail)


@pytest.mark.parametrize(("mutate", "line"), SECRET_ERRORS)
def test_errors_never_show_secret_values(
    mutate: Any, line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = base_docs()
    mutate(docs)
    machine = line.split("KubeadmConfig ")[1].split()[0]  # the Machine the line names
    code, out, err = run(capsys, "-f", write(tmp_path, docs), "--machine", machine)
    assert (code, out, err.strip()) == (65, "", line)
    assert SECRET_TEXT[-16:] not in err


@pytest.mark.parametrize("case", sorted(TERMINAL))
def test_terminal_errors(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mutate, needles = TERMINAL[case]
    docs = base_docs()
    mutate(docs)
    out_dir = tmp_path / "out"
    code, out, err = run(capsys, "-f", write(tmp_path, docs), "--machine", "prod/md-0")
    assert code == 65, err
    assert out == ""
    line = assert_one_line_error(err, *needles)
    assert "secretpart" not in line  # a token is never echoed
    # --all refuses as well, and writes nothing at all.
    code, _, err = run(capsys, "-f", write(tmp_path, docs), "--all", "--out-dir", str(out_dir))
    assert code == 65
    assert not out_dir.exists() or not any(out_dir.iterdir())


def test_join_without_ca_with_unsafe_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, base_docs(ca=False))
    # Without the flag: ERRORS["join-without-ca"]. The decoy namespace's alpha-ca is not used.
    out, err = render_ok(
        capsys, "-f", path, "--machine", "prod/md-0", "--unsafe-skip-ca-verification"
    )
    cc = assert_valid_cloud_config(out)
    (join,) = kubeadm_documents(cc, "/run/kubeadm/kubeadm-join-config.yaml")
    token = join["discovery"]["bootstrapToken"]
    assert token["unsafeSkipCAVerification"] is True
    assert "caCertHashes" not in token
    assert "does not pin the cluster CA" in err


# ---------------------------------------------------------------- image manifest


def _manifest(tmp_path: Path, runtime: str, kubelet: str | None) -> str:
    name, _, version = runtime.partition("=")
    doc = {
        "schemaVersion": 1,
        "name": "debian-12-k8s",
        "runtime": {"name": name, "version": version or None},
        "kubernetes": {"kubelet": kubelet, "kubeadm": kubelet},
    }
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(doc))
    return str(path)


def _with_runtime(tmp_path: Path, runtime: str) -> str:
    docs = base_docs()
    find(docs, "Machine", "md-0")["metadata"]["annotations"] = {
        "bootstrap.nodesmith.dev/container-runtime": runtime
    }
    return write(tmp_path, docs)


def test_image_manifest_match(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _with_runtime(tmp_path, "containerd=1.7")
    manifest = _manifest(tmp_path, "containerd=1.7.22-1", "1.31.4-1.1")
    out, _ = render_ok(capsys, "-f", path, "--machine", "prod/md-0", "--image-manifest", manifest)
    assert (
        script_config(assert_valid_cloud_config(out))["pre"][0]
        == "echo pre-worker > /run/nodesmith-pre"
    )


def test_runtime_mismatch_installs_when_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _with_runtime(tmp_path, "containerd=1.7.22")
    manifest = _manifest(tmp_path, "containerd=1.6.20", "1.31.4")
    # Without --allow-runtime-install: ERRORS["manifest-runtime-mismatch"].
    out, _ = render_ok(
        capsys,
        "-f",
        path,
        "--machine",
        "prod/md-0",
        "--image-manifest",
        manifest,
        "--allow-runtime-install",
    )
    pre = script_config(assert_valid_cloud_config(out))["pre"]
    assert any("apt-get install" in c and "containerd=1.7.22*" in c for c in pre), pre
    assert pre[-2:] == ["echo pre-worker > /run/nodesmith-pre", "sysctl --system"]


def test_kubelet_mismatch_installs_when_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = _manifest(tmp_path, "containerd=1.7.22", "1.30.6")
    path = write(tmp_path, base_docs())
    # Without --allow-runtime-install: ERRORS["manifest-kubelet-mismatch"].
    out, _ = render_ok(
        capsys,
        "-f",
        path,
        "--machine",
        "prod/md-0",
        "--image-manifest",
        manifest,
        "--allow-runtime-install",
    )
    pre = script_config(assert_valid_cloud_config(out))["pre"]
    assert any("kubelet=1.31.4-*" in c for c in pre), pre


# ---------------------------------------------------------------- transient (75)


def test_init_without_endpoint_renders_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = base_docs(initialized=False)
    del find(docs, "Cluster", "alpha")["spec"]["controlPlaneEndpoint"]
    path = write(tmp_path, docs)
    # A join waits (ERRORS["join-without-endpoint"]); an init renders, with a warning.
    out, err = render_ok(capsys, "-f", path, "--machine", "prod/cp-0")
    assert_valid_cloud_config(out)
    assert "no control-plane endpoint" in err


def test_transient_and_terminal_together_is_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = base_docs()
    del find(docs, "Cluster", "alpha")["spec"]["controlPlaneEndpoint"]
    find(docs, "Machine", "cp-1")["spec"]["version"] = "banana"
    out_dir = tmp_path / "out"
    code, _, err = run(capsys, "-f", write(tmp_path, docs), "--all", "--out-dir", str(out_dir))
    assert code == 65
    assert "nothing written" in err and "Traceback" not in err
    assert not out_dir.exists()


# ---------------------------------------------------------------- error table (65 / 75)


def _docs_without_ca(tmp_path: Path) -> list[str]:
    return ["-f", write(tmp_path, base_docs(ca=False))]


def _docs_without_endpoint(tmp_path: Path) -> list[str]:
    docs = base_docs()
    del find(docs, "Cluster", "alpha")["spec"]["controlPlaneEndpoint"]
    return ["-f", write(tmp_path, docs)]


def _docs_without_app_secret(tmp_path: Path) -> list[str]:
    docs = [
        d
        for d in base_docs()
        if not (
            d["kind"] == "Secret"
            and d["metadata"]["name"] == "app-secret"
            and d["metadata"]["namespace"] == "prod"
        )
    ]
    return ["-f", write(tmp_path, docs)]


def _docs_with_lonely_machine(tmp_path: Path) -> list[str]:
    docs = base_docs()
    lonely = copy.deepcopy(find(docs, "Machine", "md-0"))
    lonely["metadata"]["namespace"] = "lonely"
    config = copy.deepcopy(find(docs, "KubeadmConfig", "md-0"))
    config["metadata"]["namespace"] = "lonely"
    return ["-f", write(tmp_path, [*docs, lonely, config])]


def _docs_with_port_99999(tmp_path: Path) -> list[str]:
    docs = base_docs()
    find(docs, "Cluster", "alpha")["spec"]["controlPlaneEndpoint"]["port"] = 99999
    return ["-f", write(tmp_path, docs)]


def _unreadable_manifest(tmp_path: Path) -> list[str]:
    bad = tmp_path / "manifest.json"
    bad.write_text('{"schemaVersion": 1}')
    return ["-f", str(BASE), "--image-manifest", str(bad)]


def _runtime_mismatch(tmp_path: Path) -> list[str]:
    manifest = _manifest(tmp_path, "containerd=1.6.20", "1.31.4")
    return ["-f", _with_runtime(tmp_path, "containerd=1.7.22"), "--image-manifest", manifest]


def _kubelet_mismatch(tmp_path: Path) -> list[str]:
    manifest = _manifest(tmp_path, "containerd=1.7.22", "1.30.6")
    return ["-f", write(tmp_path, base_docs()), "--image-manifest", manifest]


def _no_input(tmp_path: Path) -> list[str]:
    return ["-f", "/nonexistent/x.yaml"]


def _base(tmp_path: Path) -> list[str]:
    return ["-f", str(BASE)]


def _docs_with_annotation(tmp_path: Path, key: str, value: str) -> list[str]:
    docs = base_docs()
    find(docs, "Machine", "md-0")["metadata"]["annotations"] = {
        f"bootstrap.nodesmith.dev/{key}": value
    }
    return ["-f", write(tmp_path, docs)]


def _docs_with_long_patch(tmp_path: Path) -> list[str]:
    docs = base_docs()
    find(docs, "Machine", "md-0")["spec"]["version"] = "v1.31." + "7" * 5000
    return ["-f", write(tmp_path, docs)]


# case: (inputs, --machine and extra flags, exit code, what the one error line names)
ERRORS: dict[str, tuple[Any, list[str], int, list[str]]] = {
    "join-without-ca": (
        _docs_without_ca,
        ["--machine", "prod/md-0"],
        75,
        ["Machine prod/md-0", "prod/alpha-ca", "--unsafe-skip-ca-verification"],
    ),
    "control-plane-join-without-ca": (
        _docs_without_ca,
        ["--machine", "prod/cp-1", "--unsafe-skip-ca-verification"],
        75,
        ["Machine prod/cp-1", "alpha-ca"],
    ),
    "manifest-unreadable": (
        _unreadable_manifest,
        ["--machine", "prod/md-0"],
        65,
        ["manifest.json", "runtime"],
    ),
    "manifest-runtime-mismatch": (
        _runtime_mismatch,
        ["--machine", "prod/md-0"],
        65,
        ["Machine prod/md-0", "container-runtime", "containerd 1.7.22", "containerd 1.6.20"],
    ),
    "manifest-kubelet-mismatch": (
        _kubelet_mismatch,
        ["--machine", "prod/md-0"],
        65,
        ["Machine prod/md-0", "spec.version", "v1.31.4", "1.30.6"],
    ),
    "cluster-only-in-other-namespace": (
        _docs_with_lonely_machine,
        ["--machine", "lonely/md-0"],
        65,
        ["Machine lonely/md-0", "spec.clusterName", "lonely/alpha", "never used", "decoy", "prod"],
    ),
    "bare-name-means-default": (
        _base,
        ["--machine", "md-0"],
        65,
        ["default/md-0", "namespace prod"],
    ),
    "missing-input-file": (
        _no_input,
        ["--machine", "prod/md-0"],
        65,
        ["/nonexistent/x.yaml", "no such file"],
    ),
    "endpoint-port-out-of-range": (
        _docs_with_port_99999,
        ["--machine", "prod/md-0"],
        65,
        ["Cluster prod/alpha", "spec.controlPlaneEndpoint.port", "99999"],
    ),
    "join-without-endpoint": (
        _docs_without_endpoint,
        ["--machine", "prod/md-0"],
        75,
        ["Cluster prod/alpha", "spec.controlPlaneEndpoint"],
    ),
    # The decoy namespace's app-secret is not a substitute.
    "content-from-secret-missing": (
        _docs_without_app_secret,
        ["--machine", "prod/md-0"],
        75,
        ["KubeadmConfig prod/md-0", "spec.files[2].contentFrom", "prod/app-secret"],
    ),
    "retry-annotation-superscript": (
        lambda tmp_path: _docs_with_annotation(tmp_path, "retry-backoff", "\u00b2"),
        ["--machine", "prod/md-0"],
        65,
        ["Machine prod/md-0", "annotations[bootstrap.nodesmith.dev/retry-backoff]", "600"],
    ),
    "retry-annotation-huge": (
        lambda tmp_path: _docs_with_annotation(tmp_path, "retry-deadline", "9" * 5000),
        ["--machine", "prod/md-0"],
        65,
        ["Machine prod/md-0", "annotations[bootstrap.nodesmith.dev/retry-deadline]", "86400"],
    ),
    "version-5000-digit-patch": (
        _docs_with_long_patch,
        ["--machine", "prod/md-0"],
        65,
        ["Machine prod/md-0", "spec.version", "is not a Kubernetes version"],
    ),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inputs, flags, expected, needles = ERRORS[case]
    code, out, err = run(capsys, *inputs(tmp_path), *flags)
    assert (code, out) == (expected, ""), err
    assert_one_line_error(err, *needles)


# ---------------------------------------------------------------- usage (2)


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--machine", "prod/md-0"],
        ["-f", str(BASE)],
        ["-f", str(BASE), "--machine", "prod/md-0", "--all"],
        ["-f", str(BASE), "--all"],
        ["-f", str(BASE), "--machine", "prod/md-0", "--out-dir", "/tmp/x"],
        ["-f", str(BASE), "--machine", "prod/md-0", "--token-ttl", "soon"],
        ["-f", str(BASE), "--machine", "prod/md-0", "--token-ttl", "\u00b2m"],
        ["-f", str(BASE), "--machine", "prod/md-0", "--token-ttl", "9" * 5000 + "h"],
        ["-f", str(BASE), "--machine", "prod/md-0", "--output", "xml"],
    ],
    ids=[
        "nothing",
        "no-file",
        "no-target",
        "both-targets",
        "all-no-dir",
        "dir-no-all",
        "bad-ttl",
        "superscript-ttl",
        "huge-ttl",
        "bad-output",
    ],
)
def test_usage_errors(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *args)
    assert code == 2
    assert out == "" and "Traceback" not in err and err.strip()


# ---------------------------------------------------------------- outputs


def test_output_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = render_ok(
        capsys, "-f", write(tmp_path, base_docs()), "--machine", "prod/md-0", "-o", "json"
    )
    env = json.loads(out)
    assert {"format", "value", "sha256", "size", "warnings"} <= set(env)
    assert env["format"] == "cloud-config"
    import hashlib

    assert env["sha256"] == hashlib.sha256(env["value"].encode()).hexdigest()
    assert env["size"] == len(env["value"].encode())
    assert env["warnings"] == []
    assert_valid_cloud_config(env["value"])


def test_output_secret(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, base_docs())
    for machine, uid in (
        ("prod/cp-0", "0f6b1c9e-3f44-4c55-9a63-4f2c8b1d7a01"),
        ("prod/md-0", None),
    ):
        out, _ = render_ok(capsys, "-f", path, "--machine", machine, "-o", "secret")
        secret, *rest = yaml.safe_load_all(out)
        # md-0's config names its token; cp-0 (a control-plane join here) gets a generated
        # one, whose Secret follows in the same stream so that `kubectl apply` keeps it.
        assert len(rest) == (0 if machine == "prod/md-0" else 1)
        name = machine.split("/")[1]
        assert secret["kind"] == "Secret" and secret["apiVersion"] == "v1"
        assert secret["metadata"]["name"] == name and secret["metadata"]["namespace"] == "prod"
        assert secret["type"] == "cluster.x-k8s.io/secret"
        assert secret["metadata"]["labels"] == {"cluster.x-k8s.io/cluster-name": "alpha"}
        assert base64.b64decode(secret["data"]["format"]) == b"cloud-config"
        assert_valid_cloud_config(base64.b64decode(secret["data"]["value"]))
        owners = secret["metadata"].get("ownerReferences")
        if uid:
            assert owners == [
                {
                    "apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1",
                    "kind": "KubeadmConfig",
                    "name": name,
                    "uid": uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        else:
            assert owners is None
        for token_secret in rest:
            assert token_secret["type"] == "bootstrap.kubernetes.io/token"
            data = {k: base64.b64decode(v).decode() for k, v in token_secret["data"].items()}
            token = f"{data['token-id']}.{data['token-secret']}"
            userdata = yaml.safe_load(base64.b64decode(secret["data"]["value"]))
            (join,) = kubeadm_documents(userdata, "/run/kubeadm/kubeadm-join-config.yaml")
            assert join["discovery"]["bootstrapToken"]["token"] == token


def test_userdata_with_a_generated_token_warns_to_keep_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = base_docs()
    token_given = find(docs, "KubeadmConfig", "md-0")["spec"]["joinConfiguration"]["discovery"]
    del token_given["bootstrapToken"]["token"]
    path = write(tmp_path, docs)
    _, err = render_ok(capsys, "-f", path, "--machine", "prod/md-0")
    assert "a bootstrap token was generated; pass --token-secret-out" in err
    _, err = render_ok(capsys, "-f", path, "--machine", "prod/md-0",
                       "--token-secret-out", str(tmp_path / "token.yaml"))  # fmt: skip
    assert "bootstrap token" not in err


def test_gzip_and_size_warning(capsys: pytest.CaptureFixture[str]) -> None:
    # The golden bundle's Cluster has no status: cp-0 inits, with every CA in its userdata.
    plain, err = render_ok(capsys, "-f", str(BASE), "-f", str(CA_SECRETS), "--machine", "prod/cp-0")
    assert len(plain.encode()) > 16 * 1024
    assert "over the 16 KiB AWS limit" in err and "--gzip" in err
    code = cli.main(
        [
            "render",
            "-f",
            str(BASE),
            "-f",
            str(CA_SECRETS),
            "--machine",
            "prod/cp-0",
            "--gzip",
            "-o",
            "json",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0 and "16 KiB" not in err
    env = json.loads(out)
    raw = base64.b64decode(env["value"])
    assert env["size"] == len(raw) < 16 * 1024
    # The same node: every file has the same bytes; only the script's form differs (plain
    # inside a gzipped userdata, gzip+base64 where the plain userdata is over budget).
    unzipped, text = yaml.safe_load(gzip.decompress(raw)), yaml.safe_load(plain)
    assert {k: v for k, v in unzipped.items() if k != "write_files"} == {
        k: v for k, v in text.items() if k != "write_files"
    }
    assert {p: file_bytes(e) for p, e in files_by_path(unzipped).items()} == {
        p: file_bytes(e) for p, e in files_by_path(text).items()
    }
    assert "ships as plain text" in gzip.decompress(raw).decode()
    assert "ships gzip+base64" in plain
    ok, msg = cloud_init_schema(gzip.decompress(raw))
    assert ok, msg


def test_all_out_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "out"
    _, err = render_ok(
        capsys, "--all", "-f", str(BASE.parent), "-f", str(CA_SECRETS), "--out-dir", str(out_dir)
    )
    files = sorted(out_dir.iterdir())
    assert [f.name for f in files] == [f"prod_{m}.cloud-config" for m in ("cp-0", "cp-1", "md-0")]
    for f in files:
        assert f.stat().st_mode & 0o777 == 0o600
    for f in files:
        assert_valid_cloud_config(f.read_text())
    assert "rendered 3 Machines" in err


def test_all_replaces_the_out_dir_as_a_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "deep" / "out"
    render_ok(capsys, "--all", "-f", str(BASE.parent), "-f", str(CA_SECRETS),
              "--out-dir", str(out_dir))  # fmt: skip
    assert out_dir.stat().st_mode & 0o777 == 0o700  # holds keys: private, whatever the umask
    docs = [d for d in base_docs() if d["metadata"]["name"] not in ("cp-1",)]
    render_ok(capsys, "--all", "-f", write(tmp_path, docs), "--out-dir", str(out_dir), "-o", "json")
    # Only this run's files: the cloud-configs of the first run (and cp-1's) are gone.
    assert sorted(f.name for f in out_dir.iterdir()) == ["prod_cp-0.json", "prod_md-0.json"]
    assert sorted(p.name for p in out_dir.parent.iterdir()) == ["out"]  # no staging left


def _targets(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("mine")
    return {
        "file": tmp_path / "a-file",
        "missing": tmp_path / "missing" / "secrets.yaml",
        "dir": tmp_path,
        "out": tmp_path / "out",
        "inside": tmp_path / "out" / "secrets.yaml",
        "foreign": tmp_path / "foreign",
        "secrets": tmp_path / "secrets.yaml",
    }


# (flags with {placeholders}, the error's tail): each refused (exit 2) before anything is
# rendered or written.
TARGET_ERRORS = [
    (["--all", "--out-dir", "{file}"], "--out-dir {file} exists and is not a directory"),
    (["--all", "--out-dir", "{foreign}"],
     "--out-dir {foreign} holds 'notes.txt', which render did not write (the directory is "
     "replaced as a whole); choose a new or empty directory"),
    (["--machine", "prod/md-0", "--secrets-out", "{missing}"],
     "--secrets-out {missing} is in '{dir}/missing', which is not a directory"),
    (["--machine", "prod/md-0", "--token-secret-out", "{dir}"],
     "--token-secret-out {dir} is a directory; name a file"),
    (["--all", "--out-dir", "{out}", "--secrets-out", "{inside}"],
     "--secrets-out {inside} is inside --out-dir, which is replaced as a whole"),
    (["--machine", "prod/md-0", "--token-secret-out", "{secrets}", "--secrets-out", "{secrets}"],
     "--secrets-out {secrets} is also --token-secret-out"),
]  # fmt: skip


@pytest.mark.parametrize(("flags", "tail"), TARGET_ERRORS)
def test_output_targets_are_checked_first(
    flags: list[str], tail: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    places = {k: str(v) for k, v in _targets(tmp_path).items()}
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    code, out, err = run(capsys, "-f", str(BASE.parent), *[f.format(**places) for f in flags])
    assert (code, out) == (2, "")
    line = assert_one_line_error(err)
    assert line.endswith(tail.format(**places) + ")") or line.endswith(tail.format(**places)), line
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # nothing written


def test_a_killed_all_run_leaves_the_old_dir_or_the_new_one(tmp_path: Path) -> None:
    docs = base_docs()
    template = find(docs, "Machine", "md-0")
    config = find(docs, "KubeadmConfig", "md-0")
    for i in range(600):
        machine, kubeadm = copy.deepcopy(template), copy.deepcopy(config)
        machine["metadata"]["name"] = kubeadm["metadata"]["name"] = f"w-{i}"
        machine["spec"]["bootstrap"]["configRef"]["name"] = f"w-{i}"
        docs += [machine, kubeadm]
    bundle = write(tmp_path, docs)
    out_dir, tokens = tmp_path / "out", tmp_path / "tokens.yaml"
    argv = [NODESMITH, "render", "--all", "-f", bundle, "--out-dir", str(out_dir),
            "--token-secret-out", str(tokens)]  # fmt: skip
    started = time.monotonic()
    subprocess.run(argv, check=True, capture_output=True, timeout=300)
    whole = time.monotonic() - started
    first = {f.name: f.read_bytes() for f in out_dir.iterdir()}
    assert len(first) == 603
    listing = sorted(p.name for p in tmp_path.iterdir())
    for phase in ("rendering", "writing"):
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if phase == "rendering":
            time.sleep(whole * 0.25)
        else:  # the moment the staging directory appears: files are being written
            deadline = time.monotonic() + 120
            while not any(p.name.startswith(".out.staging-") for p in tmp_path.iterdir()):
                assert proc.poll() is None and time.monotonic() < deadline, "no staging seen"
                time.sleep(0.001)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, (phase, err)
        assert err.decode().strip().endswith("nodesmith: terminated")
        # The old run's directory, whole and unchanged; no staging directory left.
        assert {f.name: f.read_bytes() for f in out_dir.iterdir()} == first, phase
        assert sorted(p.name for p in tmp_path.iterdir()) == listing, phase


def test_all_writes_nothing_when_one_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = base_docs()
    find(docs, "KubeadmConfig", "cp-1")["spec"]["format"] = "ignition"
    out_dir = tmp_path / "out"
    secrets_out = tmp_path / "secrets.yaml"
    code, _, err = run(
        capsys,
        "--all",
        "-f",
        write(tmp_path, docs),
        "--out-dir",
        str(out_dir),
        "--secrets-out",
        str(secrets_out),
    )
    assert code == 65
    assert_one_line_error(err, "KubeadmConfig prod/cp-1", "spec.diskSetup")
    assert not out_dir.exists() and not secrets_out.exists()


def test_token_secret_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = base_docs()
    del find(docs, "KubeadmConfig", "md-0")["spec"]["joinConfiguration"]["discovery"]
    token_out = tmp_path / "tokens.yaml"
    out, _ = render_ok(
        capsys,
        "-f",
        write(tmp_path, docs),
        "--machine",
        "prod/md-0",
        "--token-secret-out",
        str(token_out),
        "--token-ttl",
        "30m",
    )
    (join,) = kubeadm_documents(
        assert_valid_cloud_config(out), "/run/kubeadm/kubeadm-join-config.yaml"
    )
    token = join["discovery"]["bootstrapToken"]["token"]
    tid, secret_part = token.split(".")
    assert token_out.stat().st_mode & 0o777 == 0o600
    (secret,) = list(yaml.safe_load_all(token_out.read_text()))
    assert secret["metadata"] == {"name": f"bootstrap-token-{tid}", "namespace": "kube-system"}
    assert secret["type"] == "bootstrap.kubernetes.io/token"
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data["token-id"] == tid and data["token-secret"] == secret_part
    assert data["usage-bootstrap-authentication"] == data["usage-bootstrap-signing"] == "true"
    assert data["auth-extra-groups"] == "system:bootstrappers:kubeadm:default-node-token"
    from datetime import UTC, datetime

    expires = datetime.strptime(data["expiration"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert timedelta(minutes=29) < expires - datetime.now(UTC) <= timedelta(minutes=30)
    # The token is redacted on the node and never in stderr.
    assert script_config(yaml.safe_load(out))["redact"] == [token]


def test_secrets_out_then_join_pins_same_ca(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, base_docs(ca=False, initialized=False))
    secrets_out = tmp_path / "secrets.yaml"
    out, _ = render_ok(
        capsys, "-f", path, "--machine", "prod/cp-0", "--secrets-out", str(secrets_out)
    )
    init_cc = assert_valid_cloud_config(out)
    assert secrets_out.stat().st_mode & 0o777 == 0o600
    secrets = list(yaml.safe_load_all(secrets_out.read_text()))
    assert sorted(s["metadata"]["name"] for s in secrets) == [
        f"alpha-{s}" for s in ("ca", "etcd", "proxy", "sa")
    ]
    assert {s["metadata"]["namespace"] for s in secrets} == {"prod"}
    ca_pem = secret_data(secrets_out, "alpha-ca", "prod", "tls.crt")
    assert files_by_path(init_cc)["/etc/kubernetes/pki/ca.crt"]["content"].encode() == ca_pem
    # Later, the Cluster says it is initialized: the worker joins, pinning that CA.
    path = write(tmp_path, base_docs(ca=False), "initialized.yaml")
    out, _ = render_ok(capsys, "-f", path, "-f", str(secrets_out), "--machine", "prod/md-0")
    (join,) = kubeadm_documents(
        assert_valid_cloud_config(out), "/run/kubeadm/kubeadm-join-config.yaml"
    )
    assert join["discovery"]["bootstrapToken"]["caCertHashes"] == [openssl_spki_hash(ca_pem)]
    # --all does the same in one go: the join pins the CA the init generated.
    path = write(tmp_path, base_docs(ca=False, initialized=False), "fresh.yaml")
    out_dir = tmp_path / "all"
    secrets_all = tmp_path / "all-secrets.yaml"
    render_ok(
        capsys, "--all", "-f", path, "--out-dir", str(out_dir), "--secrets-out", str(secrets_all)
    )
    ca_all = secret_data(secrets_all, "alpha-ca", "prod", "tls.crt")
    cc = yaml.safe_load((out_dir / "prod_md-0.cloud-config").read_text())
    (join,) = kubeadm_documents(cc, "/run/kubeadm/kubeadm-join-config.yaml")
    assert join["discovery"]["bootstrapToken"]["caCertHashes"] == [openssl_spki_hash(ca_all)]


def test_stdin_input(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    stream = yaml.safe_dump_all(base_docs(ca=False), sort_keys=False)
    monkeypatch.setattr(sys, "stdin", io.StringIO(stream))
    out, _ = render_ok(capsys, "-f", "-", "-f", str(CA_SECRETS), "--machine", "prod/md-0")
    assert_valid_cloud_config(out)


def test_directory_input_matches_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "out"
    render_ok(capsys, "--all", "-f", str(DATA / "v1beta2-v1beta3"), "-f", str(CA_SECRETS),
              "--out-dir", str(out_dir))  # fmt: skip
    golden = DATA / "golden" / "v1beta2-v1beta3"
    for machine, role in (("cp-0", "init-control-plane"), ("md-0", "worker-join")):
        rendered = (out_dir / f"prod_{machine}.cloud-config").read_text()
        assert rendered == (golden / f"{role}.cloud-config").read_text()


# ---------------------------------------------------------------- real entry point


def _subprocess(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [NODESMITH, "render", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )


def test_subprocess_exit_codes(tmp_path: Path) -> None:
    docs = base_docs()
    _mutate_ignition(docs)
    proc = _subprocess("-f", write(tmp_path, docs), "--machine", "prod/md-0")
    assert proc.returncode == 65 and proc.stdout == ""
    assert_one_line_error(proc.stderr, "spec.diskSetup")

    docs = base_docs()
    del find(docs, "Cluster", "alpha")["spec"]["controlPlaneEndpoint"]
    proc = _subprocess("-f", "-", "--machine", "prod/md-0", stdin=yaml.safe_dump_all(docs))
    assert proc.returncode == 75
    assert_one_line_error(proc.stderr, "spec.controlPlaneEndpoint")

    proc = _subprocess("--machine", "prod/md-0")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr

    proc = _subprocess(
        "-f",
        "-",
        "--machine",
        "prod/md-0",
        stdin=yaml.safe_dump_all(base_docs(ca=False), sort_keys=False)
        + CA_SECRETS.read_text().replace("# Fixed", "---\n# Fixed", 1),
    )
    assert proc.returncode == 0, proc.stderr
    assert_valid_cloud_config(proc.stdout)


# ---------------------------------------------------------------- regressions (property test)


def test_partial_ca_secrets_generate_only_the_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by the property test: a missing alpha-ca with the other three present crashed."""
    docs = [d for d in base_docs(initialized=False) if d["metadata"]["name"] != "alpha-ca"]
    secrets_out = tmp_path / "secrets.yaml"
    out, _ = render_ok(
        capsys,
        "-f",
        write(tmp_path, docs),
        "--machine",
        "prod/cp-0",
        "--secrets-out",
        str(secrets_out),
    )
    assert_valid_cloud_config(out)
    generated = list(yaml.safe_load_all(secrets_out.read_text()))
    assert [s["metadata"]["name"] for s in generated] == ["alpha-ca"]
    files = files_by_path(yaml.safe_load(out))
    kept = secret_data(CA_SECRETS, "alpha-etcd", "prod", "tls.crt")
    assert files["/etc/kubernetes/pki/etcd/ca.crt"]["content"].encode() == kept


@pytest.mark.parametrize(
    ("name", "target"),
    [("md-0\nruncmd: [evil]", "prod/md-0"), ("MD_0", "prod/MD_0"), ("md-0", "prod/md-0\nx")],
)
def test_names_cannot_inject_cloud_config(
    name: str, target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found by the property test: a name with a newline rendered into the header comment."""
    docs = base_docs()
    find(docs, "Machine", "md-0")["metadata"]["name"] = name
    code, out, err = run(capsys, "-f", write(tmp_path, docs), "--machine", target)
    assert code == 65 and out == ""
    assert err.count("\n") == 1
    assert "RFC 1123" in err or "NAMESPACE/NAME" in err


def test_lone_surrogate_escape_is_a_parse_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "b.yaml"
    extra = '{"kind": "Secret", "metadata": {"name": "s", "namespace": "prod"}, '
    extra += '"stringData": {"k": "\\ud800"}}\n'
    path.write_text(BASE.read_text() + "---\n" + extra)
    code, _, err = run(capsys, "-f", str(path), "--machine", "prod/md-0")
    assert code == 65
    assert_one_line_error(err, "Unicode")


def test_stdin_not_utf8(tmp_path: Path) -> None:
    proc = subprocess.run(
        [NODESMITH, "render", "-f", "-", "--machine", "prod/md-0"],
        input=b"kind: Machine\nmetadata: {name: \xff}\n",
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 65
    assert b"Traceback" not in proc.stderr and b"not UTF-8" in proc.stderr


HUGE = "A" * 30_000
LONG_PATH = "/" + "a" * 499  # paths are refused over 512 characters


CP = "default/demo-cp-0"


def _examples_with(change: Any) -> str:
    from bootstrap.render.loader import load_paths

    docs = load_paths([str(Path(__file__).resolve().parents[2] / "examples")])
    change(docs)
    return yaml.safe_dump_all(docs, sort_keys=False)


def _set(kind: str, name: str, path: tuple[str, ...], value: Any) -> Any:
    def change(docs: list[dict[str, Any]]) -> None:
        doc = next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)
        for part in path[:-1]:
            doc = doc.setdefault(part, {})
        doc[path[-1]] = value

    return change


@pytest.mark.parametrize(
    ("case", "stdin", "field"),
    [
        (
            "huge apiVersion (found by test_render_property)",
            _examples_with(_set("Machine", "demo-cp-0", ("apiVersion",), HUGE)),
            "apiVersion",
        ),
        (
            "huge runtime name",
            _examples_with(
                _set(
                    "Machine",
                    "demo-cp-0",
                    ("metadata", "annotations", "bootstrap.nodesmith.dev/container-runtime"),
                    HUGE,
                )
            ),
            "container-runtime",
        ),
        (
            "huge duplicated file path",
            _examples_with(
                _set(
                    "KubeadmConfig",
                    "demo-cp-0",
                    ("spec", "files"),
                    [{"path": LONG_PATH, "content": "a"}, {"path": LONG_PATH, "content": "b"}],
                )
            ),
            "spec.files[1].path",
        ),
        (
            "huge duplicate YAML key",
            f"a: 1\n? {HUGE}\n: 1\n? {HUGE}\n: 2\n",  # explicit keys: no 1024-char limit
            "duplicate key",
        ),
    ],
)
def test_an_error_quoting_a_huge_value_stays_one_short_line(
    case: str, stdin: str, field: str
) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bootstrap.cli",
            "render",
            "-f",
            "-",
            "--machine",
            "default/demo-cp-0",
        ],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 65, result.stderr[:500]
    assert result.stderr.startswith("nodesmith: error:") and result.stderr.count("\n") == 1
    assert field in result.stderr and len(result.stderr) < 500, result.stderr[:600]
