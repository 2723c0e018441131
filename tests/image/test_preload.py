"""``--preload-images DIR``: every archive is checked against SHA256SUMS before anything is
installed; each failure names the file (and both hashes for a mismatch)."""

from __future__ import annotations

import hashlib
import subprocess
import time
from pathlib import Path

import pytest
from image_build import NODESMITH, REPO

from bootstrap.errors import TerminalError
from bootstrap.image.preload import check_dir, parse_record


def _dir(tmp_path: Path, archives: dict[str, bytes], sums: dict[str, str] | None = None) -> Path:
    d = tmp_path / "preload"
    d.mkdir()
    for name, data in archives.items():
        (d / name).write_bytes(data)
    listed = sums if sums is not None else {
        n: hashlib.sha256(data).hexdigest() for n, data in archives.items()
    }  # fmt: skip
    (d / "SHA256SUMS").write_text("".join(f"{h}  {n}\n" for n, h in listed.items()))
    return d


def test_good_dir_lists_every_archive(tmp_path: Path) -> None:
    d = _dir(tmp_path, {"a.tar": b"a", "b.tar": b"b"})
    assert check_dir(d) == {
        "a.tar": hashlib.sha256(b"a").hexdigest(),
        "b.tar": hashlib.sha256(b"b").hexdigest(),
    }


WRONG = hashlib.sha256(b"something else").hexdigest()


@pytest.mark.parametrize(
    ("archives", "sums", "reason", "needles"),
    [
        ({"a.tar": b"a"}, {"a.tar": WRONG}, "ChecksumMismatch",
         ["a.tar", WRONG, hashlib.sha256(b"a").hexdigest()]),
        ({}, {"gone.tar": WRONG}, "PreloadImageMissing", ["gone.tar", "SHA256SUMS"]),
        ({"a.tar": b"a", "extra.tar": b"x"}, {"a.tar": hashlib.sha256(b"a").hexdigest()},
         "ChecksumMissing", ["extra.tar"]),
        ({}, {}, "NoPreloadImages", ["SHA256SUMS"]),
    ],
    ids=["wrong-hash", "named-but-missing", "unlisted", "empty"],
)  # fmt: skip
def test_bad_dir_is_terminal_and_names_the_file(
    tmp_path: Path, archives: dict[str, bytes], sums: dict[str, str], reason: str,
    needles: list[str],
) -> None:  # fmt: skip
    with pytest.raises(TerminalError) as caught:
        check_dir(_dir(tmp_path, archives, sums))
    assert caught.value.reason == reason
    for needle in needles:
        assert needle in str(caught.value)


def test_no_sums_file(tmp_path: Path) -> None:
    (tmp_path / "a.tar").write_bytes(b"a")
    with pytest.raises(TerminalError) as caught:
        check_dir(tmp_path)
    assert caught.value.reason == "ChecksumsMissing"


def test_build_stops_before_anything_is_installed(tmp_path: Path) -> None:
    """The CLI: exit 65 naming the archive and both hashes, within seconds (no rootfs was
    started), and no output directory."""
    d = _dir(tmp_path, {"a.tar": b"a"}, {"a.tar": WRONG})
    out = tmp_path / "out"
    started = time.monotonic()
    proc = subprocess.run(
        [NODESMITH, "image", "build", str(REPO / "images/debian-12.yaml"),
         "--preload-images", str(d), "--output", str(out)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 65, proc.stderr
    assert "a.tar" in proc.stderr and WRONG in proc.stderr and "Traceback" not in proc.stderr
    assert time.monotonic() - started < 30
    assert not out.exists()


def test_record_joins_archive_hashes() -> None:
    text = '[{"ref": "k8s.gcr.io/pause:3.2", "digest": "sha256:ab", "archive": "pause_3.2.tar"}]'
    (image,) = parse_record(text, {"pause_3.2.tar": "cd"})
    assert (image.ref, image.digest, image.archive, image.archive_sha256) == (
        "k8s.gcr.io/pause:3.2", "sha256:ab", "pause_3.2.tar", "cd",
    )  # fmt: skip
