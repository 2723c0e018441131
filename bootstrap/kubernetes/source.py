"""Fetch Debian's ``kubernetes`` source package with a private apt configuration.

apt checks the downloaded files against the signed Sources index, so what is built is
exactly what Debian published. The entries come from the host's own apt sources (turned
into ``deb-src``), never from a mirror name written here, and apt's lists and cache live in
the build's work directory: the machine's apt state is never changed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from bootstrap.aptsources import sources_for
from bootstrap.errors import TerminalError
from bootstrap.progress import Progress

PACKAGE = "kubernetes"
DEBIAN_VERSION = "1.20.5+really1.20.2-1.1+deb12u1"
KUBERNETES_VERSION = "v1.20.2"
SUITE = "bookworm"


@dataclass(frozen=True)
class SourcePackage:
    """The downloaded, apt-verified files of one source package."""

    dsc: Path
    orig: Path
    debian: Path

    @property
    def sha256(self) -> str:
        """The .dsc's hash: it lists the sha256 of every other file, so it names them all."""
        return hashlib.sha256(self.dsc.read_bytes()).hexdigest()


def apt_options(work: Path) -> list[str]:
    """``-o`` options that point apt at a sources file and state under ``work`` only."""
    return [
        f"-oDir::Etc::SourceList={work / 'sources.list'}",
        f"-oDir::Etc::SourceParts={work / 'sources.list.d'}",
        f"-oDir::State::Lists={work / 'lists'}",
        f"-oDir::Cache={work / 'cache'}",
        "-oAPT::Sandbox::User=root",
    ]


def fetch(work: Path, progress: Progress, mirror: str | None = None) -> SourcePackage:
    """Download ``kubernetes=DEBIAN_VERSION``'s source into ``work/src``."""
    apt = work / "apt"
    for sub in ("sources.list.d", "lists/partial", "cache/archives/partial"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text("", encoding="utf-8")
    sources = sources_for(SUITE, ("main",), mirror, kind="deb-src")
    (apt / "sources.list.d" / "nodesmith-src.sources").write_text(sources, encoding="utf-8")
    options = apt_options(apt)
    progress.run(["apt-get", *options, "update"], what="apt-get update (deb-src)")
    src = work / "src"
    src.mkdir(exist_ok=True)
    progress.run(
        [
            "sh",
            "-c",
            'cd "$1" && shift && exec "$@"',
            "sh",
            str(src),
            "apt-get",
            *options,
            "source",
            "--download-only",
            f"{PACKAGE}={DEBIAN_VERSION}",
        ],
        what=f"apt-get source {PACKAGE}={DEBIAN_VERSION}",
    )
    upstream = DEBIAN_VERSION.rsplit("-", 1)[0]
    found = SourcePackage(
        dsc=src / f"{PACKAGE}_{DEBIAN_VERSION}.dsc",
        orig=src / f"{PACKAGE}_{upstream}.orig.tar.gz",
        debian=src / f"{PACKAGE}_{DEBIAN_VERSION}.debian.tar.xz",
    )
    for path in (found.dsc, found.orig, found.debian):
        if not path.is_file():
            raise TerminalError(
                f"apt-get source did not produce {path.name}",
                obj=f"{PACKAGE}={DEBIAN_VERSION}",
                reason="SourceIncomplete",
            )
    return found
