"""The real kubeadm v1.20.2 (built from Debian's source) reads what nodesmith renders for it.

``kubeadm config images list --config`` decodes the init documents, converts them to
kubeadm's internal types and defaults them: the same path ``kubeadm init`` starts with. Its
strict decoder only *warns* about unknown fields in 1.20, so the test also fails on that
warning: a field kubeadm ignores is a setting the user silently lost.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from render_helpers import GENERATIONS, GOLDEN

CASES = [GOLDEN / f"{g}-v1beta2" / "init-control-plane.cloud-config" for g in GENERATIONS]


def _kubeadm_config(cloud_config: Path, path: str) -> str:
    doc = yaml.safe_load(cloud_config.read_text(encoding="utf-8"))
    return next(f["content"] for f in doc["write_files"] if f["path"] == path)


def _images_list(kubernetes_build: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """``kubeadm config images list --config``: decode, convert and default, as init does."""
    return subprocess.run(
        [str(kubernetes_build / "bin/kubeadm"), "config", "images", "list", "--config",
         str(config)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("golden", CASES, ids=[c.parent.name for c in CASES])
def test_real_kubeadm_reads_the_v1beta2_init_config(
    golden: Path, kubernetes_build: Path, tmp_path: Path
) -> None:
    config = tmp_path / "kubeadm.yaml"
    config.write_text(_kubeadm_config(golden, "/run/kubeadm/kubeadm.yaml"), encoding="utf-8")
    done = _images_list(kubernetes_build, config)
    assert done.returncode == 0, done.stderr
    assert "strict.go" not in done.stderr and "unknown field" not in done.stderr, done.stderr
    assert "k8s.gcr.io/kube-apiserver:v1.20.2" in done.stdout.split()


def test_real_kubeadm_reads_the_examples_and_names_the_preloaded_images(
    kubernetes_build: Path, tmp_path: Path
) -> None:
    """examples/ (the cluster scripts/main and the cluster test boot) asks kubeadm for
    exactly the images `nodesmith kubernetes build` packs, CoreDNS aside (no Debian package
    to build it from: its pods stay pending, which does not keep a Node from Ready)."""
    import json

    from bootstrap.render import RenderOptions
    from bootstrap.render.batch import render_all
    from bootstrap.render.loader import load_paths
    from bootstrap.render.resolve import Bundle

    repo = Path(__file__).resolve().parents[2]
    bundle = Bundle(load_paths([str(repo / "examples")]))
    batch = render_all(bundle, ["default/demo-cp-0"], RenderOptions())
    assert batch.worst is None
    rendered = tmp_path / "cp.cloud-config"
    rendered.write_bytes(batch.results[0].userdata)
    config = tmp_path / "kubeadm.yaml"
    config.write_text(_kubeadm_config(rendered, "/run/kubeadm/kubeadm.yaml"), encoding="utf-8")
    done = _images_list(kubernetes_build, config)
    assert done.returncode == 0, done.stderr
    wanted = set(done.stdout.split())
    built = json.loads((kubernetes_build / "build.json").read_text(encoding="utf-8"))
    packed = {image["ref"] for image in built["images"].values()}
    assert wanted - packed == {"k8s.gcr.io/coredns:1.7.0"}
    assert "strict.go" not in done.stderr, done.stderr
