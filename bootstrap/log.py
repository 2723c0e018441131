"""nodesmith's JSON log lines, one schema for ``serve`` and ``controller``: one object a line,
``{"ts": ISO-8601 UTC with milliseconds, "level", "event", ...fields}``, one write(2) a line.

``serve``'s workers share the log file descriptor, and the controller's workers, report
endpoint and library loggers share stderr: a single ``os.write`` per line keeps lines whole.
Callers pass only fields that are safe to log: never headers, tokens, keys, bodies or userdata.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from datetime import UTC, datetime
from typing import Any


def now() -> str:
    """The timestamp format of every line."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def write_log(line: dict[str, Any], fd: int = 2) -> None:
    """Write one JSON log line with a single write(2)."""
    data = (json.dumps(line, separators=(",", ":"), default=str) + "\n").encode()
    with contextlib.suppress(OSError):  # a closed log must not take the service down
        os.write(fd, data)


def log_event(event: str, level: str = "info", **fields: Any) -> None:
    """A service event (start, reload, worker exit) as one line on stderr."""
    write_log({"ts": now(), "level": level, "event": event, **fields})


class JsonFormatter(logging.Formatter):
    """Formats library records (uvicorn's bad HTTP framing and shutdown, the controller's
    watch breaks) as the same JSON lines, under ``event``.

    Only the exception type is kept, never its text or traceback locals, for the same reason
    request errors are logged that way: a message may quote input.
    """

    def __init__(self, event: str = "server") -> None:
        super().__init__()
        self.event = event

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": now(),
            "level": record.levelname.lower(),
            "event": self.event,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info and record.exc_info[0] is not None:
            line["error"] = record.exc_info[0].__name__
        return json.dumps(line, separators=(",", ":"), default=str)


# uvicorn's logging: JSON to stderr, warnings and up; its access log stays off.
UVICORN_LOG_CONFIG: dict[str, Any] = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "bootstrap.log.JsonFormatter"}},
    "handlers": {
        "stderr": {
            "class": "logging.StreamHandler",
            "formatter": "json",
            "stream": "ext://sys.stderr",
        }
    },
    "loggers": {
        "uvicorn": {"handlers": ["stderr"], "level": "WARNING", "propagate": False},
        "uvicorn.error": {"handlers": ["stderr"], "level": "WARNING", "propagate": False},
    },
}
