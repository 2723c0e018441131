"""The cloud-config section builders, directly: each takes the parsed KubeadmConfig spec and
produces exactly one cloud-init key's value."""

from __future__ import annotations

import base64
import gzip
import zlib
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


def _gzip_file(content: bytes) -> Any:
    from bootstrap.render.objects import File

    encoded = base64.b64encode(content).decode()
    return File.model_validate({"path": "/x", "encoding": "gzip+base64", "content": encoded})


def _zeros(mib: int) -> bytes:
    """gzip of ``mib`` MiB of zeros, made a MiB at a time (no big buffer in the test)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunks = [packer.compress(bytes(2**20)) for _ in range(mib)]
    return b"".join([*chunks, packer.flush()])


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (gzip.compress(b"hello\n"), None),
        (gzip.compress(b"a") + gzip.compress(b"b"), None),  # two members, as gzip -c a b
        (_zeros(64), None),  # exactly the limit
        (_zeros(80), "gzip+base64 content expands to more than 64 MiB"),
        (gzip.compress(b"hello\n")[:-3], "content is not valid gzip+base64"),  # truncated
        (gzip.compress(b"hello\n") + b"junk", "content is not valid gzip+base64"),
        (b"not gzip at all", "content is not valid gzip+base64"),
    ],
)
def test_inline_gzip_is_checked_as_a_stream(content: bytes, error: str | None) -> None:
    f = _gzip_file(content)
    if error is None:
        assert cloudconfig.write_file_entry(f, 0, _no_secrets, CONFIG)["encoding"] == "gz+b64"
        return
    with pytest.raises(TerminalError) as caught:
        cloudconfig.write_file_entry(f, 0, _no_secrets, CONFIG)
    assert caught.value.field == "spec.files[0].content"
    assert str(caught.value).endswith(error)


def test_a_gzip_bomb_is_refused_without_inflating_it() -> None:
    import tracemalloc

    bomb = _zeros(768)
    assert len(base64.b64encode(bomb)) < 2**20
    tracemalloc.start()
    try:
        with pytest.raises(TerminalError, match="expands to more than 64 MiB"):
            cloudconfig.write_file_entry(_gzip_file(bomb), 0, _no_secrets, CONFIG)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak  # the chunked check, not 768 MiB (or even 64) of output
