"""One build's workspace, shared by the chroot and the Packer builder.

Artifacts appear only on full success: everything is written to a hidden sibling of
``--output`` and renamed into place at the very end; a failure or an interrupt removes the
sibling and the work directory (under /var/tmp), so ``--output`` never holds half a build.
The log lives under the cache directory while the build runs and is copied into the output.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from bootstrap.errors import TerminalError
from bootstrap.fsutil import replace_dir
from bootstrap.image import artifacts, inspect_root, preload
from bootstrap.image.workspace import hold, reclaim_stale, remove_tree
from bootstrap.manifest import Artifact, ImageManifest, OSInfo, PreloadedImage
from bootstrap.progress import Progress


def prepare_output(output: Path, force: bool) -> Path:
    """Refuse an existing ``--output`` unless forced; returns it resolved, parent created."""
    output = output.resolve()
    if output.exists() and not force:
        raise TerminalError(
            "already exists; pass --force to replace it",
            obj=str(output),
            field="--output",
            reason="OutputExists",
        )
    output.parent.mkdir(parents=True, exist_ok=True)
    return output


@dataclass(frozen=True)
class Inspected:
    """What a finished root filesystem holds, as the manifest records it."""

    packages: dict[str, str]
    os_info: OSInfo
    kernel: str | None
    images: list[PreloadedImage]


def inspect(root: Path, archives: dict[str, str]) -> Inspected:
    """Read packages, OS, kernel and the preload record from a root (or an extracted disk)."""
    return Inspected(
        packages=inspect_root.packages(root),
        os_info=inspect_root.os_release(root),
        kernel=inspect_root.kernel(root),
        images=preload.read_record(root, archives) if archives else [],
    )


class StagedBuild:
    """Log + work dir + staging sibling of ``output``; ``publish`` is the only way out.

    Used as a context manager: leaving it, by success or failure, removes the work and
    staging directories; only ``publish`` moves the staging directory to ``output``.
    """

    def __init__(self, label: str, output: Path, cache_dir: Path, work_parent: Path) -> None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        self.output = output
        self.log_path = cache_dir / "logs" / f"{label}-{stamp}-{os.getpid()}.log"
        self.progress = Progress(self.log_path)
        work_parent.mkdir(parents=True, exist_ok=True)
        prefix = f"nodesmith-{label.split('-')[0]}-"
        for stale in reclaim_stale(work_parent, prefix):
            self.progress.say(f"removed {stale}: left by a build that was killed")
        self.work = Path(tempfile.mkdtemp(prefix=prefix, dir=work_parent))
        self.staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.partial-", dir=output.parent))
        try:
            self._lock = hold(self.work, self.staging)
        except BaseException:
            remove_tree(self.work)
            shutil.rmtree(self.staging, ignore_errors=True)
            raise
        self._t0 = time.monotonic()

    def __enter__(self) -> StagedBuild:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.progress.close()
        remove_tree(self.work)
        shutil.rmtree(self.staging, ignore_errors=True)
        self._lock.close()

    def describe(self, found: dict[str, Path]) -> dict[str, Artifact]:
        """Checksums of the staged artifacts; also stops the clock for the manifest."""
        with self.progress.stage("checksums"):
            described = {fmt: artifacts.describe(p, self.staging) for fmt, p in found.items()}
        self.progress.timings["total"] = round(time.monotonic() - self._t0, 1)
        return described

    def publish(self, manifest: ImageManifest | None) -> Path:
        """Write manifest.json (a node image's) and build.log, then move the whole directory
        into place."""
        if manifest is not None:
            (self.staging / "manifest.json").write_text(manifest.to_json() + "\n", encoding="utf-8")
        self.progress.timings.setdefault("total", round(time.monotonic() - self._t0, 1))
        self.progress.say(f"total {self.progress.timings['total']:.1f}s")
        self.progress.close()
        shutil.copyfile(self.log_path, self.staging / "build.log")
        self.staging.chmod(0o755)  # mkdtemp made it 0700
        replace_dir(self.staging, self.output)
        return self.output
