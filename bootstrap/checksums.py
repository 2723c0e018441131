"""sha256 of files and ``sha256sum``-style SHA256SUMS lists: one reader for every input.

Kubernetes binaries, preloaded image archives and the cached Kubernetes build are all
checked against a SHA256SUMS file before anything uses them.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from bootstrap.errors import TerminalError


def sha256_file(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def read_sums(sums: Path) -> dict[str, str]:
    """Parse ``sha256sum`` output lines: ``<hex>  <name>`` (``*name`` for binary mode)."""
    out: dict[str, str] = {}
    for n, line in enumerate(sums.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        m = re.fullmatch(r"([0-9a-fA-F]{64})\s+\*?(\S+)", line.strip())
        if not m:
            raise TerminalError(
                f"line {n} is not '<sha256>  <file>': {line[:80]!r}",
                obj=str(sums),
                reason="ChecksumsInvalid",
            )
        out[Path(m.group(2)).name] = m.group(1).lower()
    return out
