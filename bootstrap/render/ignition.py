"""``format: ignition``: the same node as the cloud-config, as an Ignition v3 config (Flatcar).

The pipeline builds one set of sections for both formats; this module turns them into
Ignition's ``storage.files``, ``passwd.users`` and ``systemd.units``, so the files, users and
commands cannot drift apart. Where Flatcar differs from a cloud-init image, paths move:

- Ignition writes the root before ``/run`` is mounted, so nothing the node needs at boot may
  live under ``/run``: the kubeadm file goes where CABPK's Ignition puts it, ``/etc/kubeadm.yml``
  (the providers' Flatcar templates edit it there: ``envsubst < /etc/kubeadm.yml``, CAPZ's
  ``sed -i``), moved to ``/run/kubeadm/`` once kubeadm has used it (it holds the token), and
  the script's config to ``/etc/nodesmith/bootstrap.env`` (both 0600, as under ``/run``).
- CABPK's names: ``kubeadm.service`` runs ``/etc/kubeadm.sh`` (CAPV's kube-vip script reads it
  for ``kubeadm init``; the providers' ``additionalConfig`` adds drop-ins to that unit, such as
  the ``EnvironmentFile`` their ``envsubst`` needs), which runs the script.
- ``/usr`` is read-only there: the script goes to ``/opt/bin``.
- There is no python3: the script is the bash twin ``cloudinit/nodesmith-bootstrap.sh``, with
  the same phases, reasons, retries and status file (one test table runs both).
- There is no ``runcmd``/``bootcmd``: ``kubeadm.service`` runs the script once per boot (it
  does nothing on a node that has joined), ``nodesmith-bootcmd.service`` runs the boot
  commands first on every boot, as cloud-init's bootcmd does.
- ``sudo`` has no Ignition field: a sudoers drop-in per user carries it, as cloud-init writes.

Text files are ``data:,`` URLs (percent-encoded, still readable); binary ones base64.
"""

from __future__ import annotations

import base64
import functools
import gzip
import json
import posixpath
import urllib.parse
from typing import Any

from bootstrap.resources import data_dir

VERSION = "3.3.0"  # what Flatcar's Ignition 2.14 reads, and Debian's ignition-validate
SCRIPT = "nodesmith-bootstrap.sh"
SCRIPT_PATH = "/opt/bin/nodesmith-bootstrap"
CONFIG_PATH = "/etc/nodesmith/bootstrap.env"
KUBEADM_PATH = "/etc/kubeadm.yml"  # CABPK's
KUBEADM_SH = "/etc/kubeadm.sh"  # CABPK's
BOOTCMD_PATH = "/etc/nodesmith/bootcmd.sh"
NTP_PATH = "/etc/systemd/timesyncd.conf.d/nodesmith.conf"
UNIT = "kubeadm.service"  # CABPK's name: the providers' additionalConfig adds drop-ins to it
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


