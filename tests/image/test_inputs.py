"""Fast checks of the build's inputs: apt sources filtering, definitions, the dir: source."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from image_build import kube_dir

from bootstrap.aptsources import sources_for
from bootstrap.checksums import read_sums
from bootstrap.cli.image import options_from, register
from bootstrap.errors import TerminalError, UsageError
from bootstrap.image import definition as d
from bootstrap.image.kubernetes import verify_dir
from bootstrap.image.rootfs import mmdebstrap_argv

DEBIAN = """Types: deb
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""
THIRD_PARTY = """Types: deb
URIs: https://deb.nodesource.example/node_20.x
Suites: nodistro
Components: main
"""


def apt_dir(tmp_path: Path) -> Path:
    (tmp_path / "sources.list.d").mkdir(parents=True)
    (tmp_path / "sources.list.d/debian.sources").write_text(DEBIAN)
    (tmp_path / "sources.list.d/nodesource.sources").write_text(THIRD_PARTY)
    (tmp_path / "sources.list").write_text(
        "deb [arch=amd64 signed-by=/k.gpg] https://cloud.example/apt cloud-sdk main\n"
    )
    return tmp_path


def test_only_the_suites_entries_are_kept(tmp_path: Path) -> None:
    text = sources_for("bookworm", ("main",), None, apt_dir(tmp_path))
    assert "Suites: bookworm bookworm-updates" in text
    assert "Suites: bookworm-security" in text
    assert "nodesource" not in text and "cloud.example" not in text
    assert "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" in text


@pytest.mark.parametrize(
    ("os_release", "os", "suites"),
    [
        ('ID=debian\nVERSION_CODENAME=bookworm\n', "debian",
         ["Suites: trixie trixie-updates", "Suites: trixie-security"]),
        ('ID=debian\nVERSION_CODENAME=bookworm\n', "ubuntu", None),  # noble is no Debian suite
        ('ID="ubuntu"\nVERSION_CODENAME=noble\n', "debian", None),  # not a Debian host
    ],
)  # fmt: skip
def test_another_debian_release_uses_the_hosts_mirrors(
    tmp_path: Path, os_release: str, os: str, suites: list[str] | None
) -> None:
    etc = tmp_path / "etc"
    apt = apt_dir(etc / "apt")
    (etc / "os-release").write_text(os_release)
    if suites is None:
        with pytest.raises(TerminalError, match="no entry for suite 'trixie'"):
            sources_for("trixie", ("main",), None, apt, os=os)
        return
    text = sources_for("trixie", ("main",), None, apt, os=os)
    assert [line for line in text.splitlines() if line.startswith("Suites:")] == suites
    assert "URIs: http://mirror.example/debian\n" in text and "bookworm" not in text
    assert "nodesource" not in text and "cloud.example" not in text


def test_mirror_overrides_host_sources(tmp_path: Path) -> None:
    text = sources_for("bookworm", ("main",), "http://local/debian", apt_dir(tmp_path))
    assert "URIs: http://local/debian" in text and "mirror.example" not in text


def test_no_matching_suite_is_terminal(tmp_path: Path) -> None:
    with pytest.raises(TerminalError, match="noble"):
        sources_for("noble", ("main",), None, apt_dir(tmp_path))


def test_warm_build_skips_apt_update(tmp_path: Path) -> None:
    defn = d.load_definition(Path(__file__).parents[2] / "images/debian-12.yaml")
    cold = mmdebstrap_argv(defn, ["a"], tmp_path / "r", tmp_path / "s", tmp_path / "c", False)
    warm = mmdebstrap_argv(defn, ["a"], tmp_path / "r", tmp_path / "s", tmp_path / "c", True)
    assert "--skip=update" not in cold and "--skip=update" in warm
    assert any("sync-out /var/cache/apt/archives" in a for a in cold)


def test_definitions_load() -> None:
    for name in ("debian-12.yaml", "debian-13.yaml", "ubuntu-24.04.yaml"):
        defn = d.load_definition(Path(__file__).parents[2] / "images" / name)
        assert "containerd" in defn.packages and defn.disk_size_mib == 4096


def test_bad_definition_names_the_field(tmp_path: Path) -> None:
    p = tmp_path / "x.yaml"
    p.write_text("name: x\nos: debian\nsuite: bookworm\npackages: [ok]\ndisk_size: 4T\n")
    with pytest.raises(TerminalError) as exc:
        d.load_definition(p)
    assert exc.value.field == "disk_size" and "4T" in str(exc.value)
    p.write_text("name: x\nos: debian\nsuite: bookworm\n")
    with pytest.raises(TerminalError, match="packages"):
        d.load_definition(p)


