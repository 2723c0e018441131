"""containerd role: Debian's containerd 1.6 with a CRI config for kubeadm, runc or crun.

config.toml is version 2 (containerd < 2.0): systemd cgroups, a pinned sandbox (pause)
image, registry hosts under /etc/containerd/certs.d, and CNI plugins from Debian's
containernetworking-plugins (/usr/lib/cni, not the upstream /opt/cni/bin); /etc/crictl.yaml
points at the socket.
"""

from io import StringIO

from pyinfra import host
from pyinfra.operations import apt, files, server

from bootstrap.image.defaults import DEFAULTS

LIVE = str(host.data.get("live", "false")).lower() == "true"
OCI = str(host.data.get("oci_runtime", DEFAULTS.oci_runtime))
SANDBOX = str(host.data.get("sandbox_image", DEFAULTS.sandbox_image))
SOCKET = "/run/containerd/containerd.sock"

if OCI not in ("runc", "crun"):
    raise ValueError(f"oci_runtime must be runc or crun (got {OCI!r})")

packages = ["containerd", "runc", "containernetworking-plugins"] + (
    ["crun"] if OCI == "crun" else []
)
CNI_BIN = "/usr/lib/cni"  # where Debian's containernetworking-plugins installs them
apt.packages(name="containerd packages", packages=packages, no_recommends=True)

BINARY = "/usr/bin/crun" if OCI == "crun" else ""
CONFIG = f"""# Written by nodesmith (roles/containerd.py). containerd 1.6: config version 2.
version = 2
imports = ["/etc/containerd/conf.d/*.toml"]

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{SANDBOX}"

[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
  BinaryName = "{BINARY}"

[plugins."io.containerd.grpc.v1.cri".registry]
  config_path = "/etc/containerd/certs.d"

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "{CNI_BIN}"
  conf_dir = "/etc/cni/net.d"
"""

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
