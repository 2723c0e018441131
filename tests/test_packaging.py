"""The wheel carries the templates, roles, image definitions and field lists it needs.

Built for real with the project's build backend, unpacked away from the checkout, and used
from there: a render from the unpacked wheel must find its templates without the repository.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_wheel_ships_data_and_renders_outside_the_checkout(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(REPO),
        ],
        check=True,
        timeout=300,
    )
    (wheel,) = (tmp_path / "dist").glob("nodesmith-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in (
        "bootstrap/_data/cloudinit/cloud-config.yaml.j2",
        "bootstrap/_data/cloudinit/kubeadm.yaml.j2",
        "bootstrap/_data/cloudinit/nodesmith-bootstrap.py",
        "bootstrap/_data/images/debian-12.yaml",
        "bootstrap/_data/roles/containerd.py",
        "bootstrap/render/schemas/kubeadm.k8s.io_v1beta4.json",
    ):
        assert required in names, f"{required} missing from {wheel.name}"
    assert not any(n.startswith("cloudinit/") for n in names), "cloudinit must not be a package"

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import bootstrap, bootstrap.cli.main;"
        "assert bootstrap.__file__.startswith(sys.argv[1]), bootstrap.__file__;"
        "from bootstrap.resources import data_dir; print(data_dir('cloudinit'));"
        "sys.exit(bootstrap.cli.main.main("
        "['render', '-f', sys.argv[2], '--all', '--out-dir', 'out']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(site), str(REPO / "examples")],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(site)), done.stdout
    rendered = sorted(p.name for p in (elsewhere / "out").iterdir())
    assert rendered == ["default_demo-cp-0.cloud-config", "default_demo-md-0.cloud-config"]
    assert (elsewhere / "out" / rendered[1]).read_text().startswith("#cloud-config\n")
