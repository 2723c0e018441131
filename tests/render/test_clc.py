"""``clc``: a Container Linux Config snippet as Ignition v3, field by field, and what is
refused by name. (Merged, validated by the real ``ignition-validate`` and written by the real
Ignition: ``test_ignition.py``.)"""

from __future__ import annotations

from typing import Any

import pytest

from bootstrap.errors import ObjectRef, TerminalError
from bootstrap.render import clc

REF = ObjectRef("KubeadmConfig", "prod", "md-0")
SUM = "a" * 128

# CLC YAML -> the Ignition v3 sections it becomes
ROWS: dict[str, tuple[str, dict[str, Any]]] = {
    "an inline file, its mode and owner": (
        "storage: {files: [{path: /etc/a, mode: 0600, user: {name: core},"
        " contents: {inline: 'hi'}}]}",
        {"storage": {"files": [{"path": "/etc/a", "user": {"name": "core"}, "mode": 0o600,
                                "overwrite": True, "contents": {"source": "data:,hi"}}]}}),
    "a remote file, compressed and verified": (
        "storage: {files: [{path: /opt/x, contents: {remote: {url: 'https://e.example/x.gz',"
        f" compression: gzip, verification: {{hash: {{function: sha512, sum: {SUM}}}}}}}}}}}]}}",
        {"storage": {"files": [{"path": "/opt/x", "overwrite": True, "contents": {
            "source": "https://e.example/x.gz", "compression": "gzip",
            "verification": {"hash": f"sha512-{SUM}"}}}]}}),
    "an appended file": (
        "storage: {files: [{path: /etc/hosts, append: true, contents: {inline: 'x'}}]}",
        {"storage": {"files": [{"path": "/etc/hosts", "append": [{"source": "data:,x"}]}]}}),
    "a link and a directory": (
        "storage: {links: [{path: /opt/bin/k, target: /usr/bin/k, hard: false}],"
        " directories: [{path: /d, mode: 0755}]}",
        {"storage": {"directories": [{"path": "/d", "mode": 0o755}],
                     "links": [{"path": "/opt/bin/k", "target": "/usr/bin/k", "hard": False}]}}),
    "a disk partitioned in units": (
        "storage: {disks: [{device: /dev/vdb, wipe_table: true, partitions: [{label: data,"
        " number: 1, size: 2GiB, start: 1024KiB}]}]}",
        {"storage": {"disks": [{"device": "/dev/vdb", "wipeTable": True, "partitions": [
            {"label": "data", "number": 1, "sizeMiB": 2048, "startMiB": 1}]}]}}),
    "a filesystem to make": (
        "storage: {filesystems: [{name: data, mount: {device: /dev/vdb1, format: xfs,"
        " wipe_filesystem: true, label: DATA, options: [-f]}}]}",
        {"storage": {"filesystems": [{"device": "/dev/vdb1", "format": "xfs",
                                      "wipeFilesystem": True, "label": "DATA",
                                      "options": ["-f"]}]}}),
    "units: ct's old enable, a mask, drop-ins": (
        "systemd: {units: [{name: a.service, enable: true}, {name: b.service, mask: true},"
        " {name: c.service, dropins: [{name: 10.conf, contents: 'x'}]}]}",
        {"systemd": {"units": [{"name": "a.service", "enabled": True},
                               {"name": "b.service", "mask": True},
                               {"name": "c.service",
                                "dropins": [{"name": "10.conf", "contents": "x"}]}]}}),
    "a networkd unit becomes its file": (
        "networkd: {units: [{name: 10-a.network, contents: 'x',"
        " dropins: [{name: mtu.conf, contents: 'y'}]}]}",
        {"storage": {"files": [
            {"path": "/etc/systemd/network/10-a.network", "mode": 0o644, "overwrite": True,
             "contents": {"source": "data:,x"}},
            {"path": "/etc/systemd/network/10-a.network.d/mtu.conf", "mode": 0o644,
             "overwrite": True, "contents": {"source": "data:,y"}}]}}),
    "users and groups": (
        "passwd: {users: [{name: ops, password_hash: '$6$x', home_dir: /home/ops,"
        " groups: [sudo], no_create_home: false}], groups: [{name: g, gid: 1500}]}",
        {"passwd": {"users": [{"name": "ops", "passwordHash": "$6$x", "homeDir": "/home/ops",
                               "noCreateHome": False, "groups": ["sudo"]}],
                    "groups": [{"name": "g", "gid": 1500}]}}),
    "ct's partition type names become their GUIDs": (
        "storage: {disks: [{device: /dev/vdb, partitions: [{number: 1,"
        " type_guid: linux_filesystem_data}]}]}",
        {"storage": {"disks": [{"device": "/dev/vdb", "partitions": [
            {"number": 1, "typeGuid": "0fc63daf-8483-4772-8e79-3d69d8477de4"}]}]}}),
    "two appends to one file become one entry (Ignition v3 takes one a path)": (
        "storage: {files: [{path: /etc/hosts, append: true, contents: {inline: a}},"
        " {path: /etc/hosts, append: true, contents: {inline: b}}]}",
        {"storage": {"files": [{"path": "/etc/hosts", "append": [
            {"source": "data:,a"}, {"source": "data:,b"}]}]}}),
    "nothing at all": ("", {}),
}  # fmt: skip


