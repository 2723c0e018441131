"""Image hygiene (image-builder's goss list) on the built root, through testinfra's chroot
backend, plus what the roles must leave there. Every check runs on both builders' roots: the
chroot builder's (roles over pyinfra's @chroot) and packer-qemu's (the same roles over SSH in
Packer's VM), so the two paths are held to one standard."""

from __future__ import annotations

from pathlib import Path

import pytest
import testinfra
import yaml

from bootstrap.image.containerd import config_version_for
from bootstrap.manifest import ImageManifest, load_manifest

pytestmark = pytest.mark.image


@pytest.fixture(scope="module", params=["built_root", "packer_root"], ids=["chroot", "packer"])
def host(request: pytest.FixtureRequest) -> testinfra.host.Host:
    root: Path = request.getfixturevalue(request.param)
    assert (root / "bin/sh").exists(), f"{root} is not a root filesystem"
    return testinfra.get_host(str(root), connection="chroot")


def test_no_login_users_left(host: testinfra.host.Host) -> None:
    """No build-time user (Packer's builder, its key, its sudo rule) ships in the image."""
    passwd = host.file("/etc/passwd").content_string
    users = [line.split(":") for line in passwd.splitlines() if line.count(":") == 6]
    assert any(u[0] == "root" for u in users)  # the file was really read
    assert [u[0] for u in users if 1000 <= int(u[2]) < 65534] == []
    assert host.run("ls -A /home").stdout.strip() == ""
    assert host.run("ls /etc/sudoers.d | grep -v '^README$'").stdout.strip() == ""
    assert host.run("find / -xdev -name authorized_keys 2>/dev/null").stdout.strip() == ""


def test_no_ssh_host_keys(host: testinfra.host.Host) -> None:
    assert host.run("ls /etc/ssh/ssh_host_* 2>/dev/null").stdout == ""
    assert host.file("/etc/ssh/sshd_config").exists  # the root is really there


def test_machine_id_empty(host: testinfra.host.Host) -> None:
    f = host.file("/etc/machine-id")
    assert f.exists and f.size == 0


def test_no_cloud_init_instance(host: testinfra.host.Host) -> None:
    assert not host.file("/var/lib/cloud/data/instance-id").exists
    assert not host.file("/var/lib/cloud/instance").exists


def test_var_log_small(host: testinfra.host.Host) -> None:
    mib = int(host.check_output("du -sm /var/log").split()[0])
    assert mib <= 200


def test_no_core_dumps_or_apt_lists(host: testinfra.host.Host) -> None:
    dumps = host.run(
        "find /var/crash /var/lib/systemd/coredump /tmp /var/tmp -type f -name 'core*' 2>/dev/null"
    ).stdout.strip()
    assert dumps == ""
    assert host.check_output("ls /var/lib/apt/lists | grep -c Packages || true") == "0"


@pytest.fixture
def manifest(request: pytest.FixtureRequest) -> ImageManifest:
    """The manifest of the image whose root ``host`` is."""
    root = request.node.callspec.params["host"]
    image = {"built_root": "built_image", "packer_root": "packer_image"}[root]
    return load_manifest(request.getfixturevalue(image) / "manifest.json")


@pytest.fixture
def config_dump(host: testinfra.host.Host) -> str:
    """What the root's own containerd makes of its config.toml."""
    res = host.run("containerd --config /etc/containerd/config.toml config dump")
    assert res.rc == 0, res.stderr
    return str(res.stdout).replace("'", '"')


#: What each root's build asked for: images/debian-12.yaml's list (every target the roles
#: support) and the qemu image's ``--datasources NoCloud``.
DATASOURCES = {
    "built_root": ("NoCloud", "ConfigDrive", "OpenStack", "Ec2", "GCE", "Azure"),
    "packer_root": ("NoCloud",),
}


def test_cloud_init_tries_the_builds_datasources_then_none(
    host: testinfra.host.Host, manifest: ImageManifest, request: pytest.FixtureRequest
) -> None:
    """cloud-init's datasource_list is set in one file and names exactly the build's
    datasources, then None, as the manifest records them: every target by default (the
    chroot build), NoCloud alone for the qemu image (the packer build, ``--datasources``)."""
    wanted = DATASOURCES[request.node.callspec.params["host"]]
    setters = host.run("grep -l '^datasource_list' /etc/cloud/cloud.cfg /etc/cloud/cloud.cfg.d/*")
    assert setters.stdout.split() == ["/etc/cloud/cloud.cfg.d/90_dpkg.cfg"]
    cfg = yaml.safe_load(host.file("/etc/cloud/cloud.cfg.d/90_dpkg.cfg").content_string)
    assert cfg["datasource_list"] == [*wanted, "None"]
    assert manifest.cloud_init is not None and tuple(manifest.cloud_init.datasources) == wanted


