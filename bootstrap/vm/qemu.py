"""Boot a node image under qemu with rendered userdata, and stop it again.

``vm up`` never touches the image: it boots a copy-on-write qcow2 overlay, hands cloud-init a
NoCloud seed ISO, and forwards only the VM's SSH port, on 127.0.0.1, through user-mode
networking with ``restrict=on`` (the guest cannot reach anything else). The run injects its own
SSH client key and a freshly generated host key into the userdata, so it can log in and pin the
VM's identity without trusting the first key it sees. Everything a VM needs lives in one state
directory (``~/.local/state/nodesmith/vms/<name>/``), which ``vm down`` removes.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import paramiko
import yaml

from bootstrap import sshkeys
from bootstrap.errors import TerminalError, TransientError, UsageError, bad_usage
from bootstrap.fsutil import atomic_write
from bootstrap.hostutil import alive as _alive
from bootstrap.hostutil import free_port
from bootstrap.seed import build_seed_iso
from bootstrap.vm.accel import Accel

SSH_USER = "nodesmith"
DEFAULT_MEMORY_MB = 2048
DEFAULT_CPUS = 2
DEFAULT_SSH_TIMEOUT = 600.0
OVMF_CODE = (Path("/usr/share/OVMF/OVMF_CODE_4M.fd"), Path("/usr/share/OVMF/OVMF_CODE.fd"))
OVMF_VARS = (Path("/usr/share/OVMF/OVMF_VARS_4M.fd"), Path("/usr/share/OVMF/OVMF_VARS.fd"))

Progress = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def state_root() -> Path:
    """``$NODESMITH_STATE_DIR`` or ``$XDG_STATE_HOME/nodesmith/vms`` (``~/.local/state/...``)."""
    explicit = os.environ.get("NODESMITH_STATE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "nodesmith" / "vms"


def check_name(name: str) -> str:
    """A VM name is a DNS label (it becomes a directory and the hostname)."""
    ok = 0 < len(name) <= 63 and all(c.isalnum() or c == "-" for c in name)
    if not ok or name.startswith("-") or name.endswith("-") or name.lower() != name:
        raise bad_usage("VM name", name, "must be a lower-case DNS label")
    return name


# --- userdata -----------------------------------------------------------------------------


def add_access(
    userdata: bytes,
    user: str,
    client_public: str,
    host: sshkeys.KeyPair,
    extra_host_keys: dict[str, sshkeys.KeyPair] | None = None,
) -> bytes:
    """Return the cloud-config with this run's login user and pinned host key added.

    The rendered document is parsed, changed in two places and dumped again:

    * ``users`` gains ``user`` with ``client_public`` as its only key and password-less sudo.
      When the document had no ``users`` list, ``default`` is kept first so the image's default
      user still exists, as cloud-init would have done.
    * ``ssh_keys`` carries the ed25519 host key pair, so the VM's identity is known up front,
      plus ``extra_host_keys`` (``{"rsa": ..., "ecdsa": ...}``) so the VM has no key left to
      generate at boot.

    Everything else is left as rendered; a document that is not a ``#cloud-config`` mapping is
    refused, because the run could not log in to what it boots.
    """
    text = userdata.decode("utf-8")
    if not text.startswith("#cloud-config"):
        raise TerminalError(
            "userdata is not a #cloud-config document; vm up cannot add its SSH access to it",
            reason="UnsupportedUserdata",
        )
    doc = yaml.safe_load(text)
    if doc is None:  # an empty cloud-config is valid and means "nothing to do"
        doc = {}
    if not isinstance(doc, dict):
        raise TerminalError("userdata #cloud-config is not a mapping", reason="InvalidUserdata")
    users = doc.get("users")
    if users is None:
        users = ["default"]
    elif not isinstance(users, list):
        raise TerminalError(
            f"userdata users must be a list (got {type(users).__name__})",
            reason="InvalidUserdata",
            field="users",
        )
    users = [u for u in users if not (isinstance(u, dict) and u.get("name") == user)]
    users.append(
        {
            "name": user,
            "gecos": "nodesmith vm access (added by vm up)",
            "shell": "/bin/bash",
            "lock_passwd": True,
            "sudo": "ALL=(ALL) NOPASSWD:ALL",
            "ssh_authorized_keys": [client_public],
        }
    )
    doc["users"] = users
    keys = dict(doc.get("ssh_keys") or {})
    for kind, pair in {**(extra_host_keys or {}), "ed25519": host}.items():
        keys[f"{kind}_private"] = pair.private_openssh
        keys[f"{kind}_public"] = pair.public_openssh
    doc["ssh_keys"] = keys
    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=4096)
    return ("#cloud-config\n" + body).encode("utf-8")


def meta_data(name: str, instance_id: str) -> bytes:
    """NoCloud meta-data: a unique instance-id per boot, the Machine name as hostname."""
    return yaml.safe_dump({"instance-id": instance_id, "local-hostname": name}).encode()


# --- a private link between VMs -------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    """A second NIC on an Ethernet segment shared only by this run's VMs.

    qemu's socket netdev carries the frames over one TCP connection on 127.0.0.1: the first
    VM listens on ``port``, the others connect to it. The machine's own network stack never
    sees the VMs' addresses, only loopback, so VMs can talk to each other (kubeadm join, the
    API server reaching a kubelet) on an isolated segment without libvirt or a bridge.
    """

    port: int
    listen: bool
    mac: str

    def qemu_args(self) -> list[str]:
        mode = "listen" if self.listen else "connect"
        return [
            "-netdev",
            f"socket,id=n1,{mode}=127.0.0.1:{self.port}",
            "-device",
            f"virtio-net-pci,netdev=n1,mac={self.mac}",
        ]


# --- state ----------------------------------------------------------------------------------


@dataclass
class VMState:
    """What ``vm up`` records in ``vm.json`` for ``vm down`` and ``verify``."""

    name: str
    machine: str
    image: str
    dir: str
    pid: int
    port: int
    user: str
    accel: str
    accel_reason: str
    firmware: str
    instance_id: str
    host_key_fingerprint: str
    started_at: float
    ssh_ready_s: float | None = None

    @property
    def path(self) -> Path:
        return Path(self.dir)

    @property
    def key_file(self) -> Path:
        return self.path / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.path / "known_hosts"

    @property
    def serial_log(self) -> Path:
        return self.path / "serial.log"

    @property
    def userdata_file(self) -> Path:
        """The cloud-config as rendered, before vm up added its access (for the suite)."""
        return self.path / "rendered-userdata"

    @property
    def ssh_address(self) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}"

    @property
    def testinfra_host(self) -> str:
        return f"paramiko://{self.user}@127.0.0.1:{self.port}?ssh_identity_file={self.key_file}"

    def ssh_command(self) -> str:
        return (
            f"ssh -i {self.key_file} -o UserKnownHostsFile={self.known_hosts} "
            f"-o StrictHostKeyChecking=yes -p {self.port} {self.user}@127.0.0.1"
        )

    def save(self) -> None:
        tmp = self.path / ".vm.json.tmp"
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, self.path / "vm.json")

    @classmethod
    def load(cls, name: str, root: Path | None = None) -> VMState:
        path = (root or state_root()) / check_name(name) / "vm.json"
        try:
            raw: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UsageError(f"no VM named {name!r} (no {path})") from None
        return cls(**raw)


# --- qemu -------------------------------------------------------------------------------------


def _first(paths: tuple[Path, ...], what: str) -> Path:
    for p in paths:
        if p.exists():
            return p
    raise TerminalError(
        f"{what} not found (looked for {', '.join(map(str, paths))}); "
        "install Debian's ovmf package",
        reason="FirmwareMissing",
    )


def qemu_command(
    *,
    name: str,
    overlay: Path,
    seed: Path,
    port: int,
    accel: Accel,
    memory: int,
    cpus: int,
    firmware: str,
    state: Path,
    link: Link | None = None,
    forwards: tuple[str, ...] = (),
) -> list[str]:
    """The qemu command line: headless, serial console to a file, SSH-only loopback forward
    (and, with ``link``, a second NIC on the run's private segment; ``forwards``, more
    ``hostfwd=``/``guestfwd=`` rules, the only ways through ``restrict=on``)."""
    cmd = [
        "qemu-system-x86_64",
        "-name",
        f"nodesmith-{name}",
        "-machine",
        "q35",
        *accel.qemu_args(),
        "-smp",
        str(cpus),
        "-m",
        str(memory),
        "-display",
        "none",
        "-monitor",
        "none",
        "-vga",
        "none",
        "-serial",
        f"file:{state / 'serial.log'}",
        "-drive",
        # The overlay is thrown away with the VM, so the guest's flushes need not reach the
        # host disk: etcd's fsync per write otherwise costs ~30 ms here and, under TCG, times
        # out the API server's requests (cache=unsafe; the image itself is never written).
        f"file={overlay},format=qcow2,if=virtio,discard=unmap,cache=unsafe",
        "-drive",
        f"file={seed},format=raw,if=virtio,readonly=on",
        "-netdev",
        ",".join([f"user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{port}-:22", *forwards]),
        "-device",
        "virtio-net-pci,netdev=n0",
        *(link.qemu_args() if link else []),
        "-device",
        "virtio-rng-pci",
        "-rtc",
        "base=utc",
        "-pidfile",
        str(state / "qemu.pid"),
        "-daemonize",
    ]
    if firmware == "uefi":
        code = _first(OVMF_CODE, "OVMF firmware")
        vars_src = _first(OVMF_VARS, "OVMF variable store")
        vars_copy = state / "OVMF_VARS.fd"
        if not vars_copy.exists():
            shutil.copyfile(vars_src, vars_copy)
        cmd += [
            "-drive",
            f"if=pflash,format=raw,unit=0,readonly=on,file={code}",
            "-drive",
            f"if=pflash,format=raw,unit=1,file={vars_copy}",
        ]
    return cmd


def create_overlay(image: Path, overlay: Path) -> None:
    """A qcow2 overlay backed by ``image`` (which is only ever read)."""
    fmt = _image_format(image)
    res = subprocess.run(
        [
            "qemu-img",
            "create",
            "-q",
            "-f",
            "qcow2",
            "-b",
            str(image.resolve()),
            "-F",
            fmt,
            str(overlay),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        raise TerminalError(
            f"qemu-img create failed: {res.stderr.strip()}", obj=str(image), reason="OverlayFailed"
        )


def _image_format(image: Path) -> str:
    res = subprocess.run(
        ["qemu-img", "info", "--output=json", str(image)],
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        raise TerminalError(
            f"not a disk image qemu can read: {res.stderr.strip()}",
            obj=str(image),
            reason="ImageUnreadable",
        )
    fmt: str = json.loads(res.stdout)["format"]
    return fmt


# --- SSH --------------------------------------------------------------------------------------


def pinned_client(state: VMState, timeout: float = 10.0) -> paramiko.SSHClient:
    """A connected paramiko client that accepts only the host key vm up generated."""
    client = paramiko.SSHClient()
    client.load_host_keys(str(state.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        "127.0.0.1",
        port=state.port,
        username=state.user,
        key_filename=str(state.key_file),
        timeout=timeout,
        banner_timeout=timeout,
        auth_timeout=timeout,
        allow_agent=False,
        look_for_keys=False,
    )
    return client


def _banner(port: int, timeout: float) -> bool:
    """True once a real sshd answers (slirp accepts connections before the guest listens)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(8).startswith(b"SSH-")
    except OSError:
        return False


