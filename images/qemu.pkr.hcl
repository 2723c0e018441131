# Packer (>= 1.6.6, HCL2) qemu template: boots a nodesmith base disk (disk_image = true) and
# runs the SAME pyinfra roles as the chroot builder over Packer's SSH connection, through
# `nodesmith image apply-roles --ssh` in a shell-local provisioner.
#
# `nodesmith image build --builder packer-qemu` fills every variable: it builds the base disk
# (rootfs + GRUB, no roles), a NoCloud seed with a throw-away builder key, and picks a free
# port on 127.0.0.1. Hand use, from images/ (one configuration with variables.pkr.hcl):
#   packer build -only=qemu.node -var base_disk=... -var seed_iso=... -var ssh_private_key_file=... .

variable "base_disk" {
  type        = string
  default     = "base.qcow2"
  description = "qcow2 base disk to boot (a nodesmith chroot build)"
}
variable "base_disk_checksum" {
  type    = string
  default = "none"
}
variable "seed_iso" {
  type        = string
  default     = "seed.iso"
  description = "NoCloud seed (cidata) creating the builder user with ssh_public_key"
}
variable "output_directory" {
  type    = string
  default = "output-qemu"
}
variable "vm_name" {
  type    = string
  default = "image.qcow2"
}
variable "accelerator" {
  type        = string
  default     = "tcg"
  description = "tcg where KVM cannot run stock kernels (PVM hosts); kvm elsewhere"
}
variable "ssh_username" {
  type    = string
  default = "builder"
}
variable "ssh_private_key_file" {
  type        = string
  default     = ""
  description = "private key whose public half seed_iso authorizes; a build needs it (empty only lets `packer validate .` run bare)"
}
variable "ssh_port" {
  type    = number
  default = 2222
}
variable "disk_size" {
  type    = string
  default = "4096M"
}
variable "restrict_guest_network" {
  type        = string
  default     = "on"
  description = "qemu user-net restrict: on keeps the VM offline (the base disk has every .deb); off for pkgs.k8s.io or a --mirror"
}

source "qemu" "node" {
  disk_image       = true
  iso_url          = var.base_disk
  iso_checksum     = var.base_disk_checksum
  output_directory = var.output_directory
  vm_name          = var.vm_name
  format           = "qcow2"
  # nodesmith compresses the published qcow2 itself (zstd, parallel) from the raw it converts
  # for inspection anyway: Packer's compaction and zlib compression would be another two
  # passes over the disk, the second on one core for over a minute.
  disk_compression     = false
  skip_compaction      = true
  disk_size            = var.disk_size
  accelerator          = var.accelerator
  cpus                 = 2
  memory               = 2048
  headless             = true
  net_device           = "virtio-net"
  disk_interface       = "virtio"
  communicator         = "ssh"
  ssh_username         = var.ssh_username
  ssh_private_key_file = var.ssh_private_key_file
  ssh_timeout          = "20m"
  host_port_min        = var.ssh_port
  host_port_max        = var.ssh_port
  # The builder user (and its key) must not ship: removed, with cloud-init's traces, last.
  shutdown_command = "sudo sh -c 'userdel --force --remove ${var.ssh_username}; rm -f /etc/sudoers.d/90-cloud-init-users; cloud-init clean --logs; shutdown -P now'"
  # Own netdev: SSH forward bound to loopback only; the guest offline unless asked otherwise.
  qemuargs = [
    ["-netdev", "user,id=user.0,restrict=${var.restrict_guest_network},hostfwd=tcp:127.0.0.1:${var.ssh_port}-:22"],
    ["-device", "virtio-net-pci,netdev=user.0"],
    # cache=unsafe: the guest's flushes (dpkg syncs after every package) stop at qemu; the
    # disk is complete once qemu exits after the shutdown, which is all a build needs.
    ["-drive", "file=${var.output_directory}/${var.vm_name},if=virtio,cache=unsafe,discard=unmap,format=qcow2"],
    ["-drive", "file=${var.seed_iso},if=virtio,format=raw,readonly=on"],
    ["-serial", "file:${var.output_directory}/serial.log"],
  ]
}

build {
  sources = ["source.qemu.node"]

  provisioner "shell-local" {
    inline = [
      "${var.nodesmith} image apply-roles --ssh 127.0.0.1 --ssh-port ${var.ssh_port} --ssh-user ${var.ssh_username} --ssh-key ${var.ssh_private_key_file} ${local.qemu_role_args}",
    ]
  }
}
