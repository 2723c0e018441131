"""Stage 4: the artifacts (compressed qcow2, raw, Vagrant libvirt box) and their hashes.

Everything is written into the build's temporary directory; ``build`` renames that directory
to ``--output`` only after every artifact and the manifest exist.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

from bootstrap.checksums import sha256_file
from bootstrap.manifest import Artifact
from bootstrap.progress import Progress

VAGRANT_INSECURE_KEY = (
    "ssh-rsa AAAAB3NzaC1yc2EAAAABIwAAAQEA6NF8iallvQVp22WDkTkyrtvp9eWW6A8YVr+kz4TjGYe7gHzIw+niNl"
    "tGEFHzD8+v1I2YJ6oXevct1YeS0o9HZyN1Q9qgCgzUFtdOKLv6IedplqoPkcmF0aYet2PkEDo3MlTBckFXPITAMzF"
    "8dJSIFo9D8HfdOV0IAdx4O7PtixWKn5y2hMNG0zQPyUecp4pzC6kivAIhyfHilFR61RGL+GPXQ2MWZWFYbAGjyiYJ"
    "nAmCP3NOTd0jMZEnDkbUvxhMmBYSdETk1rRgm+R4LOzFUGaHqHDLKLX+FIPKcF96hrucXzcWyLbIbEgE98OHlnVYC"
    "zRdK8jlqm8tehUc9c9WhQ== vagrant insecure public key"
)

BOX_VAGRANTFILE = """# Written by nodesmith (`nodesmith image build --format box`): box defaults.
Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |libvirt|
    libvirt.driver = "kvm"
    libvirt.disk_bus = "virtio"
    libvirt.memory = 2048
    libvirt.cpus = 2
  end
  config.vm.synced_folder ".", "/vagrant", disabled: true
end
"""


def qcow2(raw: Path, out: Path, progress: Progress) -> None:
    """Compressed qcow2.

    zstd rather than qcow2's default zlib: several times faster to write (this step took
    more time than building the root file system) and to read; every qemu since 5.1 (2020)
    reads it. ``-W`` lets qemu-img compress clusters in parallel.
    """
    progress.run(
        [
            "qemu-img",
            "convert",
            "-c",
            "-W",
            "-p",
            "-O",
            "qcow2",
            "-o",
            "cluster_size=65536,compression_type=zstd",
            str(raw),
            str(out),
        ],
        what="qemu-img convert",
    )


def box(qcow: Path, out: Path, virtual_size_gib: int) -> None:
    """A Vagrant libvirt box: metadata.json, Vagrantfile and box.img (the qcow2) in a tar."""
    metadata = json.dumps(
        {"provider": "libvirt", "format": "qcow2", "virtual_size": virtual_size_gib}, indent=2
    ).encode()
    with tarfile.open(out, "w") as tar:
        for name, data in (("metadata.json", metadata), ("Vagrantfile", BOX_VAGRANTFILE.encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
        tar.add(str(qcow), arcname="box.img")


def describe(path: Path, base: Path) -> Artifact:
    return Artifact(
        path=str(path.relative_to(base)), sha256=sha256_file(path), size=os.stat(path).st_size
    )
