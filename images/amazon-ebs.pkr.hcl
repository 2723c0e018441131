# Packer (>= 1.6.6, HCL2) AWS template: starts from Debian's official Debian 12 AMI and runs
# the nodesmith roles over Packer's SSH connection (nodesmith image apply-roles --ssh).
# Only validated on the nodesmith CI machine (no cloud access there).

variable "region" {
  type    = string
  default = "eu-west-1"
}
variable "instance_type" {
  type    = string
  default = "t3.medium"
}
variable "ami_name" {
  type    = string
  default = "nodesmith-debian-12-node"
}

source "amazon-ebs" "node" {
  region        = var.region
  instance_type = var.instance_type
  ami_name      = "${var.ami_name}-${formatdate("YYYYMMDDhhmmss", timestamp())}"
  ssh_username  = "admin"
  source_ami_filter {
    filters = {
      name                = "debian-12-amd64-*"
      architecture        = "x86_64"
      virtualization-type = "hvm"
      root-device-type    = "ebs"
    }
    owners      = ["136693071363"] # Debian's AWS account
    most_recent = true
  }
  launch_block_device_mappings {
    device_name           = "/dev/xvda"
    volume_size           = 8
    volume_type           = "gp3"
    iops                  = 3000
    throughput            = 125
    delete_on_termination = true
  }
  tags = {
    "nodesmith/role" = "kubernetes-node"
  }
}

build {
  sources = ["source.amazon-ebs.node"]

  # The throw-away key Packer generated reaches nodesmith in the environment, not argv.
  # The image boots on Ec2 alone: cloud-init probes no other datasource at first boot
  # (a --datasources in role_args wins).
  provisioner "shell-local" {
    environment_vars = ["NODESMITH_SSH_PRIVATE_KEY=${build.SSHPrivateKey}"]
    inline = [
      "${var.nodesmith} image apply-roles --ssh ${build.Host} --ssh-port ${build.Port} --ssh-user ${build.User} --datasources Ec2 ${local.cloud_role_args}",
    ]
  }
}
