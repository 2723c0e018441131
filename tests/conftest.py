"""Shared fixtures for the whole suite.

``built_image`` (tests/image_build.py) is the one real Debian 12 image build of a session;
tests/image and the VM tests both use it. ``kubernetes_build`` is the real Kubernetes v1.20.2
that ``nodesmith kubernetes build`` (run by scripts/setup) built from Debian's source.
"""

from pathlib import Path

import pytest
from image_build import built_image, cluster_image, cluster_image_debian13, controller_image

from bootstrap.kubernetes.build import current, verify

__all__ = [
    "built_image",
    "cluster_image",
    "cluster_image_debian13",
    "controller_image",
    "kubernetes_build",
]


@pytest.fixture(scope="session")
def kubernetes_build() -> Path:
    """The cached Kubernetes build (bin/, images/), checked against its SHA256SUMS."""
    found = current()
    if found is None:
        pytest.fail("no Kubernetes build on this machine: run scripts/setup (it builds it)")
    verify(found)
    return found.path
