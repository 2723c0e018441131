"""cloud-init role: the datasources nodesmith images boot on, growpart and /etc/hosts.

The build's datasources (``--datasources``; by default every target: NoCloud for the qemu
seed and Vagrant, ConfigDrive/OpenStack, Ec2, GCE, Azure), then None so a boot without any
datasource still comes up. An image built for one target names only its own: with one
datasource before None, ds-identify takes it without probing and cloud-init's local stage
searches no other. growpart + resize_rootfs grow the root on first boot;
manage_etc_hosts makes sudo resolve the hostname cloud-init sets.
"""

from io import StringIO

from pyinfra import host
from pyinfra.operations import apt, files

from bootstrap.image.defaults import DEFAULTS

DATASOURCES = str(host.data.get("datasources", ",".join(DEFAULTS.datasources))).split(",")

apt.packages(
    name="cloud-init packages", packages=["cloud-init", "cloud-guest-utils"], no_recommends=True
)

files.put(
    name="datasource list",
    src=StringIO(
        "# Written by nodesmith (roles/cloud_init.py).\n"
        f"datasource_list: [ {', '.join([*DATASOURCES, 'None'])} ]\n"
    ),
    dest="/etc/cloud/cloud.cfg.d/90_dpkg.cfg",
    mode="0644",
    user="root",
    group="root",
)
files.put(
    name="nodesmith cloud-init defaults",
    src=StringIO(
        "# Written by nodesmith (roles/cloud_init.py).\n"
        "growpart:\n  mode: auto\n  devices: ['/']\n"
        "resize_rootfs: true\n"
        "manage_etc_hosts: true\n"
        "locale: en_US.UTF-8\n"
    ),
    dest="/etc/cloud/cloud.cfg.d/91_nodesmith.cfg",
    mode="0644",
    user="root",
    group="root",
)
# ifupdown reads the interface files cloud-init renders into interfaces.d.
files.put(
    name="network interfaces",
    src=StringIO(
        "# Written by nodesmith; cloud-init renders interfaces.d/50-cloud-init\n"
        "auto lo\niface lo inet loopback\n\nsource /etc/network/interfaces.d/*\n"
    ),
    dest="/etc/network/interfaces",
    mode="0644",
    user="root",
    group="root",
)
files.directory(
    name="interfaces.d", path="/etc/network/interfaces.d", mode="0755", user="root", group="root"
)
