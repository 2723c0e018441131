"""Stage progress on stderr and the full build log: every command's output goes to the log.

A build is minutes of mmdebstrap, pyinfra and qemu-img output; the terminal shows one line
per stage with elapsed time, the log file keeps everything for when a stage fails.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

from bootstrap.errors import TerminalError, TransientError

_NETWORK_HINTS = (
    "Temporary failure resolving",
    "Could not connect",
    "Connection timed out",
    "Failed to fetch",
    "Network is unreachable",
    "Could not resolve",
)


def _stop_group(proc: subprocess.Popen[str]) -> None:
    for sig, wait in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
            time.sleep(1)  # let grandchildren leave the group
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue
        return


class StageFailed(TerminalError):
    """A build command exited non-zero; the message carries the tail of its output."""


class Progress:
    """Prints ``[elapsed] stage`` lines and records the duration of every stage."""

    def __init__(self, log_path: Path, stream: IO[str] | None = None) -> None:
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("a", encoding="utf-8")
        self._stream = stream or sys.stderr
        self._start = time.monotonic()
        self.timings: dict[str, float] = {}

    def close(self) -> None:
        self._log.close()

    def say(self, message: str) -> None:
        line = f"[{time.monotonic() - self._start:7.1f}s] {message}"
        print(line, file=self._stream, flush=True)
        self.log(line)

    def log(self, text: str) -> None:
        self._log.write(text if text.endswith("\n") else text + "\n")
        self._log.flush()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.monotonic()
        self.say(f"{name} ...")
        try:
            yield
        except BaseException:
            self.say(f"{name} FAILED after {time.monotonic() - t0:.1f}s (log: {self.log_path})")
            raise
        dt = round(time.monotonic() - t0, 1)
        self.timings[name] = self.timings.get(name, 0.0) + dt
        self.say(f"{name} done in {dt:.1f}s")

    def run(
        self,
        cmd: Sequence[str | os.PathLike[str]],
        *,
        env: Mapping[str, str] | None = None,
        input_text: str | None = None,
        capture: bool = False,
        what: str = "",
    ) -> str:
        """Run a command, output into the log; a failure raises with the output's tail."""
        argv = [str(c) for c in cmd]
        self.log("$ " + " ".join(argv))
        full_env = {**os.environ, **(env or {})}
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=full_env,
            start_new_session=True,
        )
        if input_text is not None and proc.stdin:
            proc.stdin.write(input_text)
            proc.stdin.close()
        out: list[str] = []
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                out.append(line)
                self._log.write(line)
            rc = proc.wait()
        except BaseException:
            # Interrupted (SIGTERM/Ctrl-C): stop the child's whole process group (mmdebstrap
            # runs apt and dpkg) before the caller deletes the work directory.
            _stop_group(proc)
            raise
        finally:
            self._log.flush()
        text = "".join(out)
        if rc != 0:
            tail = "".join(out[-15:]).strip()
            msg = (
                f"{what or argv[0]} failed with exit code {rc}:\n{tail}\n"
                f"(full log: {self.log_path})"
            )
            if any(h in text for h in _NETWORK_HINTS):
                raise TransientError(msg, reason="MirrorUnreachable")
            raise StageFailed(msg, reason="BuildStepFailed")
        return text if capture else ""
