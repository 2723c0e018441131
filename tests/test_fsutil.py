"""``bootstrap.fsutil``: a directory swap that a signal cannot cut in half. The signal is
real (SIGTERM sent to this process) and lands at the one bad moment, between the two renames,
through a rename double that sends it there."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from bootstrap.fsutil import private_dir_name, replace_dir


class Stopped(BaseException):
    pass


def _stop(signum: int, frame: FrameType | None) -> None:
    raise Stopped


@pytest.fixture
def sigterm_raises() -> Iterator[None]:
    before = signal.signal(signal.SIGTERM, _stop)
    yield
    signal.signal(signal.SIGTERM, before)


def test_sigterm_between_the_renames_waits_for_the_swap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sigterm_raises: None
) -> None:
    target, staging = tmp_path / "out", tmp_path / "staging"
    target.mkdir()
    (target / "old").write_text("old")
    staging.mkdir()
    (staging / "new").write_text("new")
    real = Path.rename

    def rename(self: Path, to: Path) -> Path:
        done = real(self, to)
        if self == target:  # the old tree is aside, the new one not yet in
            os.kill(os.getpid(), signal.SIGTERM)
        return done

    monkeypatch.setattr(Path, "rename", rename)
    with pytest.raises(Stopped):  # the signal still arrives, once the swap is whole
        replace_dir(staging, target)
    assert [p.name for p in target.iterdir()] == ["new"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # old tree removed


def test_replace_dir_into_nothing(tmp_path: Path) -> None:
    staging = tmp_path / "s"
    staging.mkdir()
    replace_dir(staging, tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_private_dir_names_are_fresh(tmp_path: Path) -> None:
    names = {private_dir_name(tmp_path, ".out.staging-") for _ in range(100)}
    assert len(names) == 100
    assert all(n.parent == tmp_path and n.name.startswith(f".out.staging-{os.getpid()}-")
               for n in names)  # fmt: skip
