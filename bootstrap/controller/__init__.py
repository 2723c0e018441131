"""nodesmith as a Cluster API bootstrap provider: a controller for KubeadmConfig.

Data flows one way, as in ``render``: informers (``informer``) keep the KubeadmConfigs,
Machines, Clusters and Secrets current -> the manager (``manager``) maps each event to the
configs it concerns and queues them (``workqueue``) -> a reconcile (``reconcile``) decides the
role, takes the init lock, looks up or generates the CAs, renders through
``bootstrap.render.pipeline`` and writes the data Secret, the workload cluster's bootstrap
token and the status (``status``). ``leader`` makes two replicas safe, ``metrics`` counts,
``manifests`` prints the install YAML. ``kube`` is the only module that talks to the API.
"""
