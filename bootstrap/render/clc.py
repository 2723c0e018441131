"""``spec.ignition.containerLinuxConfig.additionalConfig``: a Container Linux Config snippet,
translated to Ignition v3 and merged into the config nodesmith writes, as CABPK merges it into
its v2 one.

Every Flatcar template of the Cluster API providers carries one: drop-ins for CABPK's
``kubeadm.service`` (the ``EnvironmentFile`` their ``envsubst`` reads), units such as
``coreos-metadata`` or ``set-hostname``, files. The Container Linux Config (``ct``'s YAML) is
the v2 form of what Butane's ``flatcar`` variant writes for Ignition v3; the sections a node
config uses translate field by field:

- ``storage.files``/``directories``/``links`` (on the root filesystem), ``disks``,
  ``filesystems``; ``systemd.units`` with drop-ins; ``networkd.units`` (written as files under
  ``/etc/systemd/network``, as ``ct`` does); ``passwd.users``/``groups``.
- Container Linux's own services (``etcd``, ``flannel``, ``docker``, ``update``,
  ``locksmith``), ``storage.raid`` and ``ignition`` (config append/replace) are refused by
  name: nodesmith does not guess what they meant on Flatcar.

Merging: the snippet's entries are added to nodesmith's. A file, directory or link at a path
nodesmith writes, or a user of the config's ``users``, is refused (two owners of one thing);
a unit nodesmith writes (``kubeadm.service``) takes the snippet's drop-ins, but not new
contents (that would replace the bootstrap).
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bootstrap.errors import ObjectRef, TerminalError, invalid
from bootstrap.render import yamlio
from bootstrap.render.ignition import data_url
from bootstrap.render.objects import validation_error

FIELD = "spec.ignition.containerLinuxConfig.additionalConfig"
MAX_CHARS = 32768  # CABPK's limit for the snippet
MAX_VALUES = 100_000  # what YAML aliases may expand it to
# ct's names for partition types, as the GUIDs Ignition v3 takes
TYPE_ALIASES = {
    "raid_containing_root": "be9067b9-ea49-4f15-b4f6-f36f8c9e1818",
    "linux_filesystem_data": "0fc63daf-8483-4772-8e79-3d69d8477de4",
    "swap_partition": "0657fd6d-a4ab-43c4-84e5-0933c84b4f4f",
    "raid_partition": "a19d880f-05fc-4d3b-a006-743f0f84911e",
}
_SIZE = re.compile(r"^(\d+)\s*(KiB|MiB|GiB|TiB)$")
_MIB = {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024, "TiB": 1024 * 1024}


class _Clc(BaseModel):
    """A Container Linux Config structure: every field known (``ct`` is strict too)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, strict=True)


class _Owner(_Clc):
    id: int | None = None
    name: str | None = None


class _Hash(_Clc):
    function: str
    sum: str


class _Verification(_Clc):
    hash: _Hash | None = None


class _Remote(_Clc):
    url: str
    compression: str | None = None
    verification: _Verification | None = None


class _Contents(_Clc):
    inline: str | None = None
    remote: _Remote | None = None


class _Node(_Clc):
    filesystem: str = "root"
    path: str = Field(pattern=r"^/")
    user: _Owner | None = None
    group: _Owner | None = None
    overwrite: bool | None = None


class _File(_Node):
    contents: _Contents | None = None
    mode: int | None = None
    append: bool = False


class _Directory(_Node):
    mode: int | None = None


class _Link(_Node):
    target: str
    hard: bool | None = None


class _Partition(_Clc):
    label: str | None = None
    number: int | None = None
    size: str | None = None
    start: str | None = None
    type_guid: str | None = None
    guid: str | None = None


class _Disk(_Clc):
    device: str
    wipe_table: bool | None = None
    partitions: list[_Partition] = []


class _Mount(_Clc):
    device: str
    format: str
    wipe_filesystem: bool | None = None
    label: str | None = None
    uuid: str | None = None
    options: list[str] = []


class _Filesystem(_Clc):
    name: str | None = None
    mount: _Mount | None = None
    path: str | None = None


class _Storage(_Clc):
    disks: list[_Disk] = []
    filesystems: list[_Filesystem] = []
    files: list[_File] = []
    directories: list[_Directory] = []
    links: list[_Link] = []


class _Dropin(_Clc):
    name: str
    contents: str


class _Unit(_Clc):
    name: str
    enable: bool | None = None  # ct's old spelling of enabled
    enabled: bool | None = None
    mask: bool | None = None
    contents: str | None = None
    dropins: list[_Dropin] = []


