"""Where ``render`` writes: every target checked before anything is rendered or written, and
a whole ``--all`` run appearing at once.

A bad target used to be found half-way: ``--out-dir`` naming a file or ``--secrets-out`` in a
missing directory gave a traceback after some files were written, and a killed ``--all`` run
left 332 of 3,000 userdata files beside all 3,000 bootstrap-token Secrets. Now:

* ``--secrets-out``/``--token-secret-out`` must name a file (not a directory) in an existing,
  writable directory, each its own, and outside ``--out-dir``;
* ``--out-dir`` must be a directory or not exist yet, holding only files ``render`` writes
  (it is replaced as a whole, so stale files of removed Machines go too);
* ``--all`` renders into a private staging directory beside ``--out-dir`` (0700, files 0600),
  writes the side files, and renames the staging directory into place last: a reader sees the
  old directory or the new one, never a part. An interrupted run removes its staging
  directory (SIGTERM included); only SIGKILL can leave one, never a partial ``--out-dir``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from bootstrap.errors import UsageError
from bootstrap.fsutil import atomic_write, private_dir_name, replace_dir

SUFFIXES = {
    "userdata": ".cloud-config",
    "json": ".json",
    "secret": ".secret.yaml",
}


# Userdata is named for its format: cloud-init's document or an Ignition config.
FORMAT_SUFFIXES = {"cloud-config": ".cloud-config", "ignition": ".ign"}


def suffix_of(output: str, gzip: bool, format_: str = "cloud-config") -> str:
    base = FORMAT_SUFFIXES[format_] if output == "userdata" else SUFFIXES[output]
    return base + (".gz" if gzip and output == "userdata" else "")


def _refused(flag: str, path: str, why: str) -> UsageError:
    """``--flag PATH why``: the whole path (it is the user's own, and truncating it would hide
    which one), on one line."""
    shown = path.replace("\n", "\\n")
    return UsageError(f"{flag} {shown} {why}")


def _is_ours(entry: Path) -> bool:
    names = (*SUFFIXES.values(), ".cloud-config.gz", ".ign", ".ign.gz")
    return entry.is_file() and not entry.is_symlink() and entry.name.endswith(names)


def check_file(flag: str, path: str) -> Path:
    """A side output file: not a directory, in a directory that exists and can be written."""
    target = Path(path)
    if target.is_dir():
        raise _refused(flag, path, "is a directory; name a file")
    parent = target.parent
    if not parent.is_dir():
        raise _refused(flag, path, f"is in {str(parent)!r}, which is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise _refused(flag, path, "is in a directory this user cannot write")
    return target


def check_out_dir(path: str) -> Path:
    """``--out-dir``: a directory of render's own files, or nothing yet."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise _refused("--out-dir", path, "exists and is not a directory")
    if target.is_dir():
        others = sorted(entry.name for entry in target.iterdir() if not _is_ours(entry))
        if others:
            raise _refused(
                "--out-dir",
                path,
                f"holds {others[0]!r}, which render did not write (the directory is replaced "
                "as a whole); choose a new or empty directory",
            )
    return target


def check_targets(out_dir: str | None, side: dict[str, str | None]) -> None:
    """All targets of one ``render`` run, before anything is rendered."""
    directory = check_out_dir(out_dir).absolute() if out_dir else None
    seen: dict[Path, str] = {}
    for flag, path in side.items():
        if not path:
            continue
        target = Path(path).absolute()
        if directory is not None and directory in target.parents:
            raise _refused(flag, path, "is inside --out-dir, which is replaced as a whole")
        check_file(flag, path)
        if target in seen:
            raise _refused(flag, path, f"is also {seen[target]}")
        seen[target] = flag


def publish(out_dir: str, files: dict[str, bytes], side: list[tuple[str, bytes]]) -> None:
    """Stage ``files`` beside ``out_dir``, write the ``side`` files, then swap the directory in."""
    target = Path(out_dir).absolute()
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = private_dir_name(target.parent, f".{target.name}.staging-")
    try:
        staging.mkdir(mode=0o700)
        for name, data in files.items():
            fd = os.open(staging / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
        for path, data in side:
            atomic_write(path, data)
        replace_dir(staging, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(staging)
