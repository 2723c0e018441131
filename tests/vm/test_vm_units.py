"""The parts of vm/verify that need no VM: userdata access, seed ISO, accel choice, CRI wire."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from concurrent import futures
from pathlib import Path
from typing import Any

import pytest
import yaml

from bootstrap import seed, sshkeys
from bootstrap.errors import TerminalError, UsageError
from bootstrap.vm import accel, cri, verify
from bootstrap.vm import qemu as vm

REPO = Path(__file__).resolve().parents[2]
NODESMITH = str(Path(sys.executable).parent / "nodesmith")


def test_add_access_appends_user_and_host_key() -> None:
    host = sshkeys.generate("root@n")
    rendered = (
        b"#cloud-config\nwrite_files:\n- path: /etc/x\n  content: hi\n"
        b"users:\n- name: ops\n  sudo: ALL=(ALL) NOPASSWD:ALL\n"
    )
    out = vm.add_access(rendered, "nodesmith", "ssh-ed25519 AAAA me", host)
    assert out.startswith(b"#cloud-config\n")
    doc = yaml.safe_load(out)
    assert doc["write_files"] == [{"path": "/etc/x", "content": "hi"}]
    assert [u["name"] if isinstance(u, dict) else u for u in doc["users"]] == ["ops", "nodesmith"]
    assert doc["users"][1]["ssh_authorized_keys"] == ["ssh-ed25519 AAAA me"]
    assert doc["ssh_keys"]["ed25519_public"] == host.public_openssh
    assert "BEGIN OPENSSH PRIVATE KEY" in doc["ssh_keys"]["ed25519_private"]


def test_add_access_gives_every_host_key_type() -> None:
    extra = {k: sshkeys.generate("h", k) for k in ("rsa", "ecdsa")}
    doc = yaml.safe_load(vm.add_access(b"#cloud-config\n", "u", "k", sshkeys.generate("h"), extra))
    assert sorted(doc["ssh_keys"]) == sorted(
        f"{k}_{p}" for k in ("rsa", "ecdsa", "ed25519") for p in ("private", "public")
    )
    assert doc["ssh_keys"]["rsa_public"].startswith("ssh-rsa ")
    assert doc["ssh_keys"]["ecdsa_public"].startswith("ecdsa-sha2-nistp256 ")


def test_add_access_keeps_default_user_when_none_listed() -> None:
    out = vm.add_access(b"#cloud-config\nruncmd: [true]\n", "nodesmith", "k", sshkeys.generate("h"))
    assert yaml.safe_load(out)["users"][0] == "default"


@pytest.mark.parametrize("bad", [b"#!/bin/sh\necho hi\n", b"#cloud-config\n- a list\n"])
def test_add_access_refuses_what_it_cannot_log_in_to(bad: bytes) -> None:
    with pytest.raises(TerminalError):
        vm.add_access(bad, "nodesmith", "k", sshkeys.generate("h"))


def test_meta_data_has_unique_instance_id_and_hostname() -> None:
    doc = yaml.safe_load(vm.meta_data("worker-0", "worker-0-abc"))
    assert doc == {"instance-id": "worker-0-abc", "local-hostname": "worker-0"}


def test_seed_iso_round_trip_and_label(tmp_path: Path) -> None:
    path = seed.build_seed_iso(tmp_path / "seed.iso", b"#cloud-config\n", b"instance-id: i\n")
    assert seed.read_seed_iso(path) == {
        "user-data": b"#cloud-config\n",
        "meta-data": b"instance-id: i\n",
    }
    assert path.stat().st_mode & 0o777 == 0o600
    assert not list(tmp_path.glob(".*tmp"))
    if shutil.which("blkid"):
        label = subprocess.run(
            ["blkid", "-o", "value", "-s", "LABEL", str(path)],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        assert label == "CIDATA"


def test_accel_refuses_pvm_kvm(tmp_path: Path) -> None:
    dev = tmp_path / "kvm"
    dev.write_text("")
    mods = tmp_path / "modules"
    mods.write_text("kvm_pvm 1 0 - Live 0x0\nkvm 2 1 kvm_pvm, Live 0x0\n")
    ok, why = accel.kvm_usable(dev, mods, tmp_path / "nosys")
    assert not ok and "kvm_pvm" in why
    mods.write_text("kvm_intel 1 0 - Live 0x0\nkvm 2 1 kvm_intel, Live 0x0\n")
    assert accel.kvm_usable(dev, mods, tmp_path / "nosys")[0]
    assert not accel.kvm_usable(tmp_path / "absent", mods, tmp_path / "nosys")[0]


def test_accel_choice() -> None:
    assert accel.choose("tcg").name == "tcg"
    assert accel.choose("kvm").qemu_args()[:2] == ["-accel", "kvm"]
    assert accel.choose("auto").name in ("kvm", "tcg")
    with pytest.raises(UsageError):
        accel.choose("xen")


def test_qemu_command_only_forwards_ssh_on_loopback(tmp_path: Path) -> None:
    cmd = vm.qemu_command(
        name="n",
        overlay=tmp_path / "o",
        seed=tmp_path / "s",
        port=2222,
        accel=accel.Accel("tcg", "test"),
        memory=2048,
        cpus=2,
        firmware="bios",
        state=tmp_path,
    )
    netdev = cmd[cmd.index("-netdev") + 1]
    assert netdev == "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:2222-:22"
    assert "-kernel" not in cmd and "pflash" not in " ".join(cmd)


def test_fingerprint_matches_ssh_keygen(tmp_path: Path) -> None:
    pair = sshkeys.generate("c")
    pub = tmp_path / "k.pub"
    pub.write_text(pair.public_openssh + "\n")
    if not shutil.which("ssh-keygen"):
        pytest.skip("ssh-keygen is not installed")
    out = subprocess.run(
        ["ssh-keygen", "-lf", str(pub)], capture_output=True, text=True, check=True
    ).stdout
    assert out.split()[1] == pair.sha256_fingerprint


def test_cri_version_messages_round_trip() -> None:
    assert cri.encode_version_request("v1") == b"\x0a\x02v1"
    body = b"\x0a\x050.1.0\x12\x0acontainerd\x1a\x061.6.20\x22\x02v1"
    assert cri.decode_version_response(body) == cri.CRIVersion(
        "0.1.0", "containerd", "1.6.20", "v1"
    )
    with pytest.raises(ValueError):
        cri.decode_version_response(b"\x0a\x09short")


def test_cri_call_version_over_unix_socket(tmp_path: Path) -> None:
    """A real gRPC server on a unix socket answers the hand-encoded Version call."""
    grpc = pytest.importorskip("grpc")
    seen: list[bytes] = []

    def version(request: bytes, context: Any) -> bytes:
        seen.append(request)
        return b"\x0a\x050.1.0\x12\x0acontainerd\x1a\x061.6.20\x22\x02v1"

    handler = grpc.method_handlers_generic_handler(
        "runtime.v1.RuntimeService", {"Version": grpc.unary_unary_rpc_method_handler(version)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    sock = tmp_path / "cri.sock"
    server.add_insecure_port(f"unix:{sock}")
    server.start()
    try:
        got = cri.call_version(f"unix:{sock}", timeout=10)
    finally:
        server.stop(0)
    assert got.container_runtime_version == "containerd://1.6.20"
    assert seen == [cri.encode_version_request()]


def test_testinfra_spec_from_ssh_url() -> None:
    assert verify.testinfra_spec("ssh://u@127.0.0.1:2222", "/k") == (
        "paramiko://u@127.0.0.1:2222?ssh_identity_file=%2Fk"
    )
    with pytest.raises(UsageError):
        verify.testinfra_spec("http://x", None)


def test_suite_dir_is_the_node_suite() -> None:
    assert verify.suite_dir() == REPO / "tests" / "node"


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        # The worker renders first: the examples' Cluster is not initialized, so it waits.
        (["vm", "up", "/nonexistent.qcow2", "-f", "examples/", "--machine", "default/demo-md-0"],
         75),
        (["vm", "down", "no-such-vm"], 2),
        (["verify"], 2),
        # A wrong VM name is refused before anything renders.
        (["vm", "up", "x.qcow2", "--name", "Bad_Name", "-f", "examples/", "--machine",
          "demo-md-0"], 2),
    ],
)  # fmt: skip
def test_cli_usage_errors_are_clean(argv: list[str], code: int, tmp_path: Path) -> None:
    env = {"NODESMITH_STATE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [NODESMITH, *argv], capture_output=True, text=True, cwd=REPO, env=env, check=False
    )
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip()
    assert not list(tmp_path.iterdir()), "a failed vm up must not leave state behind"


def test_qemu_command_uefi_uses_a_private_vars_copy(tmp_path: Path) -> None:
    if not any(p.exists() for p in vm.OVMF_CODE):
        pytest.skip("Debian's ovmf package is not installed")
    cmd = " ".join(
        vm.qemu_command(
            name="n",
            overlay=tmp_path / "o",
            seed=tmp_path / "s",
            port=2222,
            accel=accel.Accel("tcg", "t"),
            memory=1024,
            cpus=1,
            firmware="uefi",
            state=tmp_path,
        )
    )
    assert "if=pflash,format=raw,unit=0,readonly=on" in cmd
    assert f"file={tmp_path / 'OVMF_VARS.fd'}" in cmd and (tmp_path / "OVMF_VARS.fd").is_file()


@pytest.mark.parametrize(
    "argv",
    [
        ["vm", "up", "{image}", "-f", "examples/", "--machine", "default/demo-md-0"],
        ["vm", "cluster", "{image}", "-f", "examples/"],
    ],
    ids=["up", "cluster"],
)
def test_an_image_whose_cloud_init_ignores_nocloud_is_refused_before_booting(
    argv: list[str], tmp_path: Path
) -> None:
    """nodesmith's VMs carry a NoCloud seed: an image built for Ec2 alone would boot without
    its userdata and be waited on until the SSH timeout, so its manifest stops it at once."""
    image = tmp_path / "image" / "image.qcow2"
    image.parent.mkdir()
    image.write_bytes(b"")
    (image.parent / "manifest.json").write_text(
        json.dumps({"runtime": {"name": "containerd"}, "cloudInit": {"datasources": ["Ec2"]}})
    )
    state = tmp_path / "state"
    env = {"NODESMITH_STATE_DIR": str(state), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [NODESMITH, *(a.format(image=image) for a in argv)],
        capture_output=True, text=True, cwd=REPO, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 65, proc.stderr
    assert "cloudInit.datasources" in proc.stderr and "reads Ec2 only" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not state.exists() or not list(state.iterdir())