class _Systemd(_Clc):
    units: list[_Unit] = []


class _NetworkdUnit(_Clc):
    name: str
    contents: str | None = None
    dropins: list[_Dropin] = []


class _Networkd(_Clc):
    units: list[_NetworkdUnit] = []


class _User(_Clc):
    name: str
    password_hash: str | None = None
    ssh_authorized_keys: list[str] = []
    uid: int | None = None
    gecos: str | None = None
    home_dir: str | None = None
    no_create_home: bool | None = None
    primary_group: str | None = None
    groups: list[str] = []
    no_user_group: bool | None = None
    system: bool | None = None
    no_log_init: bool | None = None
    shell: str | None = None


class _Group(_Clc):
    name: str
    gid: int | None = None
    password_hash: str | None = None
    system: bool | None = None


class _Passwd(_Clc):
    users: list[_User] = []
    groups: list[_Group] = []


class _Config(_Clc):
    storage: _Storage = _Storage()
    systemd: _Systemd = _Systemd()
    networkd: _Networkd = _Networkd()
    passwd: _Passwd = _Passwd()


_REFUSED = {
    "etcd": "Container Linux's etcd service",
    "flannel": "Container Linux's flannel service",
    "docker": "Container Linux's docker flags",
    "update": "Container Linux's update settings",
    "locksmith": "Container Linux's locksmith settings",
    "ignition": "an Ignition config append/replace",
}


def _refuse(ref: ObjectRef, where: str, why: str) -> TerminalError:
    return TerminalError(why, obj=ref, field=f"{FIELD}.{where}", reason="FormatNotSupported")


def parse(text: str, ref: ObjectRef) -> _Config:
    """The snippet, checked: YAML, a mapping, only sections nodesmith translates."""
    if len(text) > MAX_CHARS:
        raise invalid(ref, FIELD, f"{len(text)} characters", f"is over {MAX_CHARS} characters")
    try:
        docs, values = yamlio.load_all_counted(text)
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" (line {where.line + 1})" if where is not None else ""
        raise TerminalError(
            f"is not YAML{line}", obj=ref, field=FIELD, reason="InvalidField"
        ) from None
    if values is None and _count(docs) > MAX_VALUES:
        raise invalid(ref, FIELD, "YAML aliases", f"expand to more than {MAX_VALUES} values")
    if len(docs) > 1:
        raise invalid(ref, FIELD, f"{len(docs)} documents", "must be one YAML document")
    doc = docs[0] if docs else None
    if doc is None:
        return _Config()
    if not isinstance(doc, dict):
        raise invalid(ref, FIELD, doc, "must be a Container Linux Config (a mapping)")
    for key, what in _REFUSED.items():
        if key in doc:
            raise _refuse(ref, key, f"is {what}, which nodesmith does not translate to Ignition v3")
    storage = doc.get("storage")
    if isinstance(storage, dict) and "raid" in storage:
        raise _refuse(ref, "storage.raid", "RAID arrays are not translated to Ignition v3")
    try:
        return _Config.model_validate(doc)
    except ValidationError as exc:
        error = validation_error(exc, ref)
        raise TerminalError(
            str(error.args[0]) if error.args else "is invalid",
            obj=ref,
            field=f"{FIELD}.{error.field}",
            reason="InvalidField",
        ) from None


def _count(value: Any) -> int:
    seen, stack = 0, [value]
    while stack and seen <= MAX_VALUES:
        item = stack.pop()
        seen += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return seen


def _mib(value: str | None, ref: ObjectRef, where: str) -> int | None:
    if value is None:
        return None
    found = _SIZE.match(value.strip())
    mib = float(found.group(1)) * _MIB[found.group(2)] if found else -1.0
    if mib < 0 or mib != int(mib):
        raise invalid(ref, f"{FIELD}.{where}", value, "must be a whole number of MiB with a "
                      "unit, such as 512MiB or 2GiB")  # fmt: skip
    return int(mib)


def _owner(owner: _Owner | None) -> dict[str, Any] | None:
    if owner is None:
        return None
    return {k: v for k, v in (("id", owner.id), ("name", owner.name)) if v is not None}


def _node(node: _Node, ref: ObjectRef, where: str) -> dict[str, Any]:
    if node.filesystem != "root":
        raise _refuse(ref, f"{where}.filesystem", f"names filesystem {node.filesystem!r}: "
                      "nodesmith translates entries on the root filesystem only")  # fmt: skip
    out: dict[str, Any] = {"path": node.path}
    for key in ("user", "group"):
        owner = _owner(getattr(node, key))
        if owner:
            out[key] = owner
    return out


