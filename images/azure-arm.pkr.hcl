# Packer (>= 1.6.6, HCL2) Azure template: starts from Debian's debian-12 marketplace image
# and runs the nodesmith roles over Packer's SSH connection (nodesmith image apply-roles).
# Only validated on the nodesmith CI machine (no cloud access there).

variable "subscription_id" {
  type    = string
  default = "00000000-0000-0000-0000-000000000000"
}
variable "resource_group" {
  type    = string
  default = "nodesmith-images"
}
variable "location" {
  type    = string
  default = "westeurope"
}
variable "vm_size" {
  type    = string
  default = "Standard_D2s_v3"
}

source "azure-arm" "node" {
  use_azure_cli_auth                = true
  subscription_id                   = var.subscription_id
  location                          = var.location
  vm_size                           = var.vm_size
  os_type                           = "Linux"
  image_publisher                   = "Debian"
  image_offer                       = "debian-12"
  image_sku                         = "12-gen2"
  managed_image_resource_group_name = var.resource_group
  managed_image_name                = "nodesmith-debian-12-node-${formatdate("YYYYMMDDhhmmss", timestamp())}"
  ssh_username                      = "nodesmith"
}

build {
  sources = ["source.azure-arm.node"]

  # The throw-away key Packer generated reaches nodesmith in the environment, not argv.
  # The image boots on Azure alone: cloud-init probes no other datasource at first boot
  # (a --datasources in role_args wins).
  provisioner "shell-local" {
    environment_vars = ["NODESMITH_SSH_PRIVATE_KEY=${build.SSHPrivateKey}"]
    inline = [
      "${var.nodesmith} image apply-roles --ssh ${build.Host} --ssh-port ${build.Port} --ssh-user ${build.User} --datasources Azure ${local.cloud_role_args}",
    ]
  }
}