@pytest.mark.parametrize("name", list(ROWS))
def test_translate(name: str) -> None:
    text, want = ROWS[name]
    got = clc.translate(clc.parse(text, REF), REF)
    assert {k: v for k, v in got.items() if v} == want


FIELD = clc.FIELD
REFUSED = [
    ("storage: {files: [{path: /a, contnets: {inline: x}}]}", f"{FIELD}.storage.files[0].contnets",
     "InvalidField"),
    ("storage: {files: [{path: relative}]}", f"{FIELD}.storage.files[0].path", "InvalidField"),
    ("storage: {disks: [{device: /dev/vdb, partitions: [{size: '100'}]}]}",
     f"{FIELD}.storage.disks[0].partitions[0].size", "InvalidField"),
    ("locksmith: {reboot_strategy: 'off'}", f"{FIELD}.locksmith", "FormatNotSupported"),
    ("ignition: {config: {append: []}}", f"{FIELD}.ignition", "FormatNotSupported"),
    ("storage: {filesystems: [{name: x}]}", f"{FIELD}.storage.filesystems[0]",
     "FormatNotSupported"),
    ("[1, 2]", FIELD, "InvalidField"),
    ("storage: 5", f"{FIELD}.storage", "InvalidField"),
    ("storage: {files: [{path: /a, mode: '0644'}]}", f"{FIELD}.storage.files[0].mode",
     "InvalidField"),  # a string is not a mode: ct refuses it too, never 644 decimal
    ("systemd: {units: [{name: a.service, enabled: 'yes please'}]}",
     f"{FIELD}.systemd.units[0].enabled", "InvalidField"),
    ("storage: {files: [{path: /a}], links: [{path: /a, target: /b}]}",
     f"{FIELD}.storage.links[0].path", "FormatNotSupported"),
    ("systemd: {units: [{name: a.service}, {name: a.service}]}", f"{FIELD}.systemd.units[1].name",
     "FormatNotSupported"),
    ("key: [unclosed", FIELD, "InvalidField"),
    ("a: &a [1,1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
     "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
     "e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n", FIELD, "InvalidField"),  # aliases: 10^5 values
]  # fmt: skip


@pytest.mark.parametrize(("text", "field", "reason"), REFUSED)
def test_refused_naming_the_field(text: str, field: str, reason: str) -> None:
    with pytest.raises(TerminalError) as caught:
        clc.translate(clc.parse(text, REF), REF)
    assert (caught.value.field, caught.value.reason) == (field, reason)
    assert "Traceback" not in str(caught.value) and len(str(caught.value)) < 600


def test_merge_adds_drop_ins_to_our_unit_and_refuses_a_second_owner() -> None:
    ours: dict[str, Any] = {
        "storage": {"files": [{"path": "/etc/kubeadm.yml"}]},
        "systemd": {"units": [{"name": "kubeadm.service", "enabled": True, "contents": "x"}]},
        "passwd": {"users": [{"name": "ops"}]},
    }
    theirs = clc.translate(clc.parse(
        "systemd: {units: [{name: kubeadm.service, enabled: true, dropins: [{name: a.conf,"
        " contents: y}]}, {name: other.service, enabled: true}]}", REF), REF)  # fmt: skip
    clc.merge(ours, theirs, REF)
    assert ours["systemd"]["units"] == [
        {"name": "kubeadm.service", "enabled": True, "contents": "x",
         "dropins": [{"name": "a.conf", "contents": "y"}]},
        {"name": "other.service", "enabled": True},
    ]  # fmt: skip
    for text, field in (
        ("passwd: {users: [{name: ops}]}", "passwd.users[0].name"),
        ("storage: {links: [{path: /etc/kubeadm.yml, target: /x}]}", "storage.links[0].path"),
        ("systemd: {units: [{name: kubeadm.service, mask: true}]}", "systemd.units[0]"),
    ):
        with pytest.raises(TerminalError) as caught:
            clc.merge(ours, clc.translate(clc.parse(text, REF), REF), REF)
        assert caught.value.field == f"{FIELD}.{field}"
