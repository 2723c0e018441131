"""bootstrap.image.containerd: which containerd an image gets, and a config it really reads.

The configs are read by the real containerds of Debian 12 (1.6), 13 (1.7) and unstable (2.1),
their .debs fetched once with apt into the user cache (tests/image_build.containerd_dir) and
unpacked here: ``containerd --config FILE config dump`` shows what each one made of the file.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from image_build import containerd_dir

from bootstrap.errors import TerminalError, UsageError
from bootstrap.image import containerd as c

SANDBOX = "k8s.gcr.io/pause:3.2"


@pytest.mark.parametrize(
    ("debian", "upstream", "config_version"),
    [
        ("1.6.20~ds1-1+deb12u3", "1.6.20", 2),
        ("1.7.24~ds1-6+deb13u1", "1.7.24", 2),
        ("2.1.9+ds1-5", "2.1.9", 3),
        ("1:2.0.0-1", "2.0.0", 3),
    ],
)
def test_versions(debian: str, upstream: str, config_version: int) -> None:
    assert c.upstream(debian) == upstream
    assert c.config_version_for(debian) == config_version


@pytest.mark.parametrize(
    ("raw", "flags", "error", "named"),
    [
        ({"source": "docker"}, {}, TerminalError, "containerd.source"),
        ({}, {"source": "tarball"}, UsageError, "--containerd-source"),
        ({"version": "latest"}, {}, TerminalError, "containerd.version"),
        ({}, {"version": "v2"}, UsageError, "--containerd-version"),
        ({"config_version": 1}, {}, TerminalError, "containerd.config_version"),
        ({}, {"config_version": "4"}, UsageError, "--containerd-config-version"),
        ({"versoin": "1.7"}, {}, TerminalError, "containerd.versoin"),
        ("1.7", {}, TerminalError, "containerd"),
    ],
)
def test_a_bad_choice_names_the_field_or_flag(
    raw: object, flags: dict[str, str], error: type[Exception], named: str
) -> None:
    with pytest.raises(error) as exc:
        c.parse(raw, "images/x.yaml", flags)
    assert named in str(exc.value)


@pytest.mark.parametrize(
    ("raw", "flags", "choice"),
    [
        (None, {}, c.Choice()),
        ({"version": "1.7"}, {}, c.Choice(version="1.7")),
        ({"version": "1.7", "config_version": 2}, {}, c.Choice(version="1.7", config_version=2)),
        ({"version": "1.7"}, {"version": "1.7.24"}, c.Choice(version="1.7.24")),
        # a source given as a flag brings its own version: the definition's is not asked of it
        ({"version": "1.6"}, {"source": "dir:/srv/c"}, c.Choice("dir", Path("/srv/c"))),
        ({"version": "1.6"}, {"source": "package"}, c.Choice(version="1.6")),  # the same source
        ({"version": "1.6"}, {"source": "dir:/srv/c", "version": "2.1"},
         c.Choice("dir", Path("/srv/c"), "2.1")),
    ],
)  # fmt: skip
def test_the_choice_from_definition_and_flags(
    raw: object, flags: dict[str, str], choice: c.Choice
) -> None:
    assert c.parse(raw, "images/x.yaml", flags) == choice


@pytest.mark.parametrize(
    ("choice", "found", "result"),
    [
        (c.Choice(), "1.6.20~ds1-1+deb12u3", 2),
        (c.Choice(version="1.6"), "1.6.20~ds1-1+deb12u3", 2),
        (c.Choice(version="1.6.20"), "1.6.20~ds1-1+deb12u3", 2),
        (c.Choice(version="2"), "2.1.9+ds1-5", 3),
        (c.Choice(config_version=2), "2.1.9+ds1-5", 2),  # 2.x reads (migrates) a version 2
        (c.Choice(version="2.1"), "1.6.20~ds1-1+deb12u3",
         "containerd.version wants 2.1, but suite bookworm has containerd 1.6.20~ds1-1+deb12u3"),
        (c.Choice(version="1.6.2"), "1.6.20~ds1-1+deb12u3", "containerd.version wants 1.6.2"),
        (c.Choice(config_version=3), "1.7.24~ds1-6+deb13u1",
         "containerd.config_version 3 cannot be read by containerd 1.7.24~ds1-6+deb13u1"),
        (c.Choice(), None, "suite bookworm has no containerd package"),
    ],
)  # fmt: skip
def test_the_choice_checked_against_what_the_source_has(
    choice: c.Choice, found: str | None, result: int | str
) -> None:
    if isinstance(result, int):
        assert c.check(choice, found, "suite bookworm") == result
        return
    with pytest.raises(TerminalError) as exc:
        c.check(choice, found, "suite bookworm")
    assert result in str(exc.value)


def test_a_dir_source_is_checked_before_use(tmp_path: Path) -> None:
    real = containerd_dir("sid")
    (deb,) = real.glob("containerd_*.deb")
    assert c.dir_package(real) == (deb, deb.name.split("_")[1])  # dpkg's own Version field
    cases = {
        "missing": "is not a directory",
        "empty": "exactly one containerd_*.deb (found 0)",
        "two": "exactly one containerd_*.deb (found 2)",
        "unsummed": "no entry",
        "tampered": "does not match",
        "not-a-deb": "is not a Debian package",
    }
    for name, message in cases.items():
        d = tmp_path / name
        if name != "missing":
            d.mkdir()
        if name in ("two", "unsummed", "tampered"):
            (d / deb.name).symlink_to(deb)
            (d / "SHA256SUMS").write_text(
                (real / "SHA256SUMS").read_text() if name != "unsummed" else ""
            )
        if name == "two":
            (d / "containerd_0.1_amd64.deb").write_bytes(b"")
        if name == "tampered":
            (d / deb.name).unlink()
            (d / deb.name).write_bytes(deb.read_bytes()[:-1] + b"\0")
        if name == "not-a-deb":
            (d / "containerd_1.0_amd64.deb").write_bytes(b"not an ar archive")
            sha = subprocess.run(
                ["sha256sum", "containerd_1.0_amd64.deb"], cwd=d, capture_output=True, text=True
            )
            (d / "SHA256SUMS").write_text(sha.stdout)
        with pytest.raises(TerminalError) as exc:
            c.dir_package(d)
        assert message in str(exc.value) and exc.value.field == "containerd.source", name


def _dump(suite: str, config: str, tmp_path: Path) -> str:
    """What the suite's real containerd makes of ``config`` (``config dump``)."""
    (deb,) = containerd_dir(suite).glob("containerd_*.deb")
    root = tmp_path / suite
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    (tmp_path / "config.toml").write_text(config)
    proc = subprocess.run(
        [str(root / "usr/bin/containerd"), "--config", str(tmp_path / "config.toml"), "config",
         "dump"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.replace("'", '"')


@pytest.mark.parametrize(
    ("suite", "sandbox_key", "cni"),
    [
        ("bookworm", "sandbox_image", 'bin_dir = "/usr/lib/cni"'),
        ("trixie", "sandbox_image", 'bin_dir = "/usr/lib/cni"'),
        ("sid", "sandbox", 'bin_dirs = ["/usr/lib/cni"]'),
    ],
)
def test_each_containerd_reads_the_config_written_for_it(
    suite: str, sandbox_key: str, cni: str, tmp_path: Path
) -> None:
    (deb,) = containerd_dir(suite).glob("containerd_*.deb")
    found = deb.name.split("_")[1]
    version = c.config_version_for(found)
    dump = _dump(suite, c.config_toml(version, SANDBOX, "/usr/bin/crun", found), tmp_path)
    assert f"version = {version}\n" in dump
    assert f'{sandbox_key} = "{SANDBOX}"' in dump
    assert "SystemdCgroup = true" in dump and 'BinaryName = "/usr/bin/crun"' in dump
    assert cni in dump and 'config_path = "/etc/containerd/certs.d"' in dump


@pytest.mark.parametrize("suite", ["bookworm", "trixie"])
def test_why_version_3_is_refused_for_containerd_1(suite: str, tmp_path: Path) -> None:
    """Given a version 3 file, containerd 1.6 runs on its own defaults (cgroupfs, its pause
    image, /opt/cni/bin) and 1.7 refuses to start: a node that never works, either way."""
    (deb,) = containerd_dir(suite).glob("containerd_*.deb")
    with pytest.raises(TerminalError, match="cannot be read by containerd 1"):
        c.check(c.Choice(config_version=3), deb.name.split("_")[1], f"suite {suite}")
    if suite == "bookworm":
        dump = _dump(suite, c.config_toml(3, SANDBOX), tmp_path)
        assert "SystemdCgroup = false" in dump and SANDBOX not in dump
        assert 'bin_dir = "/opt/cni/bin"' in dump
    else:
        with pytest.raises(AssertionError, match="unsupported config version `3`"):
            _dump(suite, c.config_toml(3, SANDBOX), tmp_path)


@pytest.mark.parametrize(
    ("version", "cni"),
    [
        ("2.1.9+ds1-5", 'bin_dirs = ["/usr/lib/cni"]'),
        ("2.0.5~ds1-1", 'bin_dir = "/usr/lib/cni"'),  # 2.0 knows no bin_dirs
        ("", 'bin_dir = "/usr/lib/cni"'),  # not known: the key both 2.0 and 2.1 read
    ],
)
def test_version_3_names_the_cni_directories_as_its_containerd_reads_them(
    version: str, cni: str
) -> None:
    config = c.config_toml(3, SANDBOX, "", version)
    assert config.count("bin_dir") == 1 and cni in config


def test_an_unquoted_version_in_yaml_is_refused() -> None:
    with pytest.raises(TerminalError, match="must be a quoted string"):
        c.parse({"version": 1.10}, "images/x.yaml", {})  # YAML reads 1.10 as 1.1
