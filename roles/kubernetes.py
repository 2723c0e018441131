"""kubernetes role: kubelet, kubeadm and kubectl at exactly the requested version.

Sources (host data ``kubernetes_source``): ``pkgs`` (pkgs.k8s.io apt repo, pinned
``<ver>-1.1`` and held), ``http`` (dl.k8s.io, each binary checked against its ``.sha256``),
``dir`` (``kubernetes_dir`` on the controller with a SHA256SUMS, verified before any
operation is added), ``none``. kubelet ends enabled, not started; /etc/kubernetes-version
records the version.
"""

import urllib.request
from io import StringIO
from pathlib import Path

from pyinfra import host
from pyinfra.operations import apt, files, server

from bootstrap.image.defaults import DEFAULTS
from bootstrap.image.kubernetes import (
    BINARIES,
    HTTP_BASE,
    PKGS_BASE,
    deb_version,
    series,
    verify_dir,
)

SOURCE = str(host.data.get("kubernetes_source", DEFAULTS.kubernetes_source))
VERSION = str(host.data.get("kubernetes_version", DEFAULTS.kubernetes_version))
APT_UPDATE = str(host.data.get("apt_update", "false")).lower() == "true"

KUBELET_UNIT = """[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target containerd.service
After=network-online.target containerd.service

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
"""

KUBEADM_DROPIN = """# Note: This dropin only works with kubeadm and kubelet v1.11+
[Unit]
# Until kubeadm init/join writes the config, the kubelet can only fail; restarted every 10 s
# it burns seconds of CPU per start (minutes under TCG) while kubeadm needs them.
ConditionPathExists=/var/lib/kubelet/config.yaml

[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
# kubeadm init/join writes this at runtime, populating KUBELET_KUBEADM_ARGS dynamically
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
# Users override kubelet arguments with KUBELET_EXTRA_ARGS in this file
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"""  # noqa: E501


def _unit_files() -> None:
    files.put(
        name="kubelet unit",
        src=StringIO(KUBELET_UNIT),
        dest="/usr/lib/systemd/system/kubelet.service",
        mode="0644",
        user="root",
        group="root",
    )
    files.directory(
        name="kubelet drop-in dir",
        path="/usr/lib/systemd/system/kubelet.service.d",
        mode="0755",
        user="root",
        group="root",
    )
    files.put(
        name="10-kubeadm.conf",
        src=StringIO(KUBEADM_DROPIN),
        dest="/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf",
        mode="0644",
        user="root",
        group="root",
    )


installed: list[str] = []

if SOURCE == "dir":
    found = verify_dir(Path(str(host.data.get("kubernetes_dir"))))
    for name, path in found.items():
        files.put(
            name=f"{name} from dir",
            src=str(path),
            dest=f"/usr/bin/{name}",
            mode="0755",
            user="root",
            group="root",
        )
        installed.append(name)
    if "kubelet" in found:
        _unit_files()
elif SOURCE == "http":
    for name in BINARIES:
        url = f"{HTTP_BASE}/{VERSION}/bin/linux/amd64/{name}"
        with urllib.request.urlopen(f"{url}.sha256", timeout=30) as resp:
            digest = resp.read().decode().split()[0]
        files.download(
            name=f"{name} from dl.k8s.io",
            src=url,
            dest=f"/usr/bin/{name}",
            sha256sum=digest,
            mode="0755",
            user="root",
            group="root",
        )
        installed.append(name)
    _unit_files()
elif SOURCE == "pkgs":
    repo = f"{PKGS_BASE}/{series(VERSION)}/deb/"
    files.directory(
        name="apt keyrings", path="/etc/apt/keyrings", mode="0755", user="root", group="root"
    )
    files.download(
        name="pkgs.k8s.io key",
        src=f"{repo}Release.key",
        dest="/etc/apt/keyrings/kubernetes-apt-keyring.asc",
        mode="0644",
        user="root",
        group="root",
    )
    files.put(
        name="kubernetes apt source",
        src=StringIO(
            f"Types: deb\nURIs: {repo}\nSuites: /\n"
            "Signed-By: /etc/apt/keyrings/kubernetes-apt-keyring.asc\n"
        ),
        dest="/etc/apt/sources.list.d/kubernetes.sources",
        mode="0644",
        user="root",
        group="root",
    )
    apt.update(name="apt update (kubernetes)")
    pin = deb_version(VERSION)
    apt.packages(
        name="kubelet kubeadm kubectl",
        no_recommends=True,
        packages=[f"{b}={pin}" for b in BINARIES],
    )
    installed += list(BINARIES)
elif SOURCE != "none":
    raise ValueError(f"kubernetes_source must be pkgs, http, dir or none (got {SOURCE!r})")

if installed:
    files.put(
        name="/etc/kubernetes-version",
        src=StringIO(f"{VERSION}\n"),
        dest="/etc/kubernetes-version",
        mode="0644",
        user="root",
        group="root",
    )
    files.directory(
        name="/etc/kubernetes", path="/etc/kubernetes", mode="0755", user="root", group="root"
    )
if "kubelet" in installed:
    files.put(
        name="/etc/default/kubelet",
        src=StringIO("KUBELET_EXTRA_ARGS=\n"),
        dest="/etc/default/kubelet",
        mode="0644",
        user="root",
        group="root",
    )
    files.directory(
        name="/var/lib/kubelet", path="/var/lib/kubelet", mode="0700", user="root", group="root"
    )
    # Enabled so kubeadm's kubelet comes up after join; not started: it has no config yet.
    server.shell(name="kubelet enabled, not started", commands=["systemctl enable kubelet"])
