"""The cloud-config section builders, directly: each takes the parsed KubeadmConfig spec and
produces exactly one cloud-init key's value."""

from __future__ import annotations

from typing import Any

import pytest

from bootstrap.errors import ObjectRef, TerminalError
from bootstrap.render import cloudconfig
from bootstrap.render.objects import KubeadmConfigSpec, User

CONFIG = ObjectRef("KubeadmConfig", "default", "c")


def _no_secrets(name: str) -> None:
    return None


def _spec(**fields: Any) -> KubeadmConfigSpec:
    return KubeadmConfigSpec.model_validate(fields)


@pytest.mark.parametrize(
    ("ntp", "section"),
    [
        (None, {}),
        ({}, {}),
        ({"enabled": True}, {"ntp": {"enabled": True}}),
        ({"servers": ["a", "b"]}, {"ntp": {"servers": ["a", "b"]}}),
        ({"enabled": False, "servers": ["a"]}, {"ntp": {"enabled": False, "servers": ["a"]}}),
    ],
)
def test_ntp_section(ntp: dict[str, Any] | None, section: dict[str, Any]) -> None:
    spec = _spec(ntp=ntp) if ntp is not None else _spec()
    assert cloudconfig.ntp_section(spec) == section


@pytest.mark.parametrize(
    ("user", "entry"),
    [
        ({"name": "ops"}, {"name": "ops"}),
        ({"name": "ops", "sudo": "ALL=(ALL) NOPASSWD:ALL", "lockPassword": True},
         {"name": "ops", "lock_passwd": True, "sudo": "ALL=(ALL) NOPASSWD:ALL"}),
        ({"name": "ops", "inactive": True}, {"name": "ops", "inactive": "0"}),
        ({"name": "ops", "homeDir": "/srv/ops", "sshAuthorizedKeys": ["ssh-ed25519 AAA x"]},
         {"name": "ops", "homedir": "/srv/ops", "ssh_authorized_keys": ["ssh-ed25519 AAA x"]}),
    ],
)  # fmt: skip
def test_user_entry(user: dict[str, Any], entry: dict[str, Any]) -> None:
    assert cloudconfig.user_entry(User.model_validate(user), 0, _no_secrets, CONFIG) == entry


def test_user_with_passwd_and_passwd_from_is_terminal() -> None:
    user = User.model_validate(
        {"name": "ops", "passwd": "x", "passwdFrom": {"secret": {"name": "s", "key": "k"}}}
    )
    with pytest.raises(TerminalError) as caught:
        cloudconfig.user_entry(user, 2, _no_secrets, CONFIG)
    assert "spec.users[2]" in str(caught.value) and caught.value.reason == "InvalidField"


PKI_CA_KEY = "/etc/kubernetes/pki/ca.key"


@pytest.mark.parametrize(
    ("files", "reserved", "reason", "field"),
    [
        ([{"path": "/a", "content": "1"}, {"path": "/a", "content": "2"}], set(),
         "DuplicatePath", "spec.files[1].path"),
        ([{"path": "/run/kubeadm/kubeadm.yaml", "content": "x"}], {"/run/kubeadm/kubeadm.yaml"},
         "ReservedPath", "spec.files[0].path"),

        # Aliases of one file on the node: compared normalised.
        ([{"path": "/a/b", "content": "1"}, {"path": "//a/./b", "content": "2"}], set(),
         "DuplicatePath", "spec.files[1].path"),
        ([{"path": "/etc/kubernetes/pki//ca.key", "content": "x"}], {PKI_CA_KEY},
         "ReservedPath", "spec.files[0].path"),
        ([{"path": "/etc/kubernetes/./pki/ca.key", "content": "x"}], {PKI_CA_KEY},
         "ReservedPath", "spec.files[0].path"),
        ([{"path": "/etc/kubernetes/pki/../pki/ca.key", "content": "x"}], {PKI_CA_KEY},
         "ReservedPath", "spec.files[0].path"),
    ],
)  # fmt: skip
def test_user_files_refuse_clashing_paths(
    files: list[dict[str, Any]], reserved: set[str], reason: str, field: str
) -> None:
    with pytest.raises(TerminalError) as caught:
        cloudconfig.user_files(_spec(files=files), _no_secrets, CONFIG, reserved)
    assert caught.value.reason == reason and field in str(caught.value)


@pytest.mark.parametrize(
    ("path", "normal"),
    [("/a", "/a"), ("//a//b/", "/a/b"), ("/a/./b", "/a/b"), ("/a/x/../b", "/a/b"), ("/../a", "/a")],
)
def test_normal_path(path: str, normal: str) -> None:
    assert cloudconfig.normal_path(path) == normal


def test_user_files_keep_order_and_modes() -> None:
    spec = _spec(files=[{"path": "/b", "content": "1", "permissions": "600"},
                        {"path": "/a", "content": "2"}])  # fmt: skip
    entries = cloudconfig.user_files(spec, _no_secrets, CONFIG, set())
    assert [e["path"] for e in entries] == ["/b", "/a"]
    assert entries[0]["permissions"] == "0600"
