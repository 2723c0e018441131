# Packer (>= 1.6.6, HCL2) GCE template: starts from the debian-12 image family and runs the
# nodesmith roles over Packer's SSH connection (nodesmith image apply-roles --ssh).
# Only validated on the nodesmith CI machine (no cloud access there).

variable "project_id" {
  type    = string
  default = "my-project"
}
variable "zone" {
  type    = string
  default = "europe-west1-b"
}
variable "machine_type" {
  type    = string
  default = "e2-standard-2"
}

source "googlecompute" "node" {
  project_id              = var.project_id
  zone                    = var.zone
  machine_type            = var.machine_type
  source_image_family     = "debian-12"
  source_image_project_id = ["debian-cloud"]
  image_name              = "nodesmith-debian-12-node-${formatdate("YYYYMMDDhhmmss", timestamp())}"
  image_family            = "nodesmith-debian-12-node"
  disk_size               = 10
  ssh_username            = "nodesmith"
}

build {
  sources = ["source.googlecompute.node"]

  # The throw-away key Packer generated reaches nodesmith in the environment, not argv.
  # The image boots on GCE alone: cloud-init probes no other datasource at first boot
  # (a --datasources in role_args wins).
  provisioner "shell-local" {
    environment_vars = ["NODESMITH_SSH_PRIVATE_KEY=${build.SSHPrivateKey}"]
    inline = [
      "${var.nodesmith} image apply-roles --ssh ${build.Host} --ssh-port ${build.Port} --ssh-user ${build.User} --datasources GCE ${local.cloud_role_args}",
    ]
  }
}
