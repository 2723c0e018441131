"""nodesmith: Cluster API objects in, Kubernetes nodes out.

The package is ``bootstrap`` (the distribution is ``nodesmith``). Data flows one way:
parse objects -> resolve the Machine's context -> build documents -> render -> write/serve.
"""

__version__ = "0.1.0"
