"""Run libvirtd, its networks and VMs inside a network namespace of their own.

libvirt's NAT networks (192.168.121.0/24 for Vagrant's management network, the local cluster's
isolated network) must not exist in the machine's own namespace on shared hosts and CI: no
traffic to private-range addresses may leave from there. ``ip netns add`` makes an empty
namespace; libvirtd started inside it (``ip netns exec NAME libvirtd -d``) creates its bridges,
dnsmasq and qemu processes there, and everything that talks to the VMs (vagrant, ssh,
``nodesmith verify``) is run inside it too.

libvirt's control sockets live in ``/run/libvirt`` (the filesystem is shared), so one such
daemon can run at a time; :meth:`LibvirtNetns.start` refuses to start a second one. Its
configuration is private: ``ip netns exec NAME`` bind-mounts ``/etc/netns/NAME/*`` over
``/etc``, so a copy of ``/etc/libvirt`` there holds the networks and pools Vagrant defines and
a ``qemu.conf`` that runs qemu as root. That last part is needed on hosts where ``/dev/kvm``
is root-only (as on this PVM host): libvirt probes qemu's capabilities as root (KVM present)
but then checks ``/dev/kvm`` as the unprivileged qemu user (KVM absent), finds its cache
"outdated" on every call and re-probes qemu twice per API call, which made one
``virsh define`` take almost two minutes here.
:meth:`LibvirtNetns.stop` ends exactly the processes inside the namespace (``ip netns pids``),
then deletes the namespace.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from bootstrap.errors import TerminalError, TransientError, UsageError, bad_usage
from bootstrap.hostutil import alive as _alive

LIBVIRTD_PIDFILE = Path("/run/libvirtd.pid")
ETC_NETNS = Path("/etc/netns")
QEMU_CONF_OVERRIDE = (
    "\n# nodesmith netns sandbox: qemu runs as root so libvirt's KVM check matches its probe\n"
    'user = "root"\ngroup = "root"\n'
)
LIBVIRT_SOCKET = Path("/run/libvirt/libvirt-sock")
URI = "qemu:///system"


def _pidfile(path: Path) -> int | None:
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if _alive(pid) else None


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


class LibvirtNetns:
    """A named network namespace with lo up and libvirtd + virtlogd running inside."""

    def __init__(self, name: str) -> None:
        ok = 0 < len(name) <= 32 and all(c.isalnum() or c in "-_" for c in name)
        if not ok:
            raise bad_usage("netns name", name, "must be letters, digits, - or _")
        self.name = name

    def argv(self, command: list[str]) -> list[str]:
        """``command`` prefixed so that it runs inside the namespace."""
        return ["ip", "netns", "exec", self.name, *command]

    def exists(self) -> bool:
        return Path("/run/netns", self.name).exists()

    def pids(self) -> list[int]:
        out = _run(["ip", "netns", "pids", self.name])
        return [int(p) for p in out.stdout.split()] if out.returncode == 0 else []

    def live_pids(self) -> list[int]:
        """Processes in the namespace that still run (exited daemons whose parent does not
        reap them linger as zombies and need no signal)."""
        return [p for p in self.pids() if _alive(p)]

    def start(self, timeout: float = 30.0) -> None:
        if os.geteuid() != 0:
            raise UsageError("a libvirt network namespace needs root (ip netns add, libvirtd)")
        running = _pidfile(LIBVIRTD_PIDFILE)
        if running is not None and running not in self.pids():
            raise TerminalError(
                f"libvirtd is already running (pid {running}) outside netns "
                f"{self.name}; its sockets in /run/libvirt would be shared",
                reason="LibvirtdRunning",
            )
        self._private_etc()
        if not self.exists():
            self._check(["ip", "netns", "add", self.name])
        self._check(["ip", "-n", self.name, "link", "set", "lo", "up"])
        if running is None:
            self._check(self.argv(["virtlogd", "-d"]))
            self._check(self.argv(["libvirtd", "-d"]))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if _run(self.argv(["virsh", "-c", URI, "version"])).returncode == 0:
                return
            time.sleep(0.5)
        raise TransientError(
            f"libvirtd in netns {self.name} did not answer on {URI} within {timeout:.0f}s",
            reason="LibvirtdNotReady",
        )

    @property
    def etc(self) -> Path:
        return ETC_NETNS / self.name

    def _private_etc(self) -> None:
        """``/etc/netns/NAME/libvirt``: a copy of ``/etc/libvirt`` only this netns sees."""
        conf = self.etc / "libvirt"
        if conf.exists():
            return
        self.etc.mkdir(parents=True, exist_ok=True)
        tmp = self.etc / ".libvirt.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree("/etc/libvirt", tmp, symlinks=True)
        with (tmp / "qemu.conf").open("a", encoding="utf-8") as out:
            out.write(QEMU_CONF_OVERRIDE)
        tmp.rename(conf)

    def exec(self, command: list[str]) -> int:
        """Run ``command`` inside the namespace with this process's stdio; return its code."""
        if not self.exists():
            raise UsageError(
                f"netns {self.name} does not exist; run `nodesmith local-cluster "
                f"netns up {self.name}` first"
            )
        return subprocess.run(self.argv(command), check=False).returncode

    def virsh(self, *args: str) -> subprocess.CompletedProcess[str]:
        return _run(self.argv(["virsh", "-c", URI, *args]))

    def stop(self, grace: float = 15.0) -> None:
        """Stop libvirt's networks (their dnsmasq), every process left in the namespace, then
        delete it. Only processes inside this namespace are signalled."""
        if not self.exists():
            self._remove_etc()
            return
        nets = self.virsh("net-list", "--name")
        for net in nets.stdout.split() if nets.returncode == 0 else []:
            self.virsh("net-destroy", net)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.live_pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + grace
            while self.live_pids() and time.monotonic() < deadline:
                time.sleep(0.2)
            if not self.live_pids():
                break
        left = self.live_pids()
        if left:
            raise TransientError(
                f"processes {left} are still running in netns {self.name}", reason="NetnsBusy"
            )
        self._check(["ip", "netns", "del", self.name])
        self._remove_etc()

    def _remove_etc(self) -> None:
        shutil.rmtree(self.etc, ignore_errors=True)
        with contextlib.suppress(OSError):  # only when empty: another netns may use it
            ETC_NETNS.rmdir()

    @staticmethod
    def _check(argv: list[str]) -> None:
        out = _run(argv)
        if out.returncode != 0:
            raise TerminalError(
                f"`{' '.join(argv)}` failed ({out.returncode}): {out.stderr.strip()[-300:]}",
                reason="NetnsCommandFailed",
            )
