"""Build the NoCloud seed ISO (volume id CIDATA) a VM reads its user-data and meta-data from.

cloud-init's NoCloud datasource looks for a filesystem labelled ``cidata``/``CIDATA`` holding
``user-data`` and ``meta-data`` (and optionally ``network-config``). ISO 9660 names are upper
case 8.3, so the files also get Joliet and Rock Ridge names, as ``cloud-localds`` does. The ISO
is written to a temporary name and renamed, so a failure never leaves a half-written seed.
Shared by ``vm`` (the VMs it boots) and ``image`` (Packer's builder VM), so it lives above both.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pycdlib

VOLUME_ID = "CIDATA"
#: The cloud-init datasource that reads this seed: an image must list it to boot from one.
DATASOURCE = "NoCloud"


def build_seed_iso(
    path: Path,
    user_data: bytes,
    meta_data: bytes,
    network_config: bytes | None = None,
) -> Path:
    """Write a NoCloud seed ISO to ``path`` (mode 0600: user-data may carry secrets)."""
    files = [("USERDATA.;1", "user-data", user_data), ("METADATA.;1", "meta-data", meta_data)]
    if network_config is not None:
        files.append(("NETCFG.;1", "network-config", network_config))
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, joliet=3, rock_ridge="1.09", vol_ident=VOLUME_ID)
    for iso_name, name, data in files:
        iso.add_fp(
            io.BytesIO(data), len(data), f"/{iso_name}", rr_name=name, joliet_path=f"/{name}"
        )
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            iso.write_fp(out)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        iso.close()
    return path


def read_seed_iso(path: Path) -> dict[str, bytes]:
    """Read the files of a seed ISO back by their Rock Ridge names (used by tests and ``vm``)."""
    iso = pycdlib.PyCdlib()
    iso.open(str(path))
    try:
        out: dict[str, bytes] = {}
        for child in iso.list_children(rr_path="/"):
            name = child.rock_ridge.name().decode() if child.rock_ridge else ""
            if name in ("", ".", "..") or child.is_dir():
                continue
            buf = io.BytesIO()
            iso.get_file_from_iso_fp(buf, rr_path=f"/{name}")
            out[name] = buf.getvalue()
        return out
    finally:
        iso.close()
