"""A real Kubernetes where upstream downloads are unreachable: built from Debian's source.

Debian 12 carries the complete upstream v1.20.2 tree, every Go dependency vendored, as the
source package ``kubernetes``. ``build`` fetches it through apt (a private configuration:
the host's apt sources stay untouched), builds the seven binaries with Debian's Go, and
``images`` packs the control-plane container images from them. v1.20 is old: this exists
to prove nodesmith's artifacts on real kubeadm, kubelet and API servers, not for production.

Example::

    nodesmith kubernetes build          # once per machine; later calls reuse the cache
    nodesmith kubernetes path           # the cached build: bin/, images/, build.json
"""
