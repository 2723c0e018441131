"""``nodesmith image``: bake golden node images (root filesystem, roles, bootable disk).

Stages, one module each: ``definition`` (the YAML), ``defaults`` (the fallback options),
``rootfs`` (mmdebstrap + .deb cache, from the host's apt sources as the shared
``bootstrap.aptsources`` reads them), ``roles`` (pyinfra over @chroot or @ssh), ``kubernetes``
(binary sources and sha256 checks), ``disk`` (GPT + GRUB BIOS/UEFI), ``artifacts``
(qcow2/raw/box + sha256), ``build`` (the pipeline), ``packer`` (templates).
"""