def wait_for_ssh(state: VMState, timeout: float, progress: Progress = _stderr) -> float:
    """Wait until the pinned key logs in; return seconds since qemu started."""
    deadline = time.monotonic() + timeout
    last_report = 0.0
    phase = "waiting for sshd"
    while time.monotonic() < deadline:
        if not _alive(state.pid):
            tail = _tail(state.serial_log)
            raise TerminalError(
                f"qemu exited before SSH came up; serial console tail:\n{tail}",
                obj=f"vm {state.name}",
                reason="VMDied",
            )
        if _banner(state.port, 3.0):
            phase = "sshd up, waiting for login (cloud-init creating the user)"
            try:
                pinned_client(state).close()
                return time.time() - state.started_at
            except paramiko.BadHostKeyException as exc:
                raise TerminalError(
                    f"VM presented an unexpected host key: {exc}",
                    obj=f"vm {state.name}",
                    reason="HostKeyMismatch",
                ) from None
            except (paramiko.SSHException, OSError, EOFError):
                pass
        now = time.monotonic()
        if now - last_report >= 10:
            last_report = now
            progress(
                f"vm {state.name}: {phase} on 127.0.0.1:{state.port} "
                f"({time.time() - state.started_at:.0f}s)"
            )
        time.sleep(1.0)
    raise TransientError(
        f"SSH did not come up within {timeout:.0f}s; serial console in {state.serial_log}",
        obj=f"vm {state.name}",
        reason="SSHTimeout",
    )


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no serial log)"


