"""The kubeadm stand-in and the test bundles that deliver it (tests only, never an image)."""
