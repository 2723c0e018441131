"""Pick the qemu accelerator: KVM only where it can really boot a stock kernel, TCG otherwise.

``/dev/kvm`` existing is not enough. On a PVM host (module ``kvm_pvm``) a stock Debian kernel
hangs right after "Probing EDD" under ``-enable-kvm``, so ``auto`` must not choose KVM there.
The decision is made from facts the host exposes (the device's permissions and the loaded
modules), never by a guess, and ``--accel kvm`` still forces KVM for users who know better.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from bootstrap.errors import bad_usage

ACCELS = ("auto", "kvm", "tcg")

# Loaded KVM flavours that cannot run an unmodified guest kernel.
_UNUSABLE_KVM_MODULES = ("kvm_pvm",)


@dataclass(frozen=True)
class Accel:
    """The accelerator chosen and why, so ``vm up`` can say it."""

    name: str  # "kvm" | "tcg"
    reason: str

    def qemu_args(self) -> list[str]:
        if self.name == "kvm":
            return ["-accel", "kvm", "-cpu", "host"]
        return ["-accel", "tcg,thread=multi", "-cpu", "max"]


def _loaded_modules(proc_modules: Path, sys_module: Path) -> set[str]:
    names: set[str] = set()
    try:
        for line in proc_modules.read_text(encoding="ascii", errors="replace").splitlines():
            if line.strip():
                names.add(line.split()[0])
    except OSError:
        pass
    with contextlib.suppress(OSError):
        names.update(p.name for p in sys_module.iterdir())
    return names


def kvm_usable(
    dev: Path = Path("/dev/kvm"),
    proc_modules: Path = Path("/proc/modules"),
    sys_module: Path = Path("/sys/module"),
) -> tuple[bool, str]:
    """Return (usable, reason) for running a stock kernel under KVM on this host."""
    if not dev.exists():
        return False, f"{dev} does not exist"
    if not os.access(dev, os.R_OK | os.W_OK):
        return False, f"{dev} is not readable and writable by this user"
    modules = _loaded_modules(proc_modules, sys_module)
    for bad in _UNUSABLE_KVM_MODULES:
        if bad in modules:
            return False, f"{dev} is provided by {bad}, which cannot boot a stock kernel"
    if not modules & {"kvm_intel", "kvm_amd"}:
        return False, "neither kvm_intel nor kvm_amd is loaded"
    return True, f"{dev} is usable ({', '.join(sorted(modules & {'kvm_intel', 'kvm_amd'}))})"


def choose(requested: str = "auto") -> Accel:
    """Resolve ``--accel``: ``auto`` probes, ``kvm`` and ``tcg`` are taken as given."""
    if requested not in ACCELS:
        raise bad_usage("--accel", requested, f"must be one of {', '.join(ACCELS)}")
    if requested == "tcg":
        return Accel("tcg", "requested")
    if requested == "kvm":
        return Accel("kvm", "requested")
    ok, why = kvm_usable()
    return Accel("kvm", why) if ok else Accel("tcg", why)
