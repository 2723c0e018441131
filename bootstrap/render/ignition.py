"""``format: ignition``: the same node as the cloud-config, as an Ignition v3 config (Flatcar).

The pipeline builds one set of sections for both formats; this module turns them into
Ignition's ``storage.files``, ``passwd.users`` and ``systemd.units``, so the files, users and
commands cannot drift apart. Where Flatcar differs from a cloud-init image, paths move:

- Ignition writes the root before ``/run`` is mounted, so nothing the node needs at boot may
  live under ``/run``: the kubeadm file goes to ``/etc/kubeadm/`` and the script's config to
  ``/etc/nodesmith/bootstrap.env`` (both 0600, as under ``/run``).
- ``/usr`` is read-only there: the script goes to ``/opt/bin``.
- There is no python3: the script is the bash twin ``cloudinit/nodesmith-bootstrap.sh``, with
  the same phases, reasons, retries and status file (one test table runs both).
- There is no ``runcmd``/``bootcmd``: ``nodesmith-bootstrap.service`` runs the script once per
  boot (it does nothing on a node that has joined), ``nodesmith-bootcmd.service`` runs the
  boot commands first on every boot, as cloud-init's bootcmd does.
- ``sudo`` has no Ignition field: a sudoers drop-in per user carries it, as cloud-init writes.

Text files are ``data:,`` URLs (percent-encoded, still readable); binary ones base64.
"""

from __future__ import annotations

import base64
import functools
import gzip
import json
import urllib.parse
from typing import Any

from bootstrap.resources import data_dir

VERSION = "3.3.0"  # what Flatcar's Ignition 2.14 reads, and Debian's ignition-validate
SCRIPT = "nodesmith-bootstrap.sh"
SCRIPT_PATH = "/opt/bin/nodesmith-bootstrap"
CONFIG_PATH = "/etc/nodesmith/bootstrap.env"
KUBEADM_DIR = "/etc/kubeadm"
BOOTCMD_PATH = "/etc/nodesmith/bootcmd.sh"
NTP_PATH = "/etc/systemd/timesyncd.conf.d/nodesmith.conf"
UNIT = "nodesmith-bootstrap.service"
UNIT_PATH = "/opt/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BOOTCMD_UNIT = "nodesmith-bootcmd.service"
# Characters a data URL may carry as they are (RFC 2397 is RFC 3986's uric); others are %XX.
_SAFE = "/:;=,.-_~!$&'()*+@"


def data_url(raw: bytes) -> str:
    """Text as a percent-encoded ``data:,`` URL an operator can still read; binary as base64."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "data:;base64," + base64.b64encode(raw).decode()
    return "data:," + urllib.parse.quote(text, safe=_SAFE)


def _content(entry: dict[str, Any]) -> tuple[bytes, str | None]:
    """A write_files entry's bytes as Ignition should fetch them, and their compression."""
    content = entry.get("content", "")
    encoding = entry.get("encoding")
    if encoding == "b64":
        return base64.b64decode(content), None
    if encoding == "gz+b64":
        return base64.b64decode(content), "gzip"  # Ignition gunzips it on the node
    return str(content).encode(), None


def storage_file(entry: dict[str, Any]) -> dict[str, Any]:
    """One cloud-config write_files entry as an Ignition ``storage.files`` entry."""
    raw, compression = _content(entry)
    resource: dict[str, Any] = {"source": data_url(raw)}
    if compression:
        resource["compression"] = compression
    out: dict[str, Any] = {"path": entry["path"], "mode": int(entry.get("permissions", "0644"), 8)}
    owner = entry.get("owner")
    if owner:
        user, _, group = str(owner).partition(":")
        out["user"] = {"name": user}
        if group:
            out["group"] = {"name": group}
    if entry.get("append"):
        out["append"] = [resource]
    else:
        out["overwrite"] = True
        out["contents"] = resource
    return out


def _text_file(path: str, text: str, mode: int) -> dict[str, Any]:
    return storage_file({"path": path, "content": text, "permissions": f"{mode:o}"})


