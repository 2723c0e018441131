"""Every Packer template in images/ validates with the packer on this machine (1.6.6)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from bootstrap.image.definition import KubernetesSource, Options
from bootstrap.image.packer import PACKER, needs_guest_network, role_args
from bootstrap.resources import data_dir

TEMPLATES = sorted(p.name for p in data_dir("images").glob("*.pkr.hcl"))


def test_all_four_templates_exist() -> None:
    assert TEMPLATES == [
        "amazon-ebs.pkr.hcl",
        "azure-arm.pkr.hcl",
        "googlecompute.pkr.hcl",
        "qemu.pkr.hcl",
    ]


@pytest.mark.parametrize("template", TEMPLATES)
def test_packer_validate(template: str, tmp_path: Path) -> None:
    if not Path(PACKER).exists() and not shutil.which("packer"):
        pytest.skip("packer is not installed")
    key = tmp_path / "key"  # packer validate parses the key, so make a real (unused) one
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    extra = ["-var", f"ssh_private_key_file={key}"] if template == "qemu.pkr.hcl" else []
    proc = subprocess.run(
        [PACKER, "validate", *extra, str(data_dir("images") / template)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"CHECKPOINT_DISABLE": "1", "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_packer_validate_catches_errors(tmp_path: Path) -> None:
    """The validate test can fail: a template with an unknown builder option is rejected."""
    bad = tmp_path / "bad.pkr.hcl"
    text = (data_dir("images") / "googlecompute.pkr.hcl").read_text()
    bad.write_text(
        text.replace(
            "disk_size               = 10", "disk_size               = 10\n  no_such_option = 1"
        )
    )
    proc = subprocess.run(
        [PACKER, "validate", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"CHECKPOINT_DISABLE": "1"},
    )
    assert proc.returncode != 0


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
              "--sandbox-image", "registry.k8s.io/pause:3.10"]  # fmt: skip
    offline = role_args(options("dir", "/srv/k8s bins"))
    assert shlex.split(offline) == ["--kubernetes-source", "dir:/srv/k8s bins", *common,
                                    "--no-apt-update"]  # fmt: skip
    # pkgs.k8s.io, dl.k8s.io and a mirror are reached from inside the VM: network on.
    assert shlex.split(role_args(options("pkgs"))) == ["--kubernetes-source", "pkgs", *common]
    for online in (options("pkgs"), options("http"), options("none", mirror="http://m/")):
        assert needs_guest_network(online)
    assert not needs_guest_network(options("none"))
    assert not needs_guest_network(options("dir", "/k"))
