# Variables every build in this configuration shares. images/ is ONE Packer configuration:
# run Packer on the directory and pick a build with -only, e.g.
#   packer validate .
#   packer build -only=qemu.node -var base_disk=... -var seed_iso=... -var ssh_private_key_file=... .
#   packer build -only=amazon-ebs.node -var region=eu-central-1 .
# (`nodesmith image build --builder packer-qemu` runs the qemu build this way and fills its
# variables.) Each builder's own variables live beside its source, in <builder>.pkr.hcl.

variable "nodesmith" {
  type        = string
  default     = "nodesmith"
  description = "path of the nodesmith command that runs the roles (nodesmith image apply-roles)"
}

variable "role_args" {
  type        = string
  default     = ""
  description = "extra apply-roles arguments (Kubernetes version and source, OCI runtime); empty: the build's default below"
}

locals {
  # qemu boots a nodesmith base disk offline: no Kubernetes source unless role_args names one.
  qemu_role_args = coalesce(var.role_args, "--kubernetes-source none")
  # The cloud builders reach pkgs.k8s.io from the instance.
  cloud_role_args = coalesce(var.role_args, "--kubernetes-source pkgs --kubernetes-version v1.31.4")
}