def test_containerd_enabled_and_configured(
    host: testinfra.host.Host, manifest: ImageManifest, config_dump: str
) -> None:
    """The manifest says which containerd and config version: the root holds exactly those,
    and its containerd reads the file (chroot: Debian 12's 1.6, version 2; packer: 2.x from a
    dir: source, version 3)."""
    assert host.service("containerd").is_enabled
    cfg = host.file("/etc/containerd/config.toml")
    assert cfg.mode == 0o644
    version = host.package("containerd").version
    assert version == manifest.runtime.version
    config_version = manifest.runtime.config_version
    assert config_version == config_version_for(version)
    assert cfg.content_string.splitlines()[1] == f"version = {config_version}"
    assert f"version = {config_version}\n" in config_dump
    assert "SystemdCgroup = true" in config_dump
    sandbox = "sandbox_image" if config_version == 2 else "sandbox"
    assert f'{sandbox} = "registry.k8s.io/pause:3.10"' in config_dump
    assert host.file("/etc/crictl.yaml").contains("unix:///run/containerd/containerd.sock")
    assert host.package("runc").is_installed


def test_node_can_join_an_isolated_network(host: testinfra.host.Host, config_dump: str) -> None:
    """What a real kubeadm join needed (found on the first real cluster): CNI plugins where
    containerd looks for them, ethtool for kubeadm's preflight, and a resolv.conf even when
    no DHCP server hands one out (the kubelet cannot create a pod sandbox without it)."""
    v3 = "version = 3\n" in config_dump  # containerd 2.x: a list of directories
    cni = 'bin_dirs = ["/usr/lib/cni"]' if v3 else 'bin_dir = "/usr/lib/cni"'
    assert cni in config_dump and 'conf_dir = "/etc/cni/net.d"' in config_dump
    assert host.package("containernetworking-plugins").is_installed
    for plugin in ("bridge", "host-local", "loopback", "portmap"):
        assert host.file(f"/usr/lib/cni/{plugin}").mode & 0o111, plugin
    assert host.exists("ethtool")
    resolv = host.file("/etc/resolv.conf")
    assert resolv.is_file and not resolv.is_symlink
    assert "nameserver" not in resolv.content_string  # not the build host's


def test_kubelet_state(host: testinfra.host.Host) -> None:
    # The dir: source held only kubectl (kubelet cannot be downloaded here), so no kubelet
    # unit may exist; when it does, it must be enabled and not running.
    if host.file("/usr/bin/kubelet").exists:
        assert host.service("kubelet").is_enabled
        assert not host.service("kubelet").is_running
    else:
        assert not host.file("/usr/lib/systemd/system/kubelet.service").exists
    assert host.file("/usr/bin/kubectl").mode == 0o755
    assert host.file("/etc/kubernetes-version").content_string.startswith("v1.")


def test_node_settings(host: testinfra.host.Host) -> None:
    assert host.file("/etc/modules-load.d/kubernetes.conf").content_string.split() == [
        "overlay",
        "br_netfilter",
    ]
    sysctl = host.file("/etc/sysctl.d/99-kubernetes.conf").content_string
    for line in (
        "net.bridge.bridge-nf-call-iptables = 1",
        "net.ipv4.ip_forward = 1",
        "vm.overcommit_memory = 1",
        "kernel.panic = 10",
    ):
        assert line in sysctl
    assert "swap" not in host.file("/etc/fstab").content_string.replace("# ", "#").split("#")[0]
    for pkg in (
        "chrony",
        "conntrack",
        "socat",
        "ebtables",
        "e2fsprogs",
        "cloud-guest-utils",
        "locales",
        "dbus",
        "sudo",
        "openssh-server",
        "cloud-init",
    ):
        assert host.package(pkg).is_installed, pkg
    assert host.exists("resize2fs") and host.exists("growpart")
    assert host.service("chrony").is_enabled


def test_packages_held(host: testinfra.host.Host) -> None:
    held = host.check_output("apt-mark showhold").split()
    assert "containerd" in held and "runc" in held


def test_grub_for_both_firmwares(built_root: Path) -> None:
    assert (built_root / "boot/grub/grub.cfg").read_text().count("root=UUID=") == 1
    assert (built_root / "boot/grub/i386-pc/normal.mod").is_file()
    assert (built_root / "boot/grub/x86_64-efi/normal.mod").is_file()


def test_first_boot_skips_what_the_build_did(host: testinfra.host.Host) -> None:
    """ConditionNeedsUpdate units (ldconfig, systemd-update-done...) find /usr not newer than
    the stamps, and e2scrub_reap (LVM snapshots: none here) is off."""
    usr = int(host.check_output("stat -c %Y /usr"))
    for stamp in ("/etc/.updated", "/var/.updated"):
        assert int(host.check_output(f"stat -c %Y {stamp}")) >= usr, stamp
    assert host.run("systemctl is-enabled e2scrub_reap.service").stdout.strip() == "disabled"
