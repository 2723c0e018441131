"""node role: kernel modules, image-builder sysctls, swap off, the base node packages.

Runs over @chroot (image build) and @ssh (Packer); ``live=true`` also applies modules and
sysctls to the running kernel. Packages are a no-op when the root already has them.
"""

from io import StringIO

from pyinfra import host
from pyinfra.operations import apt, files, server

LIVE = str(host.data.get("live", "false")).lower() == "true"
APT_UPDATE = str(host.data.get("apt_update", "false")).lower() == "true"

NODE_PACKAGES = [
    "chrony",
    "conntrack",
    "socat",
    "ebtables",
    "iptables",
    "e2fsprogs",
    "cloud-guest-utils",
    "fdisk",
    "locales",
    "dbus",
    "sudo",
    "ca-certificates",
    "curl",
    "openssh-server",
    "ethtool",  # kubeadm's preflight looks for it
]

SYSCTLS = {
    "net.bridge.bridge-nf-call-iptables": "1",
    "net.bridge.bridge-nf-call-ip6tables": "1",
    "net.ipv4.ip_forward": "1",
    "net.ipv6.conf.all.forwarding": "1",
    "net.ipv6.conf.all.disable_ipv6": "0",
    "net.ipv4.tcp_congestion_control": "bbr",
    "vm.overcommit_memory": "1",
    "kernel.panic": "10",
    "kernel.panic_on_oops": "1",
    "fs.inotify.max_user_instances": "8192",
    "fs.inotify.max_user_watches": "524288",
}

if APT_UPDATE:
    apt.update(name="apt update", cache_time=3600)

apt.packages(
    name="node packages",
    packages=NODE_PACKAGES,
    no_recommends=True,
    extra_install_args="-o Dpkg::Options::=--force-confold",
)

files.put(
    name="kernel modules for containers (overlay, br_netfilter)",
    src=StringIO("overlay\nbr_netfilter\n"),
    dest="/etc/modules-load.d/kubernetes.conf",
    mode="0644",
    user="root",
    group="root",
)
# bbr needs its module loaded before sysctl applies the setting at boot.
files.put(
    name="tcp_bbr module",
    src=StringIO("tcp_bbr\n"),
    dest="/etc/modules-load.d/tcp-bbr.conf",
    mode="0644",
    user="root",
    group="root",
)
files.put(
    name="image-builder sysctls",
    src=StringIO("".join(f"{k} = {v}\n" for k, v in SYSCTLS.items())),
    dest="/etc/sysctl.d/99-kubernetes.conf",
    mode="0644",
    user="root",
    group="root",
)

server.shell(
    name="swap off in fstab",
    commands=[
        "sed -i -E 's@^([^#].*[[:space:]]swap[[:space:]].*)$@# \\1@' /etc/fstab 2>/dev/null || true"
    ],
)

files.line(
    name="en_US.UTF-8 in locale.gen",
    path="/etc/locale.gen",
    line="^# *en_US.UTF-8 UTF-8",
    replace="en_US.UTF-8 UTF-8",
)
server.shell(name="locale-gen", commands=["locale-gen", "update-locale LANG=en_US.UTF-8"])

server.shell(name="chrony enabled", commands=["systemctl enable chrony"])
# apt-daily and unattended upgrades must not change a node behind the cluster's back.
server.shell(
    name="apt timers masked",
    commands=["systemctl mask apt-daily.timer apt-daily-upgrade.timer"],
)
# e2scrub_reap removes stale e2scrub snapshots of LVM volumes at every boot; an image's disk
# has no LVM, and under TCG the check was 3 s of its first boot. (The weekly e2scrub_all
# timer stays; on a host with LVM, apply-roles leaves only the reaping of old snapshots off.)
server.shell(
    name="e2scrub_reap disabled",
    commands=["systemctl disable e2scrub_reap.service 2>/dev/null || true"],
)

if LIVE:
    server.shell(name="swapoff", commands=["swapoff -a"])
    server.shell(name="load modules", commands=["modprobe overlay", "modprobe br_netfilter"])
    server.shell(name="apply sysctls", commands=["sysctl --system"])
