"""The controller's container image, built here without Docker: mmdebstrap and umoci.

The ``Containerfile`` at the repository root says the same in a container engine's words
(``docker build``/``podman build`` where one runs); this builds that image from Debian's
packages where none runs, and is what the tests exercise:

1. ``wheels``: ``pip wheel`` on the host makes the nodesmith wheel and fetches every
   dependency's wheel through the host's own pip configuration (the image's Python is Debian
   12's 3.11, as the host's), so the root's build needs no network of its own;
2. ``rootfs``: mmdebstrap makes a minimal Debian 12 root (``minbase``: no compilers) with
   ``python3`` and ``python3-venv`` from the host's apt sources; a venv in ``/opt/nodesmith``
   gets the wheels offline; a non-root user (65532) is added; apt lists, caches, docs and
   the wheels are removed;
3. ``oci``: umoci packs the root as one layer, runs as 65532 with ``nodesmith`` as the
   entrypoint (the Deployment's args are ``controller run ...``);
4. the OCI layout as one archive, ``nodesmith-controller.oci.tar`` with its ``.sha256`` (what
   ``ctr images import`` and ``skopeo copy oci-archive:`` read); its manifest carries its full
   name, ``localhost/nodesmith/controller:TAG``, as containerd names an import, so a node image
   can have it preloaded (``--preload-images``) like the control-plane images.

The output directory is complete or absent (``StagedBuild``); each step that fails names
itself, with the tail of its output, and a network failure is transient.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from bootstrap import __version__
from bootstrap.aptsources import sources_for
from bootstrap.errors import TerminalError
from bootstrap.image.staged import StagedBuild, prepare_output

ARCHIVE = "nodesmith-controller.oci.tar"
# The name containerd gives the image on import (no registry: air-gapped nodes have it
# preloaded); a Deployment names it as REPOSITORY:TAG.
REPOSITORY = "localhost/nodesmith/controller"
CONTAINERD_NAME = "io.containerd.image.name"
SUITE = "bookworm"
PACKAGES = ("python3", "python3-venv")
USER = "65532:65532"  # the non-root user every Pod of the Deployment runs as
VENV = "/opt/nodesmith"
ENTRYPOINT = f"{VENV}/bin/nodesmith"
# What the image never needs at run time (the docs, man pages and locales of the packages).
TRIM = ("/var/lib/apt/lists", "/var/cache/apt", "/var/cache/debconf/*-old", "/usr/share/doc",
        "/usr/share/man", "/usr/share/info", "/usr/share/locale", "/tmp/wheels")  # fmt: skip


@dataclass(frozen=True)
class ContainerImage:
    archive: Path
    sha256: str
    size: int
    tag: str


def source_tree() -> Path:
    """The checkout nodesmith runs from: the wheel is built from it."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file():
        raise TerminalError(
            f"needs nodesmith's source tree (no pyproject.toml at {root}): run it from a "
            "checkout, or build the Containerfile with a container engine",
            obj="controller image",
            reason="NoSourceTree",
        )
    return root


def mmdebstrap_argv(root: Path, sources: Path, wheels: Path, extra: tuple[str, ...]) -> list[str]:
    q = shlex.quote
    install = f"{VENV}/bin/pip install --no-index --no-cache-dir --find-links /tmp/wheels"
    return [
        "mmdebstrap",
        "--mode=root",
        "--variant=minbase",
        "--format=directory",
        "--include=" + ",".join((*PACKAGES, *extra)),
        '--aptopt=Acquire::Retries "3"',
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        f"--customize-hook=copy-in {q(str(wheels))} /tmp",
        f'--customize-hook=chroot "$1" python3 -m venv {VENV}',
        f'--customize-hook=chroot "$1" {install} nodesmith=={__version__}',
        '--customize-hook=chroot "$1" groupadd --system --gid 65532 nonroot',
        '--customize-hook=chroot "$1" useradd --system --uid 65532 --gid 65532 '
        "--no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin nonroot",
        '--customize-hook=cd "$1" && rm -rf ' + " ".join(f".{t}" for t in TRIM),
        SUITE,
        str(root),
        str(sources),
    ]


