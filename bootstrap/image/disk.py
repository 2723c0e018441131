"""Stage 3: a bootable GPT disk from a root directory, for SeaBIOS and OVMF alike.

Layout: 1 MiB BIOS boot partition (GRUB i386-pc core image), 63 MiB EFI system partition
(GRUB x86_64-efi at the removable path ``EFI/BOOT/BOOTX64.EFI``, so no NVRAM entry is
needed), then the ext4 root, last, so cloud-init's growpart can grow it on first boot.

No loop device, mount or kernel filesystem driver is needed (build hosts and containers
often lack vfat or udev): ``mkfs.ext4 -d -E offset=`` writes the populated root straight
into its partition, ``mkfs.vfat --offset`` + mtools write the ESP, and the BIOS stage is
embedded the way grub-bios-setup does it (boot.img in the MBR pointing at core.img in the
BIOS boot partition). GRUB finds the root by filesystem UUID and boots ``/vmlinuz`` and
``/initrd.img``, the symlinks Debian's kernel packages keep current.
"""

from __future__ import annotations

import json
import shutil
import struct
import uuid
from dataclasses import dataclass
from pathlib import Path

from bootstrap.progress import Progress

ROOT_LABEL = "nodesmith-root"
ESP_LABEL = "ESP"
KERNEL_ARGS = "ro console=tty0 console=ttyS0,115200n8 net.ifnames=0"
GRUB_LIB = Path("/usr/lib/grub")
COMMON_MODULES = [
    "part_gpt",
    "part_msdos",
    "ext2",
    "fat",
    "search",
    "search_fs_uuid",
    "search_label",
    "normal",
    "configfile",
    "linux",
    "echo",
    "test",
    "gzio",
    "serial",
    "terminal",
    "boot",
    "minicmd",
]
BIOS_MODULES = ["biosdisk", *COMMON_MODULES]
EFI_MODULES = [*COMMON_MODULES, "all_video", "efi_gop"]
SECTOR = 512
# Offsets inside GRUB's i386-pc boot.img / diskboot.img (grub-bios-setup's own constants).
BOOT_KERNEL_SECTOR = 0x5C
DISKBOOT_BLOCKLIST_START = 0x1F4


@dataclass(frozen=True)
class DiskInfo:
    root_uuid: str
    esp_uuid: str
    size_mib: int


@dataclass(frozen=True)
class Part:
    start: int  # sectors
    size: int  # sectors


def grub_cfg(root_uuid: str) -> str:
    return f"""# Written by nodesmith (bootstrap/image/disk.py).
set default=0
set timeout=1
serial --unit=0 --speed=115200
terminal_input console serial
terminal_output console serial
insmod part_gpt
insmod ext2
search --no-floppy --fs-uuid --set=root {root_uuid}
menuentry 'Debian GNU/Linux (nodesmith)' {{
    linux /vmlinuz root=UUID={root_uuid} {KERNEL_ARGS}
    initrd /initrd.img
}}
"""


def early_cfg(root_uuid: str) -> str:
    return (
        f"search --no-floppy --fs-uuid --set=root {root_uuid}\n"
        "set prefix=($root)/boot/grub\nconfigfile $prefix/grub.cfg\n"
    )


def fstab(root_uuid: str, esp_uuid: str) -> str:
    return (
        f"# Written by nodesmith.\nUUID={root_uuid} / ext4 errors=remount-ro 0 1\n"
        f"UUID={esp_uuid} /boot/efi vfat umask=0077,nofail 0 2\n"
    )


def partitions(image: Path, progress: Progress) -> list[Part]:
    out = progress.run(["sfdisk", "--json", str(image)], capture=True, what="sfdisk")
    table = json.loads(out)["partitiontable"]["partitions"]
    return [Part(int(p["start"]), int(p["size"])) for p in table]


def embed_bios_grub(image: Path, core: bytes, bios: Part) -> None:
    """What grub-bios-setup does: boot.img into the MBR, core.img into the BIOS partition."""
    boot = bytearray((GRUB_LIB / "i386-pc/boot.img").read_bytes())
    img = bytearray(core)
    sectors = (len(img) + SECTOR - 1) // SECTOR
    if sectors > bios.size:
        raise ValueError(f"GRUB core.img needs {sectors} sectors, BIOS partition has {bios.size}")
    struct.pack_into("<Q", boot, BOOT_KERNEL_SECTOR, bios.start)
    struct.pack_into("<Q", img, DISKBOOT_BLOCKLIST_START, bios.start + 1)
    struct.pack_into("<H", img, DISKBOOT_BLOCKLIST_START + 8, sectors - 1)
    img += b"\0" * (sectors * SECTOR - len(img))
    with image.open("r+b") as f:
        mbr = bytearray(f.read(SECTOR))
        mbr[:440] = boot[:440]  # keep the disk signature and the protective MBR entry
        f.seek(0)
        f.write(mbr)
        f.seek(bios.start * SECTOR)
        f.write(img)


