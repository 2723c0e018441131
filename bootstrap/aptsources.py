"""The apt sources a build uses: the host's own Debian sources, or ``--mirror``.

Shared by ``image`` (the root filesystem's ``deb`` entries) and ``kubernetes`` (the same
entries as ``deb-src`` for Debian's source package), so it sits above both rooms.

The build never names a mirror host itself. It reads ``/etc/apt/sources.list`` and
``/etc/apt/sources.list.d/*.sources|*.list`` and keeps only the entries for the image's
suite (``bookworm``, ``bookworm-updates``, ``bookworm-security``), so third-party
repositories on the host (``nodistro``, ``cloud-sdk``...) never leak into the image build.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from bootstrap.errors import TerminalError

APT_DIR = Path("/etc/apt")


@dataclass(frozen=True)
class Entry:
    uris: tuple[str, ...]
    suites: tuple[str, ...]
    components: tuple[str, ...]
    signed_by: str | None

    def deb822(self, kind: str = "deb") -> str:
        """The entry as a deb822 stanza; ``kind="deb-src"`` for source packages."""
        lines = [
            f"Types: {kind}",
            f"URIs: {' '.join(self.uris)}",
            f"Suites: {' '.join(self.suites)}",
            f"Components: {' '.join(self.components)}",
        ]
        if self.signed_by:
            lines.append(f"Signed-By: {self.signed_by}")
        return "\n".join(lines) + "\n"


def _parse_deb822(text: str) -> list[Entry]:
    entries: list[Entry] = []
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            if not line.strip() or line.lstrip().startswith("#") or line[0].isspace():
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split() or fields.get("enabled") == "no":
            continue
        entries.append(
            Entry(
                tuple(fields.get("uris", "").split()),
                tuple(fields.get("suites", "").split()),
                tuple(fields.get("components", "").split()),
                fields.get("signed-by"),
            )
        )
    return entries


def _parse_one_line(text: str) -> list[Entry]:
    entries: list[Entry] = []
    for line in text.splitlines():
        parts = line.split("#", 1)[0].split()
        if len(parts) < 3 or parts[0] != "deb":
            continue
        signed_by = None
        if parts[1].startswith("["):
            opts = []
            while parts and not parts[1].endswith("]"):
                opts.append(parts.pop(1))
            opts.append(parts.pop(1))
            for opt in " ".join(opts).strip("[]").split():
                if opt.startswith("signed-by="):
                    signed_by = opt.split("=", 1)[1]
        entries.append(Entry((parts[1],), (parts[2],), tuple(parts[3:]), signed_by))
    return entries


def host_entries(apt_dir: Path = APT_DIR) -> list[Entry]:
    """Every enabled ``deb`` entry the host's apt uses."""
    entries: list[Entry] = []
    main = apt_dir / "sources.list"
    if main.is_file():
        entries += _parse_one_line(main.read_text(encoding="utf-8"))
    d = apt_dir / "sources.list.d"
    if d.is_dir():
        for f in sorted(d.iterdir()):
            if f.suffix == ".sources":
                entries += _parse_deb822(f.read_text(encoding="utf-8"))
            elif f.suffix == ".list":
                entries += _parse_one_line(f.read_text(encoding="utf-8"))
    return entries


def sources_for(
    suite: str,
    components: tuple[str, ...],
    mirror: str | None,
    apt_dir: Path = APT_DIR,
    kind: str = "deb",
    os: str | None = None,
) -> str:
    """deb822 text for ``suite``: ``--mirror`` if given, else the host's matching entries.

    ``kind="deb-src"`` gives the same entries for source packages, so a source build reaches
    exactly the mirror the host's binary packages come from. ``os="debian"`` on a Debian host
    lets another release's suite (``trixie`` on ``bookworm``) use the host's mirrors.
    """
    if mirror:
        return Entry((mirror,), (suite, f"{suite}-updates"), components, None).deb822(kind)
    entries = host_entries(apt_dir)
    keep = _for_suite(entries, suite, suite, kind)
    host = host_codename(apt_dir.parent / "os-release") if os == "debian" else None
    if not keep and host:
        # Another Debian release than the host's (a Debian 13 image on a Debian 12 host): the
        # host's own mirrors, archive and security, with the release's name in its suites.
        keep = _for_suite(entries, host, suite, kind)
    if not keep:
        raise TerminalError(
            f"the host's apt sources under {apt_dir} have no entry for suite {suite!r}; "
            "pass --mirror URL",
            obj="apt sources",
            field="suite",
            reason="NoAptSources",
        )
    return "\n".join(keep)


def _for_suite(entries: list[Entry], match: str, suite: str, kind: str) -> list[str]:
    """The entries for ``match`` and its pockets (``-updates``, ``-security``), renamed to
    ``suite``'s, as deb822 stanzas."""
    keep: list[str] = []
    for e in entries:
        suites = tuple(
            suite + s[len(match) :] for s in e.suites if s == match or s.startswith(f"{match}-")
        )
        if suites and e.uris:
            keep.append(Entry(e.uris, suites, e.components, e.signed_by).deb822(kind))
    return keep


def host_codename(os_release: Path) -> str | None:
    """The host's Debian release name (``VERSION_CODENAME``), None on another OS."""
    try:
        text = os_release.read_text(encoding="utf-8")
    except OSError:
        return None
    fields = dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#")
    )
    if fields.get("ID", "").strip('"') != "debian":
        return None
    return fields.get("VERSION_CODENAME", "").strip('"') or None


def sources_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]
