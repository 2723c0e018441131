"""Read a few files back out of a finished disk's ext4 root, without mounting it.

The Packer builder's disk comes back from a VM, so the manifest (packages, kernel, OS) must
be read from that disk, not from the base disk it started as. e2fsprogs' ``debugfs`` reads
the ext4 partition in place through its ``image?offset=N`` syntax: no loop device, no root
privileges beyond reading the file, the same tool family that wrote it (``mkfs.ext4 -d``).
"""

from __future__ import annotations

from pathlib import Path

from bootstrap.errors import TerminalError
from bootstrap.image import disk
from bootstrap.progress import Progress

# What inspect_root needs: dpkg's database, os-release and the /vmlinuz symlink.
INSPECTED = (
    "/var/lib/dpkg/status",
    "/etc/os-release",
    "/usr/lib/os-release",
    "/vmlinuz",
    "/etc/kubernetes-version",
    "/var/lib/nodesmith/preloaded-images.json",
)


def extract(
    image: Path, dest: Path, progress: Progress, paths: tuple[str, ...] = INSPECTED
) -> Path:
    """Copy ``paths`` (those that exist) from the root partition of raw ``image`` into ``dest``.

    The root is the last partition (disk.make_disk's layout). Returns ``dest``, a partial
    root directory that ``inspect_root`` reads like a full one.
    """
    root = disk.partitions(image, progress)[-1]
    device = f"{image}?offset={root.start * disk.SECTOR}"
    commands = []
    for path in paths:
        parent = dest / path.lstrip("/").rpartition("/")[0]
        parent.mkdir(parents=True, exist_ok=True)
        commands.append(f'rdump "{path}" "{parent}"')
    progress.run(
        ["debugfs", "-f", "-", device], input_text="\n".join(commands) + "\n", what="debugfs"
    )
    if not (dest / "var/lib/dpkg/status").is_file():
        raise TerminalError(
            f"{image}: no /var/lib/dpkg/status in the root partition",
            obj=str(image),
            reason="InspectFailed",
        )
    return dest