# --- up / down ----------------------------------------------------------------------------------


def up(
    image: Path,
    userdata: bytes,
    *,
    name: str,
    machine: str,
    accel: Accel,
    memory: int = DEFAULT_MEMORY_MB,
    cpus: int = DEFAULT_CPUS,
    firmware: str = "bios",
    root: Path | None = None,
    ssh_timeout: float = DEFAULT_SSH_TIMEOUT,
    progress: Progress = _stderr,
    link: Link | None = None,
    network_config: bytes | None = None,
    forwards: tuple[str, ...] = (),
) -> VMState:
    """Boot ``image`` with ``userdata`` and wait for SSH. Returns the recorded state.

    ``link`` adds a NIC on a segment shared with other VMs of the run; ``network_config``
    (NoCloud network-config v2) is what the infrastructure would give the node, such as
    that NIC's static address.
    """
    check_name(name)
    if not image.is_file():
        raise UsageError(f"image {str(image)!r} does not exist")
    if firmware not in ("bios", "uefi"):
        raise bad_usage("--firmware", firmware, "must be bios or uefi")
    if shutil.which("qemu-system-x86_64") is None:
        raise TerminalError(
            "qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)",
            reason="QemuMissing",
        )
    base = root or state_root()
    vm_dir = base / name
    if (vm_dir / "vm.json").exists():
        old = VMState.load(name, base)
        if _alive(old.pid):
            raise UsageError(
                f"VM {name!r} is already running (pid {old.pid}); "
                f"run 'nodesmith vm down {name}' first"
            )
    shutil.rmtree(vm_dir, ignore_errors=True)
    vm_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        return _boot(
            image,
            userdata,
            vm_dir,
            name=name,
            machine=machine,
            accel=accel,
            memory=memory,
            cpus=cpus,
            firmware=firmware,
            ssh_timeout=ssh_timeout,
            progress=progress,
            link=link,
            network_config=network_config,
            forwards=forwards,
        )
    except BaseException:
        _stop_dir(vm_dir, keep=("serial.log", "qemu.log", "qemu.cmd"))
        raise


