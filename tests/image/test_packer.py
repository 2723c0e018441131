"""images/ is one Packer configuration: ``packer validate .``, ``-only=<build>``, ``fmt`` and the
shared variables, with the packer on this machine (1.6.6)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from bootstrap.image import packer as packer_module
from bootstrap.image.containerd import Choice, Resolved
from bootstrap.image.definition import KubernetesSource, Options, load_definition
from bootstrap.image.packer import PACKER, needs_guest_network, role_args
from bootstrap.resources import data_dir

IMAGES = data_dir("images")
BUILDS = ["amazon-ebs.node", "azure-arm.node", "googlecompute.node", "qemu.node"]
ENV = {"CHECKPOINT_DISABLE": "1", "PATH": "/usr/bin:/bin"}


def packer(*args: str, cwd: Path = IMAGES, stdin: str | None = None) -> tuple[int, str]:
    """Packer run as its users run it: inside the configuration directory, on ``.``."""
    if not Path(PACKER).exists() and not shutil.which("packer"):
        pytest.skip("packer is not installed")
    proc = subprocess.run([PACKER, *args], cwd=cwd, input=stdin, capture_output=True,
                          text=True, timeout=120, check=False, env=ENV)  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr


def test_images_is_one_configuration() -> None:
    """One file per builder plus the variables they share; nothing declared twice."""
    assert sorted(p.name for p in IMAGES.glob("*.pkr.hcl")) == [
        "amazon-ebs.pkr.hcl",
        "azure-arm.pkr.hcl",
        "googlecompute.pkr.hcl",
        "qemu.pkr.hcl",
        "variables.pkr.hcl",
    ]


def test_packer_validate_dot() -> None:
    """``packer validate .`` in images/, bare: every build of the configuration is valid."""
    rc, out = packer("validate", ".")
    assert rc == 0, out


@pytest.mark.parametrize("build", BUILDS)
def test_packer_validate_only(build: str) -> None:
    rc, out = packer("validate", f"-only={build}", ".")
    assert rc == 0, out


def test_packer_fmt_clean() -> None:
    rc, out = packer("fmt", "-check", ".")
    assert rc == 0, out


@pytest.mark.parametrize(
    ("expression", "variables", "value"),
    [
        # qemu boots an offline base disk; the clouds reach pkgs.k8s.io
        ("local.qemu_role_args", [], "--kubernetes-source none"),
        ("local.cloud_role_args", [], "--kubernetes-source pkgs --kubernetes-version v1.31.4"),
        ("local.qemu_role_args", ["-var", "role_args=--kubernetes-source dir:/k"],
         "--kubernetes-source dir:/k"),
        ("local.cloud_role_args", ["-var", "role_args=--oci-runtime crun"], "--oci-runtime crun"),
    ],
)  # fmt: skip
def test_role_args_shared_with_a_default_per_build(
    expression: str, variables: list[str], value: str
) -> None:
    rc, out = packer("console", *variables, ".", stdin=expression + "\n")
    assert rc == 0, out
    assert out.strip().splitlines()[-1] == value


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        # the layout this replaced: each template declaring the shared variables again
        (lambda t: t + '\nvariable "role_args" {\n  type = string\n}\n', "Duplicate variable"),
        (lambda t: t.replace("disk_size               = 10",
                             "disk_size               = 10\n  no_such_option = 1"),
         "no_such_option"),
    ],
)  # fmt: skip
def test_packer_validate_catches_errors(
    edit: Callable[[str], str], message: str, tmp_path: Path
) -> None:
    """The validate test can fail: the same directory with one file broken is rejected."""
    for f in IMAGES.glob("*.pkr.hcl"):
        shutil.copy(f, tmp_path / f.name)
    gce = tmp_path / "googlecompute.pkr.hcl"
    gce.write_text(edit(gce.read_text()))
    rc, out = packer("validate", ".", cwd=tmp_path)
    assert rc != 0
    assert message in out


def options(source: str, path: str | None = None, mirror: str | None = None) -> Options:
    return Options(
        kubernetes_version="v1.31.4",
        kubernetes_source=KubernetesSource(source, Path(path) if path else None),
        runtime="containerd",
        oci_runtime="crun",
        formats=("qcow2",),
        builder="packer-qemu",
        output=Path("o"),
        mirror=mirror,
        sandbox_image="registry.k8s.io/pause:3.10",
        cache_dir=Path("c"),
        work_parent=Path("w"),
    )


def test_role_args_carry_the_build_options() -> None:
    """What the shell-local provisioner hands apply-roles, as the shell will split it."""
    common = ["--kubernetes-version", "v1.31.4", "--oci-runtime", "crun",
              "--sandbox-image", "registry.k8s.io/pause:3.10",
              "--datasources", "NoCloud,ConfigDrive,OpenStack,Ec2,GCE,Azure"]  # fmt: skip
    suite = ["--containerd-source", "package", "--containerd-config-version", "2"]
    offline = role_args(options("dir", "/srv/k8s bins"), Resolved("1.6.20~ds1-1+deb12u3", 2))
    assert shlex.split(offline) == [*suite, "--kubernetes-source", "dir:/srv/k8s bins", *common,
                                    "--no-apt-update"]  # fmt: skip
    # pkgs.k8s.io, dl.k8s.io and a mirror are reached from inside the VM: network on.
    pkgs = role_args(options("pkgs"), Resolved("1.6.20~ds1-1+deb12u3", 2))
    assert shlex.split(pkgs) == [*suite, "--kubernetes-source", "pkgs", *common]
    # a dir: containerd goes to the VM as that source; the build resolved its config version
    two = replace(options("pkgs"), containerd=Choice("dir", Path("/srv/c d")))
    deb = Path("/srv/c d/containerd_2.1.9+ds1-5_amd64.deb")
    assert shlex.split(role_args(two, Resolved("2.1.9+ds1-5", 3, deb)))[:4] == [
        "--containerd-source", "dir:/srv/c d", "--containerd-config-version", "3"]  # fmt: skip
    for online in (options("pkgs"), options("http"), options("none", mirror="http://m/")):
        assert needs_guest_network(online)
    assert not needs_guest_network(options("none"))
    assert not needs_guest_network(options("dir", "/k"))


@pytest.mark.parametrize("datasources", [("Ec2",), ("NoCloud",), ("GCE", "Azure")])
def test_the_base_disk_boots_on_packers_nocloud_seed_whatever_the_image_is_for(
    monkeypatch: pytest.MonkeyPatch, datasources: tuple[str, ...]
) -> None:
    """Packer's VM gets its builder user from a NoCloud seed: a base disk pinned to the
    image's own datasources (Ec2, say) would never read it. The chroot build is replaced by
    a recorder here (a fault-free stand-in: only the options it is handed are checked)."""
    seen: list[Options] = []
    monkeypatch.setattr(
        packer_module, "chroot_build", lambda defn, opts, roles: seen.append(opts) or Path("b")
    )
    opts = replace(options("pkgs"), datasources=datasources)
    packer_module.base_disk(load_definition(IMAGES / "debian-12.yaml"), opts, Path("o"))
    assert [(o.datasources, o.formats, o.kubernetes_source.kind) for o in seen] == [
        (("NoCloud",), ("qcow2",), "none")
    ]
    assert role_args(opts, Resolved("1.6.20", 2)).split()[-2:] == [
        "--datasources", ",".join(datasources)]  # fmt: skip
