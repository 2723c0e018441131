"""Build the cloud-config sections from a KubeadmConfig spec: files, users, ntp, disks.

Secret references (``contentFrom``, ``passwdFrom``) are resolved here from Secrets in the
Machine's namespace, as CABPK's resolveFiles/resolveUsers do, so the rendered userdata is
self-contained. A Secret that is not there yet is transient; a missing key is terminal.
Nothing in this module logs a value.
"""

from __future__ import annotations

import base64
import binascii
import posixpath
import zlib
from collections.abc import Callable
from typing import Any

from bootstrap.errors import ObjectRef, TerminalError, TransientError, show_value
from bootstrap.render.objects import File, KubeadmConfigSpec, Secret, SecretKeyRef, User

SecretLookup = Callable[[str], Secret | None]

# cloud-init's write_files encodings, keyed by the Cluster API spelling.
_ENCODINGS = {"base64": "b64", "gzip+base64": "gz+b64"}
# What inline gzip content may expand to. It is only checked, never kept, but a 1 MiB body
# can carry gigabytes of zeros; a file larger than this has no place in userdata.
MAX_GUNZIPPED = 64 * 1024 * 1024
_CHUNK = 1024 * 1024


def gunzipped_size(raw: bytes, limit: int = MAX_GUNZIPPED) -> int:
    """Check ``raw`` is valid gzip (every member, as ``gzip.decompress`` reads it) by
    streaming it, never holding more than 1 MiB of output; stop past ``limit`` bytes.

    Returns the size, or ``limit + 1`` once it is known to be larger. Raises ``zlib.error``
    (also for trailing garbage) or ``EOFError`` (truncated) when it is not gzip.
    """
    size, rest = 0, raw
    while rest:
        member = zlib.decompressobj(wbits=31)  # 31: gzip header and trailer
        data = rest
        while data and not member.eof:
            size += len(member.decompress(data, _CHUNK))
            if size > limit:
                return limit + 1
            data = member.unconsumed_tail
        if not member.eof:
            raise EOFError("compressed data ended before the end-of-stream marker")
        rest = member.unused_data
    return size


def secret_value(ref: SecretKeyRef, lookup: SecretLookup, obj: ObjectRef, field: str) -> bytes:
    secret = lookup(ref.name)
    if secret is None:
        raise TransientError(
            f"Secret {obj.namespace}/{ref.name} is not there yet",
            obj=obj,
            field=field,
            reason="SecretNotFound",
        )
    if ref.key not in secret.data:
        raise TerminalError(
            f"Secret {obj.namespace}/{ref.name} has no key {show_value(ref.key)}",
            obj=obj,
            field=f"{field}.key",
            reason="SecretKeyNotFound",
        )
    return secret.data[ref.key]


def _check_encoded(f: File, field: str, obj: ObjectRef) -> None:
    """Inline content must really be what its encoding says, or the node gets garbage."""
    assert f.content is not None
    if f.encoding == "gzip":
        raise TerminalError(
            "gzip content cannot be carried as YAML text; use encoding gzip+base64",
            obj=obj,
            field=f"{field}.encoding",
            reason="InvalidField",
        )
    if f.encoding in ("base64", "gzip+base64"):
        try:
            raw = base64.b64decode(f.content, validate=False)
            size = gunzipped_size(raw) if f.encoding == "gzip+base64" else 0
        except (binascii.Error, ValueError, EOFError, zlib.error):
            raise TerminalError(
                f"content is not valid {f.encoding}",
                obj=obj,
                field=f"{field}.content",
                reason="InvalidField",
            ) from None
        if size > MAX_GUNZIPPED:
            raise TerminalError(
                f"gzip+base64 content expands to more than {MAX_GUNZIPPED // 2**20} MiB",
                obj=obj,
                field=f"{field}.content",
                reason="InvalidField",
            )


def write_file_entry(f: File, index: int, lookup: SecretLookup, obj: ObjectRef) -> dict[str, Any]:
    field = f"spec.files[{index}]"
    if f.content is not None and f.content_from is not None:
        raise TerminalError(
            "sets both content and contentFrom; use one",
            obj=obj,
            field=field,
            reason="InvalidField",
        )
    entry: dict[str, Any] = {"path": f.path}
    if f.owner:
        entry["owner"] = f.owner
    if f.content_from is not None:
        raw = secret_value(f.content_from.secret, lookup, obj, f"{field}.contentFrom.secret")
        entry["permissions"] = f.permissions or "0600"  # secret material: private by default
        if f.encoding in ("gzip", "gzip+base64"):
            # The Secret holds the compressed bytes (gzip) or their base64 (gzip+base64).
            data = raw if f.encoding == "gzip" else _b64decode(raw, obj, field)
            entry["encoding"] = "gz+b64"
            entry["content"] = base64.b64encode(data).decode()
        elif f.encoding == "base64":
            entry["encoding"] = "b64"
            entry["content"] = raw.decode("ascii", "replace").strip()
        else:
            try:
                entry["content"] = raw.decode("utf-8")
            except UnicodeDecodeError:
                entry["encoding"] = "b64"
                entry["content"] = base64.b64encode(raw).decode()
    else:
        content = f.content if f.content is not None else ""
        if f.encoding:
            _check_encoded(f, field, obj)
            entry["encoding"] = _ENCODINGS[f.encoding]
        entry["content"] = content
        if f.permissions:
            entry["permissions"] = f.permissions
    if f.append:
        entry["append"] = True
    return entry