def _boot(
    image: Path,
    userdata: bytes,
    vm_dir: Path,
    *,
    name: str,
    machine: str,
    accel: Accel,
    memory: int,
    cpus: int,
    firmware: str,
    ssh_timeout: float,
    progress: Progress,
    link: Link | None,
    network_config: bytes | None,
    forwards: tuple[str, ...] = (),
) -> VMState:
    client = sshkeys.generate(f"{SSH_USER}@nodesmith-vm-{name}")
    host = sshkeys.generate(f"root@{name}")
    extra = {
        k: sshkeys.generate(f"root@{name}", k) for k in sshkeys.HOST_KEY_TYPES if k != "ed25519"
    }
    client.write_private(vm_dir / "id_ed25519")
    (vm_dir / "id_ed25519.pub").write_text(client.public_openssh + "\n", encoding="ascii")
    atomic_write(vm_dir / "rendered-userdata", userdata, 0o600)  # holds the bootstrap token
    instance_id = f"{name}-{uuid.uuid4().hex[:12]}"
    seeded = add_access(userdata, SSH_USER, client.public_openssh, host, extra)
    hostname = machine.rpartition("/")[2] or name  # the Machine's name, whatever the VM's
    build_seed_iso(vm_dir / "seed.iso", seeded, meta_data(hostname, instance_id), network_config)
    create_overlay(image, vm_dir / "overlay.qcow2")
    last_error = ""
    for _attempt in range(3):
        port = free_port()
        (vm_dir / "known_hosts").write_text(
            f"[127.0.0.1]:{port} {' '.join(host.public_openssh.split()[:2])}\n", encoding="ascii"
        )
        cmd = qemu_command(
            name=name,
            overlay=vm_dir / "overlay.qcow2",
            seed=vm_dir / "seed.iso",
            port=port,
            accel=accel,
            memory=memory,
            cpus=cpus,
            firmware=firmware,
            state=vm_dir,
            link=link,
            forwards=forwards,
        )
        (vm_dir / "qemu.cmd").write_text(" ".join(cmd) + "\n", encoding="utf-8")
        started = time.time()
        with open(vm_dir / "qemu.log", "wb") as log:
            res = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False)
        if res.returncode == 0:
            break
        last_error = (vm_dir / "qemu.log").read_text(errors="replace").strip()
        if "hostfwd" not in last_error and "Could not set up host forwarding" not in last_error:
            raise TerminalError(
                f"qemu failed to start: {last_error}", obj=f"vm {name}", reason="QemuFailed"
            )
    else:
        raise TransientError(
            f"qemu could not bind a forward port: {last_error}", obj=f"vm {name}", reason="PortBusy"
        )
    pid = int((vm_dir / "qemu.pid").read_text().strip())
    state = VMState(
        name=name,
        machine=machine,
        image=str(image.resolve()),
        dir=str(vm_dir),
        pid=pid,
        port=port,
        user=SSH_USER,
        accel=accel.name,
        accel_reason=accel.reason,
        firmware=firmware,
        instance_id=instance_id,
        host_key_fingerprint=host.sha256_fingerprint,
        started_at=started,
    )
    state.save()
    progress(
        f"vm {name}: qemu pid {pid} ({accel.name}: {accel.reason}), {cpus} CPUs, "
        f"{memory} MiB, {firmware}; serial console {state.serial_log}"
    )
    state.ssh_ready_s = wait_for_ssh(state, ssh_timeout, progress)
    state.save()
    progress(
        f"vm {name}: SSH ready after {state.ssh_ready_s:.1f}s at {state.ssh_address} "
        f"(host key {state.host_key_fingerprint})"
    )
    return state


