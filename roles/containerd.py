"""containerd role: the suite's containerd (or a checked .deb) with a CRI config for kubeadm.

config.toml is in the version that containerd reads (bootstrap.image.containerd: 2 for 1.x,
3 for 2.x, decided by the build before anything is installed): systemd cgroups, a pinned
sandbox (pause) image, registry hosts under /etc/containerd/certs.d, and CNI plugins from
Debian's containernetworking-plugins (/usr/lib/cni, not the upstream /opt/cni/bin);
/etc/crictl.yaml points at the socket. runc or crun.
"""

import shlex
from io import StringIO
from pathlib import Path

from pyinfra import host
from pyinfra.operations import apt, files, server

from bootstrap.image.containerd import config_toml
from bootstrap.image.defaults import DEFAULTS

LIVE = str(host.data.get("live", "false")).lower() == "true"
OCI = str(host.data.get("oci_runtime", DEFAULTS.oci_runtime))
SANDBOX = str(host.data.get("sandbox_image", DEFAULTS.sandbox_image))
SOCKET = "/run/containerd/containerd.sock"
CONFIG_VERSION = int(host.data.get("containerd_config_version", 2))
DEB = str(host.data.get("containerd_deb", ""))
VERSION = str(host.data.get("containerd_version", ""))  # when the build resolved it

if OCI not in ("runc", "crun"):
    raise ValueError(f"oci_runtime must be runc or crun (got {OCI!r})")

packages = ["runc", "containernetworking-plugins"] + (["crun"] if OCI == "crun" else [])
if DEB:  # a containerd .deb from a dir: source (sha256 checked by the build): not the suite's
    staged = shlex.quote(f"/var/tmp/{Path(DEB).name}")
    files.put(name="containerd .deb", src=DEB, dest=f"/var/tmp/{Path(DEB).name}", mode="0644")
    apt.packages(name="containerd dependencies", packages=packages, no_recommends=True)
    # apt resolves its dependencies and leaves the same version alone (a second apply-roles
    # neither reinstalls it nor restarts a running containerd).
    server.shell(
        name=f"containerd from {Path(DEB).name}",
        commands=[
            f"DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {staged}",
            f"rm -f {staged}",
        ],
    )
else:
    packages.insert(0, "containerd")
    apt.packages(name="containerd packages", packages=packages, no_recommends=True)

BINARY = "/usr/bin/crun" if OCI == "crun" else ""
CONFIG = config_toml(CONFIG_VERSION, SANDBOX, BINARY, VERSION)

for d in ("/etc/containerd", "/etc/containerd/conf.d", "/etc/containerd/certs.d"):
    files.directory(name=f"{d}", path=d, mode="0755", user="root", group="root")

config = files.put(
    name="containerd config.toml",
    src=StringIO(CONFIG),
    dest="/etc/containerd/config.toml",
    mode="0644",
    user="root",
    group="root",
)

files.directory(
    name="containerd drop-in dir",
    path="/etc/systemd/system/containerd.service.d",
    mode="0755",
    user="root",
    group="root",
)
files.put(
    name="containerd limits drop-in",
    src=StringIO("[Service]\nOOMScoreAdjust=-999\nTasksMax=infinity\nLimitNOFILE=1048576\n"),
    dest="/etc/systemd/system/containerd.service.d/10-nodesmith.conf",
    mode="0644",
    user="root",
    group="root",
)

files.put(
    name="crictl config",
    src=StringIO(
        f"runtime-endpoint: unix://{SOCKET}\nimage-endpoint: unix://{SOCKET}\ntimeout: 10\n"
    ),
    dest="/etc/crictl.yaml",
    mode="0644",
    user="root",
    group="root",
)

server.shell(name="containerd enabled", commands=["systemctl enable containerd"])

if LIVE:
    server.shell(
        name="containerd restarted",
        commands=["systemctl daemon-reload", "systemctl restart containerd"],
    )