def _resource(contents: _Contents | None) -> dict[str, Any]:
    if contents is None or contents.remote is None:
        text = contents.inline if contents is not None and contents.inline is not None else ""
        return {"source": data_url(text.encode())}
    remote = contents.remote
    out: dict[str, Any] = {"source": remote.url}
    if remote.compression:
        out["compression"] = remote.compression
    if remote.verification and remote.verification.hash:
        digest = remote.verification.hash
        out["verification"] = {"hash": f"{digest.function}-{digest.sum}"}
    return out


def _dropins(dropins: list[_Dropin]) -> list[dict[str, Any]]:
    return [{"name": d.name, "contents": d.contents} for d in dropins]


def translate(config: _Config, ref: ObjectRef) -> dict[str, Any]:
    """The Ignition v3 sections (``storage``, ``systemd``, ``passwd``) the snippet stands for,
    inline contents as ``data:`` URLs like the rest of the config."""
    storage: dict[str, list[dict[str, Any]]] = {
        "files": [], "directories": [], "links": [], "disks": [], "filesystems": []}  # fmt: skip
    for i, f in enumerate(config.storage.files):
        entry = _node(f, ref, f"storage.files[{i}]")
        if f.mode is not None:
            entry["mode"] = f.mode
        resource = _resource(f.contents)
        if f.append:
            entry["append"] = [resource]
        else:  # Ignition v2 overwrote a file by default; v3 must be told
            entry["overwrite"] = True if f.overwrite is None else f.overwrite
            entry["contents"] = resource
        storage["files"].append(entry)
    for i, d in enumerate(config.storage.directories):
        entry = _node(d, ref, f"storage.directories[{i}]")
        entry.update({k: v for k, v in (("mode", d.mode), ("overwrite", d.overwrite))
                      if v is not None})  # fmt: skip
        storage["directories"].append(entry)
    for i, link in enumerate(config.storage.links):
        entry = _node(link, ref, f"storage.links[{i}]")
        entry["target"] = link.target
        entry.update({k: v for k, v in (("hard", link.hard), ("overwrite", link.overwrite))
                      if v is not None})  # fmt: skip
        storage["links"].append(entry)
    for i, disk in enumerate(config.storage.disks):
        parts = []
        for j, p in enumerate(disk.partitions):
            where = f"storage.disks[{i}].partitions[{j}]"
            type_guid = TYPE_ALIASES.get(p.type_guid or "", p.type_guid)
            part = {"label": p.label, "number": p.number, "typeGuid": type_guid,
                    "guid": p.guid, "sizeMiB": _mib(p.size, ref, f"{where}.size"),
                    "startMiB": _mib(p.start, ref, f"{where}.start")}  # fmt: skip
            parts.append({k: v for k, v in part.items() if v is not None})
        out: dict[str, Any] = {"device": disk.device, "partitions": parts}
        if disk.wipe_table is not None:
            out["wipeTable"] = disk.wipe_table
        storage["disks"].append(out)
    for i, fs in enumerate(config.storage.filesystems):
        if fs.mount is None:
            raise _refuse(ref, f"storage.filesystems[{i}]", "has no mount: only filesystems "
                          "to create or mount are translated")  # fmt: skip
        m = fs.mount
        item = {"device": m.device, "format": m.format, "wipeFilesystem": m.wipe_filesystem,
                "label": m.label, "uuid": m.uuid, "options": m.options or None,
                "path": fs.path}  # fmt: skip
        storage["filesystems"].append({k: v for k, v in item.items() if v is not None})
    for network in config.networkd.units:  # as ct writes them: files systemd-networkd reads
        base = f"/etc/systemd/network/{network.name}"
        texts = [(base, network.contents)] if network.contents is not None else []
        texts += [(f"{base}.d/{d.name}", d.contents) for d in network.dropins]
        for path, text in texts:
            source = {"source": data_url(text.encode())}
            storage["files"].append(
                {"path": path, "mode": 0o644, "overwrite": True, "contents": source}
            )
    units = []
    for unit in config.systemd.units:
        out = {"name": unit.name}
        enabled = unit.enabled if unit.enabled is not None else unit.enable
        out.update({k: v for k, v in (("enabled", enabled), ("mask", unit.mask),
                                       ("contents", unit.contents)) if v is not None})  # fmt: skip
        if unit.dropins:
            out["dropins"] = _dropins(unit.dropins)
        units.append(out)
    users = []
    for user in config.passwd.users:
        entry = {"name": user.name, "passwordHash": user.password_hash,
                 "sshAuthorizedKeys": user.ssh_authorized_keys or None, "uid": user.uid,
                 "gecos": user.gecos, "homeDir": user.home_dir, "noCreateHome": user.no_create_home,
                 "primaryGroup": user.primary_group, "groups": user.groups or None,
                 "noUserGroup": user.no_user_group, "system": user.system,
                 "noLogInit": user.no_log_init, "shell": user.shell}  # fmt: skip
        users.append({k: v for k, v in entry.items() if v is not None})
    groups = []
    for group in config.passwd.groups:
        entry = {"name": group.name, "gid": group.gid, "passwordHash": group.password_hash,
                 "system": group.system}  # fmt: skip
        groups.append({k: v for k, v in entry.items() if v is not None})
    _one_entry_a_path(storage, ref)
    seen_units: set[str] = set()
    for i, unit_entry in enumerate(units):
        if unit_entry["name"] in seen_units:
            raise _refuse(ref, f"systemd.units[{i}].name", f"repeats {unit_entry['name']!r}: "
                          "Ignition v3 takes one entry a unit")  # fmt: skip
        seen_units.add(unit_entry["name"])
    return {
        "storage": {k: v for k, v in storage.items() if v},
        "systemd": {"units": units} if units else {},
        "passwd": {k: v for k, v in (("users", users), ("groups", groups)) if v},
    }


