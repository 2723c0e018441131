"""Booting nodes for real: qemu VMs, their NoCloud seeds and SSH access, the readiness suite.

``qemu`` starts and stops VMs (their seed ISO and SSH keys come from the shared top-level
``bootstrap.seed`` and ``bootstrap.sshkeys``); ``accel`` picks KVM or TCG; ``netns`` isolates
libvirt; ``verify`` runs the testinfra suite; ``local_cluster`` writes the bundle the
Vagrantfile boots. No argparse here: the commands live in ``bootstrap.cli``.
"""
