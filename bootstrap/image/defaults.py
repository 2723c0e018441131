"""What an image build uses when neither the command line nor the definition's ``defaults:`` says.

One table, so the ``image`` CLI, ``local-cluster`` and the roles cannot drift apart: bumping
the default Kubernetes version or pause image is one edit here. It imports nothing, so the
light paths (``vm``, the roles) can read it without loading the image builder.

Example::

    >>> DEFAULTS.kubernetes_version
    'v1.31.4'
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ImageDefaults:
    """The fallback of each build option (the fields of ``definition.Options`` they feed)."""

    kubernetes_version: str = "v1.31.4"
    kubernetes_source: str = "none"
    runtime: str = "containerd"
    oci_runtime: str = "runc"
    sandbox_image: str = "registry.k8s.io/pause:3.10"
    formats: tuple[str, ...] = ("qcow2",)
    builder: str = "chroot"
    # Every target the roles support, in the order cloud-init tries them; an image built for
    # one target names only its own (``--datasources``), so first boot probes nothing else.
    datasources: tuple[str, ...] = ("NoCloud", "ConfigDrive", "OpenStack", "Ec2", "GCE", "Azure")


DEFAULTS = ImageDefaults()