def _stop_pid(pid: int, grace: float = 10.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.2)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        while _alive(pid):
            time.sleep(0.1)


def _stop_dir(vm_dir: Path, keep: tuple[str, ...] = ()) -> None:
    """Stop a half-started VM; remove everything but the logs named in ``keep``."""
    pidfile = vm_dir / "qemu.pid"
    with contextlib.suppress(OSError, ValueError):
        _stop_pid(int(pidfile.read_text().strip()))
    for child in vm_dir.iterdir():
        if child.name in keep:
            continue
        if child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def down(name: str, root: Path | None = None, keep_logs: Path | None = None) -> VMState:
    """Stop VM ``name`` and remove its state directory (overlay, seed, keys).

    ``keep_logs`` copies the serial console log there first, for post-mortems.
    """
    state = VMState.load(name, root)
    if _alive(state.pid):
        _stop_pid(state.pid)
    if keep_logs is not None and state.serial_log.exists():
        keep_logs.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(state.serial_log, keep_logs)
    shutil.rmtree(state.path, ignore_errors=True)
    return state


def list_vms(root: Path | None = None) -> list[tuple[VMState, bool]]:
    """Every recorded VM with whether its qemu is still running."""
    base = root or state_root()
    out: list[tuple[VMState, bool]] = []
    if base.is_dir():
        for p in sorted(base.glob("*/vm.json")):
            st = VMState.load(p.parent.name, base)
            out.append((st, _alive(st.pid)))
    return out
