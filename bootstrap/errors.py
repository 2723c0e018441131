"""The error classes every nodesmith surface shares.

Cluster API keeps failures that retrying cannot fix (the input is wrong) apart from
failures that go away by themselves (something is not ready yet). nodesmith carries the
same split from the library through the CLI exit codes (65 / 75, as in sysexits.h), the HTTP
statuses (422 / 503) and the on-node bootstrap status (``terminal: true|false``).

Messages name the object, the field and the offending value, so an operator can fix the
input without reading a traceback. Values that may be secret are never put in messages.

The tree (exit code / HTTP status)::

    NodesmithError                 1 / 500  a bug: never raised on purpose
     +-- TerminalError            65 / 422  the input is wrong; retrying cannot help
     +-- UsageError                2 / 400  the command line or request is wrong (terminal too)
     +-- TransientError           75 / 503  not ready yet (endpoint, Secret); retry later

Raise through the helpers where a value is shown: ``invalid(obj, field, value, why)`` and
``bad_usage(flag, value, why)`` write the one "<why> (got <value>)" form, shortened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_TERMINAL = 65  # EX_DATAERR: the input data is wrong
EXIT_TRANSIENT = 75  # EX_TEMPFAIL: try again later

_MAX_VALUE_CHARS = 80

# Fields whose values (and everything under them) may be secret: an error names the field and
# the kind of value, never the value. Words match case-insensitively inside longer names
# (``passwdFrom``, ``tlsBootstrapToken``, a typo'd ``pasword``); names match whole.
_SECRET_WORDS = ("passw", "token", "content", "secret", "privatekey", "certificatekey")
_SECRET_NAMES = frozenset({"data", "stringdata"})


def may_be_secret(field: str | int) -> bool:
    """True when a field of this name may hold a secret (password, token, key, file body)."""
    name = str(field).lower()
    return name in _SECRET_NAMES or any(word in name for word in _SECRET_WORDS)


def show_value(value: Any) -> str:
    """Render a value for an error message: short, one line (``repr`` escapes newlines),
    never a huge blob."""
    text = repr(value)
    if len(text) > _MAX_VALUE_CHARS:
        text = text[: _MAX_VALUE_CHARS - 3] + "..."
    return text


def kind_of(value: Any) -> str:
    """What a value is, without what it holds: for values that must not be shown."""
    if isinstance(value, dict):
        return "a map"
    if isinstance(value, list | tuple):
        return "a list"
    name = type(value).__name__
    return ("an " if name[0] in "aeiou" else "a ") + name


@dataclass(frozen=True)
class ObjectRef:
    """Names one Kubernetes object in messages: ``Machine default/worker-0``."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


class NodesmithError(Exception):
    """Base of every error nodesmith reports to a user."""

    exit_code = 1
    http_status = 500
    terminal: bool | None = None

    def __init__(
        self,
        message: str,
        *,
        reason: str = "Error",
        obj: ObjectRef | str | None = None,
        field: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.obj = obj
        self.field = field

    def __str__(self) -> str:
        where = " ".join(p for p in (str(self.obj) if self.obj else "", self.field or "") if p)
        return f"{where}: {self.message}" if where else self.message

    def as_dict(self) -> dict[str, Any]:
        """The JSON body used by ``render --output json`` errors and the HTTP service."""
        return {
            "reason": self.reason,
            "message": str(self),
            "object": str(self.obj) if self.obj else None,
            "field": self.field,
            "terminal": self.terminal,
        }


class TerminalError(NodesmithError):
    """The input is wrong; retrying with the same input cannot help."""

    exit_code = EXIT_TERMINAL
    http_status = 422
    terminal = True


class TransientError(NodesmithError):
    """Something is not ready yet (no endpoint, no CA yet); retry later."""

    exit_code = EXIT_TRANSIENT
    http_status = 503
    terminal = False

    def __init__(self, message: str, *, retry_after: int = 10, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class UsageError(NodesmithError):
    """The command line itself is wrong."""

    exit_code = EXIT_USAGE
    http_status = 400
    terminal = True


def invalid(
    obj: ObjectRef | str | None, field: str, value: Any, why: str, reason: str = "InvalidField"
) -> TerminalError:
    """Build the common terminal error: ``<obj> <field>: <why> (got <value>)``."""
    return TerminalError(f"{why} (got {show_value(value)})", reason=reason, obj=obj, field=field)


def bad_usage(flag: str, value: Any, why: str, reason: str = "Error") -> UsageError:
    """Build the common usage error: ``<flag> <why> (got <value>)``."""
    return UsageError(f"{flag} {why} (got {show_value(value)})", reason=reason)


def is_small_number(text: str) -> bool:
    """ASCII digits only, at most 9 of them: what ``int(text)`` may be trusted with.

    ``str.isdigit`` accepts "²" and other Unicode digits that ``int`` refuses, and a
    5,000-digit number makes ``int`` raise; both were tracebacks instead of field errors.
    """
    return 0 < len(text) <= 9 and text.isascii() and text.isdigit()