def bootstrap_unit(mounts: list[str]) -> str:
    """``kubeadm.service``; after the config's mounts (an etcd disk must be there first)."""
    return "\n".join(
        [
            "[Unit]",
            "Description=nodesmith: make this machine a Kubernetes node (kubeadm)",
            "Wants=network-online.target",
            f"After=network-online.target containerd.service {BOOTCMD_UNIT}",
            *([f"RequiresMountsFor={' '.join(mounts)}"] if mounts else []),
            "[Service]",
            "Type=oneshot",
            "RemainAfterExit=yes",
            "TimeoutStartSec=0",
            # Flatcar's kubeadm and kubelet live in /opt/bin (sysext or image-builder), which
            # systemd's default PATH lacks.
            f"Environment=PATH={UNIT_PATH}",
            f"ExecStart={KUBEADM_SH}",
            "StandardOutput=journal+console",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )


def kubeadm_sh(command: list[str]) -> str:
    """CABPK's ``/etc/kubeadm.sh``: what ``kubeadm.service`` runs. It names the kubeadm command
    (CAPV's kube-vip script greps it for ``kubeadm init``) and runs the bootstrap script, which
    runs the pre-commands, kubeadm with retries, the post-commands and the sentinel."""
    return "\n".join(
        [
            "#!/bin/bash",
            "# nodesmith: runs, with retries and a status in /run/cluster-api:",
            "#   " + " ".join(command),
            f"exec {SCRIPT_PATH} {CONFIG_PATH}",
            "",
        ]
    )


def unit_name(path: str) -> str:
    """``systemd-escape --path --suffix=mount``: ``/var/lib/etcddisk`` -> ``var-lib-etcddisk``."""
    trimmed = path.strip("/")
    if not trimmed:
        return "-.mount"
    out = []
    for i, char in enumerate(trimmed):
        if char == "/":
            out.append("-")
        elif char.isascii() and (char.isalnum() or char in ":_" or (char == "." and i > 0)):
            out.append(char)
        else:
            out.extend(f"\\x{b:02x}" for b in char.encode())
    return "".join(out) + ".mount"


def _what(source: str) -> str:
    """A cloud-init mount's first field as the device systemd mounts: a path as it is, else a
    filesystem label (a diskSetup one, as CABPK maps it), ``LABEL=`` or ``UUID=``."""
    if source.startswith("/"):
        return source
    for prefix, folder in (("LABEL=", "by-label"), ("UUID=", "by-uuid")):
        if source.startswith(prefix):
            return f"/dev/disk/{folder}/{source[len(prefix) :]}"
    return f"/dev/disk/by-label/{source}"


def disks(
    sections: dict[str, Any],
) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """``diskSetup`` and ``mounts`` as Ignition's ``storage.disks``/``filesystems`` and mount
    units, as CABPK's Container Linux template writes them: a ``layout`` disk gets one
    partition filling it (GPT: Ignition's only table), each filesystem is made with its
    label and options, each mount is a ``.mount`` unit the bootstrap unit waits for (its
    mount points, returned third)."""
    storage: dict[str, Any] = {}
    out = []
    for device, disk in (sections.get("disk_setup") or {}).items():
        entry: dict[str, Any] = {"device": device}
        if disk.get("overwrite") is not None:
            entry["wipeTable"] = disk["overwrite"]
        if disk.get("layout") is True:
            entry["partitions"] = [{"number": 1}]
        out.append(entry)
    if out:
        storage["disks"] = out
    filesystems = []
    for fs in sections.get("fs_setup") or []:
        item: dict[str, Any] = {"device": fs["device"], "format": fs["filesystem"]}
        if fs.get("label"):
            item["label"] = fs["label"]
        if fs.get("overwrite") is not None:
            item["wipeFilesystem"] = fs["overwrite"]
        if fs.get("extra_opts"):
            item["options"] = list(fs["extra_opts"])
        filesystems.append(item)
    if filesystems:
        storage["filesystems"] = filesystems
    units, mounted = [], []
    for mount in sections.get("mounts") or []:
        # cloud-init's (fstab's) fields: device, mount point, type, options, dump, pass
        source, where, *rest = mount
        where = posixpath.normpath(where)  # checked absolute, without blanks (check_ignition)
        mounted.append(where)
        lines = ["[Unit]", f"Description=Mount {source}", "[Mount]",
                 f"What={_what(source)}", f"Where={where}"]  # fmt: skip
        if len(rest) > 0 and rest[0] not in ("", "auto"):
            lines.append(f"Type={rest[0]}")
        if len(rest) > 1 and rest[1] not in ("", "defaults"):
            lines.append(f"Options={rest[1]}")
        lines += ["[Install]", "WantedBy=multi-user.target", ""]
        units.append({"name": unit_name(where), "enabled": True, "contents": "\n".join(lines)})
    return storage, units, mounted


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


def config(
    sections: dict[str, Any], warnings: list[str], compressed: bool, command: list[str]
) -> dict[str, Any]:
    """The Ignition config for these cloud-config sections (files, users, ntp, bootcmd) plus
    the bash script and its units. ``runcmd`` is replaced by ``kubeadm.service``.
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
    files.append(_text_file(KUBEADM_SH, kubeadm_sh(command), 0o700))
    storage, mount_units, mounted = disks(sections)
    units = [{"name": UNIT, "enabled": True, "contents": bootstrap_unit(mounted)}]
    units += mount_units
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
    doc["storage"] = {**storage, "files": files}
    doc["systemd"] = {"units": units}
    return doc


@functools.cache
def plain_script_sh() -> str:
    """The bash twin as it is in ``cloudinit/``, comments and all: nothing to unpack."""
    return (data_dir("cloudinit") / SCRIPT).read_text(encoding="utf-8")


def dump(doc: dict[str, Any]) -> bytes:
    """The config as the node reads it: JSON, indented for the operator who reads it too."""
    return (json.dumps(doc, indent=2) + "\n").encode()