def passwd_user(entry: dict[str, Any], warnings: list[str]) -> dict[str, Any]:
    """A cloud-config user as an Ignition user; what Ignition cannot say is said in a warning."""
    out: dict[str, Any] = {"name": entry["name"]}
    for ours, theirs in (
        ("passwd", "passwordHash"),
        ("gecos", "gecos"),
        ("homedir", "homeDir"),
        ("shell", "shell"),
        ("primary_group", "primaryGroup"),
        ("ssh_authorized_keys", "sshAuthorizedKeys"),
    ):
        if ours in entry:
            out[theirs] = entry[ours]
    if entry.get("groups"):
        out["groups"] = [g.strip() for g in str(entry["groups"]).split(",") if g.strip()]
    if "inactive" in entry:
        warnings.append(
            f"user {entry['name']}: inactive is not carried by Ignition; the account is active"
        )
    return out


def bootstrap_unit() -> str:
    return "\n".join(
        [
            "[Unit]",
            "Description=nodesmith: make this machine a Kubernetes node (kubeadm)",
            "Wants=network-online.target",
            f"After=network-online.target containerd.service {BOOTCMD_UNIT}",
            "[Service]",
            "Type=oneshot",
            "RemainAfterExit=yes",
            "TimeoutStartSec=0",
            # Flatcar's kubeadm and kubelet live in /opt/bin (sysext or image-builder), which
            # systemd's default PATH lacks.
            f"Environment=PATH={UNIT_PATH}",
            f"ExecStart={SCRIPT_PATH} {CONFIG_PATH}",
            "StandardOutput=journal+console",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )


def bootcmd_unit() -> str:
    return "\n".join(
        [
            "[Unit]",
            "Description=nodesmith: the config's boot commands (cloud-init bootcmd), every boot",
            "DefaultDependencies=no",
            "After=local-fs.target",
            f"Before={UNIT}",
            "[Service]",
            "Type=oneshot",
            "RemainAfterExit=yes",
            f"ExecStart=/bin/sh {BOOTCMD_PATH}",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )


def config(sections: dict[str, Any], warnings: list[str], compressed: bool) -> dict[str, Any]:
    """The Ignition config for these cloud-config sections (files, users, ntp, bootcmd) plus
    the bash script and its units. ``runcmd`` is replaced by ``nodesmith-bootstrap.service``.
    The script ships readable unless ``compressed`` (gzip: the size budget needs it)."""
    files = [storage_file(e) for e in sections["write_files"]]
    users = [passwd_user(u, warnings) for u in sections.get("users", [])]
    for u in sections.get("users", []):
        if u.get("sudo"):
            files.append(_text_file(f"/etc/sudoers.d/90-nodesmith-{u['name']}",
                                    f"{u['name']} {u['sudo']}\n", 0o440))  # fmt: skip
    ntp = sections.get("ntp")
    if ntp and ntp.get("enabled", True) and ntp.get("servers"):
        files.append(_text_file(NTP_PATH, "[Time]\nNTP=" + " ".join(ntp["servers"]) + "\n", 0o644))
    units = [{"name": UNIT, "enabled": True, "contents": bootstrap_unit()}]
    if sections.get("bootcmd"):
        files.append(_text_file(BOOTCMD_PATH, "\n".join(sections["bootcmd"]) + "\n", 0o700))
        units.insert(0, {"name": BOOTCMD_UNIT, "enabled": True, "contents": bootcmd_unit()})
    if compressed:
        packed = gzip.compress(plain_script_sh().encode(), compresslevel=9, mtime=0)
        files.append(storage_file({"path": SCRIPT_PATH, "permissions": "0755",
                                   "encoding": "gz+b64",
                                   "content": base64.b64encode(packed).decode()}))  # fmt: skip
    else:
        files.append(_text_file(SCRIPT_PATH, plain_script_sh(), 0o755))
    doc: dict[str, Any] = {"ignition": {"version": VERSION}}
    if users:
        doc["passwd"] = {"users": users}
    doc["storage"] = {"files": files}
    doc["systemd"] = {"units": units}
    return doc


@functools.cache
def plain_script_sh() -> str:
    """The bash twin as it is in ``cloudinit/``, comments and all: nothing to unpack."""
    return (data_dir("cloudinit") / SCRIPT).read_text(encoding="utf-8")


def render(sections: dict[str, Any], warnings: list[str], compressed: bool = False) -> bytes:
    return (json.dumps(config(sections, warnings, compressed), indent=2) + "\n").encode()
