"""Every file the userdata writes is on the node with its mode, owner and content.

One exception: the kubeadm file's content. The pre-commands may edit it where CABPK writes it
(the providers' ``sed -i``/``envsubst``; docs/render.md), so only its mode and owner are held
to the rendered ones."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
from typing import Any

SCRIPT_CONFIG = "/run/kubeadm/nodesmith-bootstrap.json"

_B64 = {"b64", "base64"}
_GZ = {"gz", "gzip"}
_GZ_B64 = {"gz+b64", "gzip+base64", "gz+base64", "gzip+b64"}


def expected_bytes(entry: dict[str, Any]) -> bytes:
    """The bytes cloud-init writes for a write_files entry (its ``encoding`` undone)."""
    content = entry.get("content", "")
    encoding = str(entry.get("encoding", "text")).lower()
    raw = content.encode() if isinstance(content, str) else bytes(content)
    if encoding in _B64:
        return base64.b64decode(raw)
    if encoding in _GZ_B64:
        return gzip.decompress(base64.b64decode(raw))
    if encoding in _GZ:
        return gzip.decompress(raw)
    return raw


def kubeadm_file(entries: list[dict[str, Any]]) -> str | None:
    """The file ``kubeadm --config`` reads, as the script's rendered config names it."""
    for entry in entries:
        if entry["path"] == SCRIPT_CONFIG:
            command = json.loads(expected_bytes(entry))["command"]
            return str(command[command.index("--config") + 1])
    return None


def check_entry(host: Any, entry: dict[str, Any], editable: bool = False) -> list[str]:
    """Return what is wrong with one entry on ``host`` (empty when it is all there);
    ``editable``: its content is the pre-commands' to change."""
    path = entry["path"]
    res = host.run(f"stat -c '%a %U %G' {path} && sha256sum {path}")
    if res.rc != 0:
        return [f"{path}: missing"]
    mode, user_on, group_on = res.stdout.split()[:3]
    got = res.stdout.split()[3]
    problems = []
    want_mode = int(str(entry.get("permissions", "0644")), 8)
    if int(mode, 8) != want_mode:
        problems.append(f"{path}: mode {int(mode, 8):04o}, want {want_mode:04o}")
    owner = str(entry.get("owner", "root:root"))
    user, _, group = owner.partition(":")
    if user_on != user or (group and group_on != group):
        problems.append(f"{path}: owner {user_on}:{group_on}, want {owner}")
    want = expected_bytes(entry)
    if editable:
        return problems
    if entry.get("append"):
        if want not in host.file(path).content:
            problems.append(f"{path}: appended content is missing")
    elif got != hashlib.sha256(want).hexdigest():
        problems.append(
            f"{path}: content differs from the rendered one (sha256 {got[:12]} on "
            f"the node, {hashlib.sha256(want).hexdigest()[:12]} rendered)"
        )
    return problems


def test_rendered_files_present(host: Any, userdata: dict[str, Any]) -> None:
    entries = userdata.get("write_files") or []
    assert entries, "the userdata writes no files: nothing nodesmith rendered reached the node"
    edited = kubeadm_file(entries)
    problems = [p for e in entries for p in check_entry(host, e, e["path"] == edited)]
    assert not problems, "; ".join(problems)