def umoci_steps(layout: Path, bundle: Path, root: Path, tag: str) -> list[list[str]]:
    ref = f"{layout}:{tag}"
    return [
        ["umoci", "init", "--layout", str(layout)],
        ["umoci", "new", "--image", ref],
        ["umoci", "unpack", "--image", ref, str(bundle)],
        ["rsync", "-aHAX", "--delete", f"{root}/", f"{bundle}/rootfs/"],
        ["umoci", "repack", "--image", ref, str(bundle)],
        ["umoci", "config", "--image", ref, "--config.user", USER,
         "--config.entrypoint", ENTRYPOINT, "--config.cmd", "controller",
         "--config.cmd", "run", "--config.workingdir", "/",
         "--config.env", "PYTHONDONTWRITEBYTECODE=1",
         "--config.label", f"org.opencontainers.image.version={__version__}",
         "--config.label", "org.opencontainers.image.title=nodesmith-controller",
         "--author", "nodesmith"],
        ["umoci", "gc", "--layout", str(layout)],
    ]  # fmt: skip


def name_for_containerd(layout: Path, tag: str) -> None:
    """Annotate the layout's manifest with its full name (``REPOSITORY:tag``), which
    ``ctr images import`` uses as the image's name; ``org.opencontainers.image.ref.name`` (the
    bare tag, for skopeo and umoci) stays."""
    index_file = layout / "index.json"
    index = json.loads(index_file.read_text())
    for manifest in index.get("manifests") or []:
        annotations = manifest.setdefault("annotations", {})
        if annotations.get("org.opencontainers.image.ref.name") == tag:
            annotations[CONTAINERD_NAME] = f"{REPOSITORY}:{tag}"
    index_file.write_text(json.dumps(index, separators=(",", ":")))


def build(
    output: Path,
    *,
    tag: str = __version__,
    mirror: str | None = None,
    force: bool = False,
    cache_dir: Path,
    work_parent: Path = Path("/var/tmp"),
    extra_packages: tuple[str, ...] = (),
) -> ContainerImage:
    """Build the controller image into ``output`` (a directory: the archive, its sha256, the
    build log); ``extra_packages`` is for tests of a failing step."""
    tree = source_tree()
    output = prepare_output(output, force)
    sources = sources_for(SUITE, ("main",), mirror)
    with StagedBuild("container-controller", output, cache_dir, work_parent) as staged:
        progress, work = staged.progress, staged.work
        progress.say(f"building the controller image {tag} -> {output} (log: {staged.log_path})")
        with progress.stage("wheels (pip wheel: nodesmith and its dependencies)"):
            progress.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir",
                          str(work / "wheels"), str(tree)], what="pip wheel")  # fmt: skip
        (work / "apt.sources").write_text(sources, encoding="utf-8")
        root = work / "root"
        with progress.stage("rootfs (mmdebstrap: Debian 12, python3, the wheels offline)"):
            argv = mmdebstrap_argv(root, work / "apt.sources", work / "wheels", extra_packages)
            progress.run(argv, what="mmdebstrap")
        layout, bundle = work / "oci", work / "bundle"
        with progress.stage("oci (umoci: one layer, user 65532, entrypoint nodesmith)"):
            for step in umoci_steps(layout, bundle, root, tag):
                progress.run(step, what=" ".join(step[:2]))
            name_for_containerd(layout, tag)
        archive = staged.staging / ARCHIVE
        with progress.stage("archive"):
            progress.run(["tar", "--sort=name", "--mtime=@0", "--owner=0", "--group=0",
                          "--numeric-owner", "-C", str(layout), "-cf", str(archive), "."],
                         what="tar")  # fmt: skip
            digest = _sha256(archive)
            (staged.staging / f"{ARCHIVE}.sha256").write_text(f"{digest}  {ARCHIVE}\n")
            info = {"tag": tag, "sha256": digest, "size": archive.stat().st_size,
                    "entrypoint": ENTRYPOINT, "user": USER, "version": __version__}  # fmt: skip
            (staged.staging / "image.json").write_text(json.dumps(info, indent=2) + "\n")
        staged.publish(None)
    final = output / ARCHIVE
    return ContainerImage(final, digest, final.stat().st_size, tag)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
