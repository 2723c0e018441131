"""sysprep role: make the root safe to clone. Runs last.

Empties machine-id, removes SSH host keys (a drop-in regenerates them on first boot even
without cloud-init), cleans cloud-init state, holds the runtime and Kubernetes packages,
empties apt lists and caches, truncates logs, resets hostname/hosts and temp dirs.
"""

from io import StringIO

from pyinfra import host
from pyinfra.operations import files, server

HOLD = ["containerd", "runc", "crun", "kubelet", "kubeadm", "kubectl", "kubernetes-cni"]
LIVE = str(host.data.get("live", "false")).lower() == "true"
RESOLV_FALLBACK = (
    "# Written by nodesmith (roles/sysprep.py): no DNS server is known yet.\n"
    "# dhclient replaces this file when DHCP offers one; cloud-init's network config may too.\n"
)

server.shell(
    name="hold runtime and kubernetes packages",
    commands=[
        "for p in " + " ".join(HOLD) + "; do "
        "if dpkg-query -W -f='${Status}' \"$p\" 2>/dev/null | grep -q 'ok installed'; "
        'then apt-mark hold "$p"; fi; done',
    ],
)

files.directory(
    name="ssh drop-in dir",
    path="/etc/systemd/system/ssh.service.d",
    mode="0755",
    user="root",
    group="root",
)
files.put(
    name="ssh host keys regenerated on first boot",
    src=StringIO(
        "[Service]\nExecStartPre=\nExecStartPre=/usr/bin/ssh-keygen -A\n"
        "ExecStartPre=/usr/sbin/sshd -t\n"
    ),
    dest="/etc/systemd/system/ssh.service.d/10-hostkeys.conf",
    mode="0644",
    user="root",
    group="root",
)

files.put(
    name="hostname",
    src=StringIO("localhost\n"),
    dest="/etc/hostname",
    mode="0644",
    user="root",
    group="root",
)
files.put(
    name="hosts",
    src=StringIO("127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"),
    dest="/etc/hosts",
    mode="0644",
    user="root",
    group="root",
)

server.shell(
    name="clean for cloning",
    commands=[
        "cloud-init clean --logs || true",
        "rm -rf /var/lib/cloud/* /var/run/cloud-init",
        "rm -f /etc/ssh/ssh_host_*",
        "rm -f /root/.ssh/authorized_keys /root/.bash_history",
        "truncate -s 0 /etc/machine-id",
        "rm -f /var/lib/dbus/machine-id",
        "ln -s /etc/machine-id /var/lib/dbus/machine-id",
        "apt-get clean",
        "rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin",
        "rm -f /etc/udev/rules.d/70-persistent-net.rules",
        "find /var/log -type f \\( -name '*.gz' -o -name '*.[0-9]' -o -name '*.old' \\) -delete",
        "find /var/log -type f -exec truncate -s 0 {} +",
        "rm -rf /var/log/journal/*",
        "rm -rf /tmp/* /tmp/.[!.]* /var/tmp/* 2>/dev/null || true",
        "rm -f /var/crash/* /var/lib/systemd/coredump/* 2>/dev/null || true",
    ],
)

# A clone's first boot skips the "/usr was updated" work the build already did (units with
# ConditionNeedsUpdate: ldconfig, systemd-update-done, the journal catalog, the hwdb): the
# stamps carry /usr's own time, as systemd-update-done writes them. Under TCG ldconfig alone
# was 3 s of a node's first boot.
server.shell(name="update stamps", commands=["touch -r /usr /etc/.updated /var/.updated"])

# The build host's (or builder VM's) resolv.conf must not ship. dhclient writes the node's
# when DHCP offers DNS; on an isolated network nothing does, and the kubelet cannot create a
# pod sandbox without the file. So the image ships one without nameservers.
server.shell(name="drop build resolv.conf", commands=["rm -f /etc/resolv.conf"])
files.put(
    name="fallback resolv.conf",
    src=StringIO(RESOLV_FALLBACK),
    dest="/etc/resolv.conf",
    mode="0644",
    user="root",
    group="root",
)

if LIVE:
    server.shell(
        name="journal vacuum",
        commands=["journalctl --rotate || true", "journalctl --vacuum-time=1s || true"],
    )
