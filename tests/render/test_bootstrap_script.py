"""Auditable userdata: what the node runs, in order and in plain text, and the script readable
unless the size budget needs it compressed (bootstrap/render/bootstrap_script.py)."""

from __future__ import annotations

import copy
import gzip
from typing import Any

import pytest
import yaml
from render_helpers import (
    CA_SECRETS,
    DATA,
    FIXED_NOW,
    assert_valid_cloud_config,
    file_bytes,
    files_by_path,
    script_config,
)

from bootstrap.render import RenderOptions, render_one
from bootstrap.render.bootstrap_script import (
    SCRIPT,
    SCRIPT_PATH,
    comment_safe,
    run_order,
    script_entry,
    script_form,
)
from bootstrap.render.loader import load_paths
from bootstrap.render.result import AWS_USERDATA_LIMIT
from bootstrap.render.templates import plain_script

BUNDLE = DATA / "v1beta1-v1beta4" / "bundle.yaml"
INITIALIZED = {"conditions": [{"type": "ControlPlaneInitialized", "status": "True"}]}
HEADER = [
    "In order, the node runs (runcmd: /usr/local/sbin/nodesmith-bootstrap, its config",
    "/run/kubeadm/nodesmith-bootstrap.json; transient kubeadm failures are retried,",
    "progress in /run/cluster-api/bootstrap-status.json):",
]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("echo plain", "echo plain"),
        ("tab\tkept, é kept", "tab\tkept, é kept"),
        # YAML (1.1, as cloud-init reads it) breaks lines at NEL and U+2028/9: never passed on
        ("a\x85runcmd: [evil]", "a\\x85runcmd: [evil]"),
        ("a\u2028b\u2029c", "a\\u2028b\\u2029c"),
        ("bell\x07 cr\r bom\ufeff", "bell\\x07 cr\\r bom\\ufeff"),
    ],
)
def test_comment_safe(text: str, shown: str) -> None:
    assert comment_safe(text) == shown


def test_run_order_lists_every_command_in_order() -> None:
    config = {
        "pre": ["cd /opt\nexport A=1", "echo pre"],
        "command": ["kubeadm", "join", "--config", "/run/kubeadm/k.yaml", "--v", "4"],
        "post": ["echo 'it''s done'"],
    }
    assert run_order(config) == [
        *HEADER,
        "  pre:     cd /opt",
        "           export A=1",
        "  pre:     echo pre",
        "  kubeadm: kubeadm join --config /run/kubeadm/k.yaml --v 4",
        "  post:    echo 'it''s done'",
        "  success: /run/cluster-api/bootstrap-success.complete",
    ]


def test_command_line_is_quoted_as_the_shell_reads_it() -> None:
    config = {"pre": [], "post": [], "command": ["kubeadm", "join", "--config", "/a b.yaml"]}
    assert run_order(config)[3] == "  kubeadm: kubeadm join --config '/a b.yaml'"


def objects(role: str, **pre: list[str]) -> tuple[list[dict[str, Any]], str]:
    docs = load_paths([str(BUNDLE), str(CA_SECRETS)])
    machine = {"worker": "md-0", "init": "cp-0"}[role]
    for doc in docs:
        if doc["kind"] == "Cluster" and role == "worker":
            doc["status"] = copy.deepcopy(INITIALIZED)
        if doc["kind"] == "KubeadmConfig" and doc["metadata"]["name"].startswith(machine):
            doc["spec"].update({"preKubeadmCommands": pre["pre"]} if pre else {})
    return docs, f"prod/{machine}"


def header(userdata: bytes) -> list[str]:
    """The comment lines before the first YAML key, without their ``# ``."""
    lines = []
    for line in userdata.decode().splitlines()[1:]:
        if not line.startswith("#"):
            break
        lines.append(line[2:])
    return lines


def test_worker_userdata_says_what_runs_and_ships_the_script_plain() -> None:
    docs, machine = objects("worker")
    result = render_one(docs, machine, RenderOptions(now=FIXED_NOW))
    parsed = assert_valid_cloud_config(result.userdata)
    config = script_config(parsed)
    lines = header(result.userdata)
    start = lines.index(HEADER[0])
    assert lines[start : start + len(run_order(config)) + 1] == [
        *run_order(config),
        f"{SCRIPT_PATH} ships as plain text (last write_files entry).",
    ]
    # the header is the plan the script runs: pre, the exact kubeadm line, post, the sentinel
    assert config["pre"] == ["echo pre-worker > /run/nodesmith-pre", "sysctl --system"]
    assert "  kubeadm: kubeadm join --config /run/kubeadm/kubeadm-join-config.yaml --v 4" in lines
    script = files_by_path(parsed)[SCRIPT_PATH]
    assert "encoding" not in script
    assert script["content"] == plain_script(SCRIPT)
    assert len(result.userdata) <= AWS_USERDATA_LIMIT


def test_script_compressed_only_when_the_budget_needs_it() -> None:
    """An init carries every CA: plain, the script would push it over 16 KiB, so it ships
    gzip+base64 and the header gives the size it would have had. With --gzip the whole
    userdata is compressed, and the script stays plain."""
    docs, machine = objects("init")
    result = render_one(docs, machine, RenderOptions(now=FIXED_NOW))
    parsed = assert_valid_cloud_config(result.userdata)
    script = files_by_path(parsed)[SCRIPT_PATH]
    assert script["encoding"] == "gz+b64"
    assert file_bytes(script).decode() == plain_script(SCRIPT)
    # the same userdata with the plain entry and the plain header line (a 5-digit size)
    form = {c: sum(len(f"# {ln}\n") for ln in script_form(c, 10000, AWS_USERDATA_LIMIT))
            for c in (True, False)}  # fmt: skip
    plain_size = (len(result.userdata) - len(script_entry(True)) - form[True]
                  + len(script_entry(False)) + form[False])  # fmt: skip
    assert plain_size > AWS_USERDATA_LIMIT
    assert f"this userdata would be {plain_size} bytes, over the 16 KiB budget." in (
        header(result.userdata)
    )
    gzipped = render_one(docs, machine, RenderOptions(now=FIXED_NOW, gzip=True))
    text = gzip.decompress(gzipped.value)
    assert "encoding" not in files_by_path(yaml.safe_load(text))[SCRIPT_PATH]
    assert f"{SCRIPT_PATH} ships as plain text (last write_files entry)." in header(text)


HOSTILE = [
    "echo one\n#cloud-config\nruncmd: [rm -rf /]",
    "echo two\x85runcmd: [evil]",
    "echo three\u2028users: [evil]",
    "printf '\\a' # bell: \x07",
]


def test_hostile_commands_stay_commands() -> None:
    """Line breaks YAML knows and control characters in a command cannot end the comment
    block and add keys: the userdata parses to the same sections, the commands unchanged."""
    docs, machine = objects("worker", pre=HOSTILE)
    result = render_one(docs, machine, RenderOptions(now=FIXED_NOW))
    parsed = assert_valid_cloud_config(result.userdata)
    assert "users" not in parsed or all(u != "evil" for u in parsed["users"])
    assert parsed["runcmd"] == [[SCRIPT_PATH, "/run/kubeadm/nodesmith-bootstrap.json"]]
    assert script_config(parsed)["pre"] == HOSTILE
    assert "  pre:     echo two\\x85runcmd: [evil]" in header(result.userdata)
    assert "           #cloud-config" in header(result.userdata)
