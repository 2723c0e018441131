"""Image archives packed by ``nodesmith kubernetes build``: reproducible docker-archive tars
that name the image and carry the binary with the libraries ldd finds for it."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

from bootstrap.kubernetes import images


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_archive_is_a_docker_archive_naming_the_image(tmp_path: Path) -> None:
    binary = tmp_path / "tool"
    binary.write_bytes(b"#!/bin/sh\necho hi\n")
    binary.chmod(0o755)
    spec = images.ImageSpec(
        "k8s.gcr.io/tool:v1.2.3",
        files={"/usr/local/bin/tool": binary},
        links={"/bin/t": "../usr/local/bin/tool"},
        entrypoint=["tool"],
    )
    archive = images.write_archive(spec, tmp_path)
    assert archive.name == "tool_v1.2.3.tar"
    members = _members(archive)
    (manifest,) = json.loads(members["manifest.json"])
    assert manifest["RepoTags"] == ["k8s.gcr.io/tool:v1.2.3"]
    layer = members[manifest["Layers"][0]]
    config = json.loads(members[manifest["Config"]])
    assert config["rootfs"]["diff_ids"] == [f"sha256:{hashlib.sha256(layer).hexdigest()}"]
    assert config["config"]["Entrypoint"] == ["tool"]
    assert config["config"]["Env"] == [images.PATH_ENV]
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        entries = {m.name: m for m in tar.getmembers()}
    assert entries["usr/local/bin/tool"].mode == 0o755
    assert entries["bin/t"].issym() and entries["bin/t"].linkname == "../usr/local/bin/tool"
    assert {"usr", "usr/local", "usr/local/bin", "bin"} <= set(entries)
    assert all(m.mtime == 0 and m.uid == 0 for m in entries.values())


def test_archives_are_reproducible(tmp_path: Path) -> None:
    binary = tmp_path / "b"
    binary.write_bytes(b"\x7fELF not really")
    spec = images.ImageSpec("x/y:1", files={"/usr/local/bin/b": binary})
    digests = []
    for out in (tmp_path / "one", tmp_path / "two"):
        out.mkdir()
        digests.append(hashlib.sha256(images.write_archive(spec, out).read_bytes()).hexdigest())
    assert digests[0] == digests[1]


def test_dynamic_binary_brings_its_libraries() -> None:
    spec = images.ImageSpec("x/sh:1")
    images.add_binary(spec, Path("/bin/bash"))
    assert "/usr/local/bin/bash" in spec.files
    libs = [p for p in spec.files if "libc.so" in p]
    assert libs and all(spec.files[p].is_file() for p in libs)
    assert any("ld-linux" in p for p in spec.files)


def test_static_binary_has_no_libraries() -> None:
    assert images.shared_libraries(Path("/bin/busybox")) == []
