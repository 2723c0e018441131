"""Bearer-token check for ``nodesmith serve``: tokens from a file, compared in constant time.

The file holds one token per line (blank lines and ``#`` comments ignored), so a rotation can
list the old and the new token for a while. Every configured token is compared with
``hmac.compare_digest`` on every request, so the time taken says nothing about which token, or
how much of one, matched. ``reload()`` (wired to SIGHUP) re-reads the file; a reload that finds
the file unreadable or empty keeps the tokens already loaded instead of locking every client
out, and says so in the log. Tokens are never logged, not even hashed.
A token shorter than ``MIN_TOKEN_LENGTH`` makes the file unusable: a 1-character token is
guessed in a hundred requests.
"""

from __future__ import annotations

import hmac
import os
import stat
from pathlib import Path

from bootstrap.errors import UsageError

MIN_TOKEN_LENGTH = 16  # 16 random URL-safe characters are 96 bits


class TokenStore:
    """The accepted bearer tokens, loaded from ``path``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._tokens: tuple[bytes, ...] = ()
        self.generation = 0

    def _read(self) -> tuple[bytes, ...]:
        try:
            text = self.path.read_bytes()
        except OSError as exc:
            raise UsageError(
                f"cannot read token file: {exc.strerror}", reason="TokenFile", obj=str(self.path)
            ) from None
        tokens = []
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith(b"#"):
                continue
            if any(c < 0x21 or c > 0x7E for c in line):
                raise UsageError(
                    "token file lines must be printable ASCII without spaces",
                    reason="TokenFile",
                    obj=str(self.path),
                )
            if len(line) < MIN_TOKEN_LENGTH:  # the length only: never the token
                raise UsageError(
                    f"line {number}: a token needs at least {MIN_TOKEN_LENGTH} characters "
                    f"(got {len(line)})",
                    reason="TokenFile",
                    obj=str(self.path),
                )
            tokens.append(line)
        if not tokens:
            raise UsageError("token file holds no token", reason="TokenFile", obj=str(self.path))
        return tuple(tokens)

    def load(self) -> int:
        """Read the file; raise ``UsageError`` when it is unusable. Returns the token count."""
        self._tokens = self._read()
        self.generation += 1
        return len(self._tokens)

    def reload(self) -> tuple[bool, str]:
        """Re-read the file, keeping the old tokens on failure. Returns (ok, what happened)."""
        try:
            count = self.load()
        except UsageError as exc:
            return False, f"{exc}; keeping the {len(self._tokens)} token(s) loaded before"
        return True, f"loaded {count} token(s)"

    def world_readable(self) -> bool:
        """True when group or others may read the file (worth a warning, not a refusal)."""
        try:
            mode = self.path.stat().st_mode
        except OSError:
            return False
        return bool(mode & (stat.S_IRGRP | stat.S_IROTH))

    def check(self, authorization: bytes | None) -> bool:
        """True when the ``Authorization`` header value carries an accepted bearer token."""
        if not authorization:
            return False
        scheme, _, presented = authorization.strip().partition(b" ")
        if scheme.lower() != b"bearer":
            return False
        presented = presented.strip()
        matched = False
        for token in self._tokens:
            # No early exit: every token is compared, whatever matched before.
            matched |= hmac.compare_digest(presented, token)
        return matched
