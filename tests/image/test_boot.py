"""The built qcow2 boots from its own disk (no -kernel) under SeaBIOS and under OVMF.

Each boot uses a throw-away overlay bigger than the image, a NoCloud seed, TCG (the only
accelerator that boots stock kernels on the CI machine), user networking restricted to the
guest with SSH forwarded to 127.0.0.1 only. It must print a login prompt on the serial
console, answer with an SSH banner, and show that the root partition grew on first boot.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from bootstrap.hostutil import free_port

pytestmark = [pytest.mark.image, pytest.mark.vm]

OVMF_CODE = Path("/usr/share/OVMF/OVMF_CODE_4M.fd")
OVMF_VARS = Path("/usr/share/OVMF/OVMF_VARS_4M.fd")
BOOT_TIMEOUT = 600  # TCG on 2 shared cores: ~100 s idle, 300 s seen under load


def ssh_banner(port: int) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.settimeout(10)
            return s.recv(64).decode(errors="replace")
    except OSError:
        return ""


def boot(image: Path, work: Path, firmware: str) -> tuple[str, str]:
    if not shutil.which("qemu-system-x86_64"):
        pytest.skip("qemu-system-x86_64 is not installed")
    work.mkdir(parents=True, exist_ok=True)
    overlay = work / "disk.qcow2"
    subprocess.run(
        [
            "qemu-img",
            "create",
            "-q",
            "-f",
            "qcow2",
            "-F",
            "qcow2",
            "-b",
            str(image),
            str(overlay),
            "8G",
        ],
        check=True,
    )
    (work / "user-data").write_text("#cloud-config\nhostname: boot-test\n")
    (work / "meta-data").write_text(f"instance-id: boot-{firmware}\nlocal-hostname: boot-test\n")
    subprocess.run(
        ["cloud-localds", str(work / "seed.iso"), str(work / "user-data"), str(work / "meta-data")],
        check=True,
    )
    port = free_port()
    serial = work / "serial.log"
    argv = [
        "qemu-system-x86_64",
        "-accel",
        "tcg,thread=multi",
        "-smp",
        "2",
        "-m",
        "2048",
        "-display",
        "none",
        "-serial",
        f"file:{serial}",
        "-no-reboot",
        "-drive",
        f"file={overlay},format=qcow2,if=virtio",
        "-drive",
        f"file={work / 'seed.iso'},format=raw,if=virtio,readonly=on",
        "-netdev",
        f"user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{port}-:22",
        "-device",
        "virtio-net-pci,netdev=n0",
    ]
    if firmware == "ovmf":
        vars_copy = work / "OVMF_VARS.fd"
        shutil.copyfile(OVMF_VARS, vars_copy)
        argv += [
            "-machine",
            "q35",
            "-drive",
            f"if=pflash,format=raw,readonly=on,file={OVMF_CODE}",
            "-drive",
            f"if=pflash,format=raw,file={vars_copy}",
        ]
    assert "-kernel" not in argv
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    banner = ""
    try:
        deadline = time.monotonic() + BOOT_TIMEOUT
        while time.monotonic() < deadline:
            text = serial.read_text(errors="replace") if serial.exists() else ""
            if "login:" in text:
                for _ in range(12):
                    banner = ssh_banner(port)
                    if banner:
                        break
                    time.sleep(5)
                break
            if proc.poll() is not None:
                break
            time.sleep(3)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    return serial.read_text(errors="replace") if serial.exists() else "", banner


@pytest.mark.parametrize("firmware", ["seabios", "ovmf"])
def test_boots_from_disk(built_image: Path, tmp_path: Path, firmware: str) -> None:
    if firmware == "ovmf" and not OVMF_CODE.exists():
        pytest.skip("ovmf is not installed")
    console, banner = boot(built_image / "image.qcow2", tmp_path / firmware, firmware)
    tail = console[-3000:]
    assert "Booting `Debian GNU/Linux (nodesmith)'" in console, tail
    assert "boot-test login:" in console, tail
    assert banner.startswith("SSH-2.0-OpenSSH"), f"no SSH banner ({banner!r})\n{tail}"
    assert "resized filesystem" in console, "root did not grow on first boot\n" + tail
