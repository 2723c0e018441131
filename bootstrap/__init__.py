"""nodesmith: Cluster API objects in, Kubernetes nodes out.

The package is ``bootstrap`` (the distribution is ``nodesmith``). Data flows one way:
parse objects -> resolve the Machine's context -> build documents -> render -> write/serve.
One room per concern: ``render`` (the engine), ``serve`` (HTTP), ``controller`` (a Cluster
API bootstrap provider for KubeadmConfig, rendering through ``render``),
``vm`` (qemu, the readiness suite, clusters of VMs), ``image`` (golden images), ``kubernetes``
(a real Kubernetes built from Debian's source) and ``cli`` (the only place argparse lives);
the modules at the top are small helpers several rooms share (``errors`` draws the error tree,
``seed`` and ``sshkeys`` serve both ``vm`` and ``image``, ``aptsources`` both ``image`` and
``kubernetes``).
"""

__version__ = "0.1.0"
