"""Stage 1: the root filesystem, built by mmdebstrap with a persistent .deb cache.

The cache (``~/.cache/nodesmith/apt/<suite>-<sources hash>/``) keeps the downloaded .debs
and the apt lists. A warm build syncs both into the new root, skips ``apt-get update`` while
the lists are younger than ``NODESMITH_APT_MAX_AGE`` seconds (default one day) and needs no
network when every .deb is cached (a new package, e.g. crun, is fetched once); a cold build
downloads, then syncs the cache back out.
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

from bootstrap.aptsources import sources_hash
from bootstrap.errors import TerminalError, TransientError
from bootstrap.image.containerd import run_tool
from bootstrap.image.definition import Definition
from bootstrap.progress import Progress

DEFAULT_MAX_AGE = 86400


def apt_cache(cache_dir: Path, suite: str, sources: str) -> Path:
    return cache_dir / "apt" / f"{suite}-{sources_hash(sources)}"


def lists_fresh(cache: Path) -> bool:
    """True when the cached apt lists exist and are young enough to skip ``apt-get update``."""
    stamp = cache / "lists.stamp"
    max_age = int(os.environ.get("NODESMITH_APT_MAX_AGE", DEFAULT_MAX_AGE))
    if not stamp.is_file() or not any((cache / "lists").glob("*Packages*")):
        return False
    return time.time() - stamp.stat().st_mtime < max_age


def apt_options(sources_dir: Path, lists: Path, cache: Path, arch: str) -> list[str]:
    """apt-get/apt-cache options that read only the build's sources and lists, never the
    host's own state (its sources, status, preferences or caches)."""
    opts = {
        "Dir::Etc::SourceList": "/dev/null",
        "Dir::Etc::SourceParts": str(sources_dir),
        "Dir::Etc::Preferences": "/dev/null",
        "Dir::Etc::PreferencesParts": "/dev/null",
        "Dir::State::Lists": str(lists),
        "Dir::State::status": "/dev/null",
        "Dir::Cache": str(cache),
        "Dir::Cache::pkgcache": "",
        "Dir::Cache::srcpkgcache": "",
        "APT::Architecture": arch,
        "APT::Architectures": arch,
        "APT::Sandbox::User": "root",
        "Acquire::Retries": "3",
    }
    return [x for k, v in opts.items() for x in ("-o", f"{k}={v}")]


def refresh_lists(defn: Definition, sources: str, cache_dir: Path) -> list[str]:
    """The suite's apt lists in the build cache, refreshed unless fresh, before anything is
    installed: the options that make apt read them (what a check of the suite's packages,
    such as containerd's version, asks with). mmdebstrap then builds from these lists."""
    cache = apt_cache(cache_dir, defn.suite, sources)
    lists, parts = cache / "lists", cache / "sources.d"
    (lists / "partial").mkdir(parents=True, exist_ok=True)
    parts.mkdir(parents=True, exist_ok=True)
    (parts / "build.sources").write_text(sources, encoding="utf-8")
    options = apt_options(parts, lists, cache / "apt-cache", defn.arch)
    if lists_fresh(cache):
        return options
    (cache / "apt-cache").mkdir(exist_ok=True)
    proc = run_tool(["apt-get", "-q", *options, "update"])
    text = proc.stdout + proc.stderr
    if proc.returncode != 0 or "\nE: " in "\n" + text:
        last = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or ["no output"]
        # A signature this host's keyring cannot check stays so: terminal. Anything else
        # (a mirror unreachable, a Release file mid-sync) may pass on a later try.
        error = (
            TerminalError if ("NO_PUBKEY" in text or "is not signed" in text) else TransientError
        )
        raise error(
            f"apt-get update of suite {defn.suite} failed: {last[0]}",
            obj="apt sources",
            reason="AptUpdateFailed",
        )
    (cache / "lists.stamp").touch()
    return options


def mmdebstrap_argv(
    defn: Definition,
    packages: list[str],
    target: Path,
    sources_file: Path,
    cache: Path,
    offline: bool,
) -> list[str]:
    archives, lists = cache / "archives", cache / "lists"
    q = shlex.quote
    argv = [
        "mmdebstrap",
        "--mode=root",
        f"--variant={defn.variant}",
        "--format=directory",
        f"--architectures={defn.arch}",
        f"--components={','.join(defn.components)}",
        "--include=" + ",".join(packages),
        "--skip=essential/unlink",
        '--aptopt=Acquire::Retries "3"',
        '--setup-hook=mkdir -p "$1"/var/cache/apt/archives "$1"/var/lib/apt/lists',
        f"--setup-hook=sync-in {q(str(archives))} /var/cache/apt/archives/",
    ]
    if offline:
        argv += [f"--setup-hook=sync-in {q(str(lists))} /var/lib/apt/lists/", "--skip=update"]
    argv += [
        f"--customize-hook=sync-out /var/cache/apt/archives {q(str(archives))}",
        f"--customize-hook=sync-out /var/lib/apt/lists {q(str(lists))}",
        defn.suite,
        str(target),
        str(sources_file),
    ]
    return argv


def build_rootfs(
    defn: Definition,
    packages: list[str],
    target: Path,
    sources: str,
    cache_dir: Path,
    progress: Progress,
) -> None:
    """Create ``target`` (must not exist) as a bootable Debian root with ``packages``."""
    cache = apt_cache(cache_dir, defn.suite, sources)
    (cache / "archives").mkdir(parents=True, exist_ok=True)
    (cache / "lists").mkdir(parents=True, exist_ok=True)
    sources_file = target.parent / "apt.sources"
    sources_file.write_text(sources, encoding="utf-8")
    offline = lists_fresh(cache)
    state = (
        "warm: no apt update, only .debs missing from it are downloaded"
        if offline
        else "refreshing the apt lists"
    )
    progress.say(f"  apt cache {cache} ({state})")
    progress.run(
        mmdebstrap_argv(defn, packages, target, sources_file, cache, offline), what="mmdebstrap"
    )
    if not offline:
        (cache / "lists.stamp").touch()
    # Drop partial downloads and lock files that sync-out may have copied.
    for junk in ("partial", "lock"):
        p = cache / "archives" / junk
        if p.is_file():
            p.unlink()
