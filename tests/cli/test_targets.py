"""``bootstrap.cli.targets.publish``: a run that breaks off while writing leaves ``--out-dir``
as it was. The break is injected (a fault double: fsync failing at the Nth file), since a
real disk error cannot be had on demand."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bootstrap.cli import targets

FILES = {f"default_w-{i}.cloud-config": f"#cloud-config\n# {i}\n".encode() for i in range(50)}


def _fsync_failing_at(count: int, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    real = os.fsync

    def fsync(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] == count:
            raise OSError(28, "No space left on device")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)  # targets and fsutil both call os.fsync


@pytest.mark.parametrize("failing_at", [1, 25, 50, 51])  # 51: the side file, after all 50
def test_a_write_failure_leaves_the_old_out_dir(
    failing_at: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "default_old.cloud-config").write_text("#cloud-config\n# old\n")
    side = tmp_path / "tokens.yaml"
    _fsync_failing_at(failing_at, monkeypatch)
    with pytest.raises(OSError, match="No space left on device"):
        targets.publish(str(out), FILES, [(str(side), b"kind: Secret\n")])
    assert [p.name for p in out.iterdir()] == ["default_old.cloud-config"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging, no side file


def test_publish_swaps_in_the_whole_directory(tmp_path: Path) -> None:
    out = tmp_path / "new" / "out"
    side = tmp_path / "tokens.yaml"
    targets.publish(str(out), FILES, [(str(side), b"kind: Secret\n")])
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    assert {p.stat().st_mode & 0o777 for p in out.iterdir()} == {0o600}
    assert out.stat().st_mode & 0o777 == 0o700
    assert side.read_bytes() == b"kind: Secret\n" and side.stat().st_mode & 0o777 == 0o600