def make_disk(root: Path, image: Path, size_mib: int, progress: Progress) -> DiskInfo:
    """Write a bootable raw disk ``image`` holding ``root`` (which gets fstab and GRUB)."""
    serial = uuid.uuid4().hex[:8].upper()
    info = DiskInfo(str(uuid.uuid4()), f"{serial[:4]}-{serial[4:]}", size_mib)
    work = image.parent

    (root / "boot/efi").mkdir(parents=True, exist_ok=True)
    (root / "etc/fstab").write_text(fstab(info.root_uuid, info.esp_uuid), encoding="utf-8")
    grub_dir = root / "boot/grub"
    grub_dir.mkdir(parents=True, exist_ok=True)
    for platform in ("i386-pc", "x86_64-efi"):
        shutil.rmtree(grub_dir / platform, ignore_errors=True)
        shutil.copytree(GRUB_LIB / platform, grub_dir / platform)
    (grub_dir / "grub.cfg").write_text(grub_cfg(info.root_uuid), encoding="utf-8")
    (grub_dir / "grub.cfg").chmod(0o644)

    early = work / "grub-early.cfg"
    early.write_text(early_cfg(info.root_uuid), encoding="utf-8")
    core, efi = work / "core.img", work / "BOOTX64.EFI"
    progress.run(
        [
            "grub-mkimage",
            "-O",
            "i386-pc",
            "-o",
            core,
            "-p",
            "/boot/grub",
            "-c",
            early,
            *BIOS_MODULES,
        ],
        what="grub-mkimage (BIOS)",
    )
    progress.run(
        [
            "grub-mkimage",
            "-O",
            "x86_64-efi",
            "-o",
            efi,
            "-p",
            "/boot/grub",
            "-c",
            early,
            *EFI_MODULES,
        ],
        what="grub-mkimage (UEFI)",
    )

    image.unlink(missing_ok=True)
    with image.open("wb") as f:
        f.truncate(size_mib * 1024 * 1024)
    progress.run(
        [
            "sgdisk",
            "--zap-all",
            "-n",
            "1:2048:+1M",
            "-t",
            "1:EF02",
            "-c",
            "1:bios",
            "-n",
            "2:0:+63M",
            "-t",
            "2:EF00",
            "-c",
            "2:esp",
            "-n",
            "3:0:0",
            "-t",
            "3:8300",
            "-c",
            "3:root",
            image,
        ],
        what="sgdisk",
    )
    bios, esp, rootp = partitions(image, progress)

    esp_img = work / "esp.img"
    with esp_img.open("wb") as f:
        f.truncate(esp.size * SECTOR)
    progress.run(
        ["mkfs.vfat", "-F", "32", "-n", ESP_LABEL, "-i", serial, esp_img], what="mkfs.vfat"
    )
    progress.run(["mmd", "-i", esp_img, "::/EFI", "::/EFI/BOOT"], what="mmd")
    progress.run(["mcopy", "-i", esp_img, efi, "::/EFI/BOOT/BOOTX64.EFI"], what="mcopy")
    with image.open("r+b") as f:
        f.seek(esp.start * SECTOR)
        f.write(esp_img.read_bytes())
    esp_img.unlink()

    # metadata_csum_seed/orphan_file are unknown to bookworm's GRUB 2.06: keep them off.
    progress.run(
        [
            "mkfs.ext4",
            "-q",
            "-F",
            "-b",
            "4096",
            "-L",
            ROOT_LABEL,
            "-U",
            info.root_uuid,
            "-O",
            "^metadata_csum_seed,^orphan_file",
            "-E",
            f"offset={rootp.start * SECTOR},root_owner=0:0",
            "-d",
            root,
            image,
            str(rootp.size * SECTOR // 4096),
        ],
        what="mkfs.ext4",
    )
    embed_bios_grub(image, core.read_bytes(), bios)
    return info