def _b64decode(raw: bytes, obj: ObjectRef, field: str) -> bytes:
    try:
        return base64.b64decode(raw, validate=False)
    except (binascii.Error, ValueError):
        raise TerminalError(
            "Secret content is not base64",
            obj=obj,
            field=f"{field}.contentFrom",
            reason="InvalidField",
        ) from None


def normal_path(path: str) -> str:
    """The file an absolute path names, lexically: ``//a/./b/../c`` -> ``/a/c``."""
    return "/" + posixpath.normpath(path).lstrip("/")


def user_files(
    spec: KubeadmConfigSpec, lookup: SecretLookup, obj: ObjectRef, reserved: set[str]
) -> list[dict[str, Any]]:
    """The user's ``spec.files`` as write_files entries, refusing duplicates and reserved paths.

    Paths are compared normalised (``/etc//x``, ``/etc/./x`` and ``/etc/y/../x`` are all
    ``/etc/x`` on the node), so an alias cannot replace the CA key nodesmith writes.
    """
    seen: dict[str, int] = {}
    taken = {normal_path(path) for path in reserved}
    entries = []
    for index, f in enumerate(spec.files):
        key = normal_path(f.path)
        if key in seen:
            raise TerminalError(
                f"path {show_value(f.path)} is already written by spec.files[{seen[key]}]",
                obj=obj,
                field=f"spec.files[{index}].path",
                reason="DuplicatePath",
            )
        if key in taken:
            raise TerminalError(
                f"path {show_value(f.path)} is written by nodesmith itself",
                obj=obj,
                field=f"spec.files[{index}].path",
                reason="ReservedPath",
            )
        seen[key] = index
        entries.append(write_file_entry(f, index, lookup, obj))
    return entries


def _set(**values: Any) -> dict[str, Any]:
    """The keyword arguments that are set: cloud-init keys are omitted, never null."""
    return {k: v for k, v in values.items() if v is not None}


def user_entry(u: User, index: int, lookup: SecretLookup, obj: ObjectRef) -> dict[str, Any]:
    field = f"spec.users[{index}]"
    entry: dict[str, Any] = {"name": u.name}
    if u.passwd is not None and u.passwd_from is not None:
        raise TerminalError(
            "sets both passwd and passwdFrom; use one", obj=obj, field=field, reason="InvalidField"
        )
    entry.update(
        _set(
            gecos=u.gecos,
            groups=u.groups,
            homedir=u.home_dir,
            shell=u.shell,
            primary_group=u.primary_group,
            lock_passwd=u.lock_password,
            sudo=u.sudo,
        )
    )
    if u.inactive:
        entry["inactive"] = "0"  # cloud-init wants days; Cluster API's bool means "now"
    if u.passwd is not None:
        entry["passwd"] = u.passwd
    elif u.passwd_from is not None:
        raw = secret_value(u.passwd_from.secret, lookup, obj, f"{field}.passwdFrom.secret")
        entry["passwd"] = raw.decode("utf-8", "replace").strip()
    if u.ssh_authorized_keys:
        entry["ssh_authorized_keys"] = list(u.ssh_authorized_keys)
    return entry


def disk_sections(spec: KubeadmConfigSpec) -> dict[str, Any]:
    sections: dict[str, Any] = {}
    if spec.disk_setup and spec.disk_setup.partitions:
        disks: dict[str, Any] = {}
        for p in spec.disk_setup.partitions:
            layout: Any = p.layout
            if p.disk_layout:
                layout = [
                    [d.percentage, d.partition_type] if d.partition_type else d.percentage
                    for d in p.disk_layout
                ]
            disk: dict[str, Any] = {"table_type": p.table_type or "mbr", "layout": layout}
            if p.overwrite is not None:
                disk["overwrite"] = p.overwrite
            disks[p.device] = disk
        sections["disk_setup"] = disks
    if spec.disk_setup and spec.disk_setup.filesystems:
        fs_setup = []
        for fs in spec.disk_setup.filesystems:
            item: dict[str, Any] = {"device": fs.device, "filesystem": fs.filesystem}
            item.update(
                _set(
                    label=fs.label,
                    partition=fs.partition,
                    overwrite=fs.overwrite,
                    replace_fs=fs.replace_fs,
                )
            )
            if fs.extra_opts:
                item["extra_opts"] = list(fs.extra_opts)
            fs_setup.append(item)
        sections["fs_setup"] = fs_setup
    if spec.mounts:
        sections["mounts"] = [list(m) for m in spec.mounts]
    return sections


def ntp_section(spec: KubeadmConfigSpec) -> dict[str, Any]:
    if spec.ntp is None:
        return {}
    ntp: dict[str, Any] = {}
    if spec.ntp.enabled is not None:
        ntp["enabled"] = spec.ntp.enabled
    if spec.ntp.servers:
        ntp["servers"] = list(spec.ntp.servers)
    return {"ntp": ntp} if ntp else {}