def test_formats_and_sources_parse(tmp_path: Path) -> None:
    assert d.parse_formats("qcow2,raw,qcow2") == ("qcow2", "raw")
    with pytest.raises(UsageError):
        d.parse_formats("vmdk")
    with pytest.raises(UsageError):
        d.parse_kubernetes_source(f"dir:{tmp_path / 'missing'}")
    assert d.parse_kubernetes_source("none").kind == "none"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("NoCloud", ("NoCloud",)),
        ("Ec2, GCE,Ec2", ("Ec2", "GCE")),  # order kept, repeats dropped
        (["OpenStack", "ConfigDrive"], ("OpenStack", "ConfigDrive")),  # the definition's list
    ],
)
def test_datasources_parse(value: str | list[str], expected: tuple[str, ...]) -> None:
    assert d.parse_datasources(value) == expected


@pytest.mark.parametrize(
    ("yaml_value", "message"),
    [
        ("[NoCloud, Ec3]", "defaults.datasources accepts NoCloud, "),
        ("[nocloud]", "defaults.datasources means NoCloud (got 'nocloud')"),
        ("[NoCloud, None]", "defaults.datasources needs no None"),
        ("", "defaults.datasources must be a list of cloud-init datasource names (got None)"),
        ("{NoCloud: 1}", "defaults.datasources must be a list"),
        ("[]", "defaults.datasources needs at least one datasource (got [])"),
    ],
)
def test_a_definitions_bad_datasources_name_the_field(
    tmp_path: Path, yaml_value: str, message: str
) -> None:
    """The definition's ``defaults.datasources`` is checked as the flag is, and the message
    names the file and the field (no flag given: the definition's value is the one used)."""
    p = tmp_path / "x.yaml"
    p.write_text(
        "name: x\nos: debian\nsuite: bookworm\npackages: [ok]\n"
        f"defaults:\n  datasources: {yaml_value}\n"
    )
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["image", "build", str(p)])
    with pytest.raises(UsageError) as exc:
        options_from(args, d.load_definition(p))
    assert f"{p}: {message}" in str(exc.value)
    assert options_from(
        parser.parse_args(["image", "build", str(p), "--datasources", "Ec2"]),
        d.load_definition(p),
    ).datasources == ("Ec2",)  # the flag wins over the definition


def test_verify_dir_real_kubectl(tmp_path: Path) -> None:
    good = kube_dir(tmp_path / "good")
    assert set(verify_dir(good)) == {"kubectl"}
    bad = kube_dir(tmp_path / "bad", wrong_hash=True)
    with pytest.raises(TerminalError) as exc:
        verify_dir(bad)
    assert exc.value.reason == "ChecksumMismatch"
    assert str(bad / "kubectl") in str(exc.value)


def test_sha256sums_syntax_error(tmp_path: Path) -> None:
    (tmp_path / "SHA256SUMS").write_text("abc kubectl\n")
    with pytest.raises(TerminalError, match="line 1"):
        read_sums(tmp_path / "SHA256SUMS")


def test_verify_dir_takes_crictl_beside_the_binaries(tmp_path: Path) -> None:
    """kubeadm's preflight looks for crictl, which no Debian 12 package ships: a ``dir:``
    source may carry it, checked by sha256 like the rest (and a crictl alone is no source)."""
    import hashlib

    good = kube_dir(tmp_path / "k")
    crictl = good / "crictl"
    crictl.write_bytes(b"#!/bin/sh\necho crictl version v1.20.0\n")
    digest = hashlib.sha256(crictl.read_bytes()).hexdigest()
    with (good / "SHA256SUMS").open("a") as sums:
        sums.write(f"{digest}  crictl\n")
    assert set(verify_dir(good)) == {"kubectl", "crictl"}

    only = tmp_path / "only"
    only.mkdir()
    (only / "crictl").write_bytes(crictl.read_bytes())
    (only / "SHA256SUMS").write_text(f"{digest}  crictl\n")
    with pytest.raises(TerminalError) as caught:
        verify_dir(only)
    assert caught.value.reason == "NoKubernetesBinaries"

    crictl.write_bytes(b"tampered")
    with pytest.raises(TerminalError) as caught:
        verify_dir(good)
    assert caught.value.reason == "ChecksumMismatch" and "crictl" in str(caught.value)