def _one_entry_a_path(storage: dict[str, list[dict[str, Any]]], ref: ObjectRef) -> None:
    """Ignition v3 refuses two entries for one path (v2 took them): appends to one file
    become one entry's ``append`` list; any other repeat is refused, naming it."""
    files: list[dict[str, Any]] = []
    appended: dict[str, dict[str, Any]] = {}
    for entry in storage["files"]:
        earlier = appended.get(entry["path"])
        if earlier is not None and "append" in entry:
            earlier["append"].extend(entry["append"])
            continue
        if "append" in entry:
            appended[entry["path"]] = entry
        files.append(entry)
    storage["files"] = files
    seen: set[str] = set()
    for kind in ("files", "directories", "links"):
        for i, entry in enumerate(storage[kind]):
            if entry["path"] in seen:
                raise _refuse(ref, f"storage.{kind}[{i}].path", f"repeats {entry['path']!r}: "
                              "Ignition v3 takes one entry a path")  # fmt: skip
            seen.add(entry["path"])


def merge(ours: dict[str, Any], theirs: dict[str, Any], ref: ObjectRef) -> None:
    """Add the snippet's sections to ``ours`` (in place), refusing what two would own."""
    storage = ours.setdefault("storage", {})
    for kind in ("files", "directories", "links"):
        taken = {e["path"] for k in ("files", "directories", "links") for e in storage.get(k, [])}
        for i, entry in enumerate(theirs.get("storage", {}).get(kind, [])):
            if entry["path"] in taken:
                why = f"is {entry['path']!r}, which nodesmith or the config's files write"
                raise _refuse(ref, f"storage.{kind}[{i}].path", why + ": one owner a path")
            storage.setdefault(kind, []).append(entry)
    for kind in ("disks", "filesystems"):
        storage.setdefault(kind, []).extend(theirs.get("storage", {}).get(kind, []))
    for kind in [k for k in storage if not storage[k]]:
        del storage[kind]
    units = ours.setdefault("systemd", {}).setdefault("units", [])
    by_name = {u["name"]: u for u in units}
    for i, unit in enumerate(theirs.get("systemd", {}).get("units", [])):
        mine = by_name.get(unit["name"])
        if mine is None:
            units.append(unit)
            continue
        if "contents" in unit or unit.get("mask"):
            raise _refuse(ref, f"systemd.units[{i}]", f"would replace or mask {unit['name']}, "
                          "nodesmith's own unit: add drop-ins to it instead")  # fmt: skip
        mine.setdefault("dropins", []).extend(unit.get("dropins", []))
    passwd = theirs.get("passwd", {})
    if passwd:
        mine_passwd = ours.setdefault("passwd", {})
        names = {u["name"] for u in mine_passwd.get("users", [])}
        for i, user in enumerate(passwd.get("users", [])):
            if user["name"] in names:
                raise _refuse(ref, f"passwd.users[{i}].name", f"is {user['name']!r}, also in "
                              "spec.users: one definition a user")  # fmt: skip
        for kind in ("users", "groups"):
            mine_passwd.setdefault(kind, []).extend(passwd.get(kind, []))
        for kind in [k for k in mine_passwd if not mine_passwd[k]]:
            del mine_passwd[kind]
