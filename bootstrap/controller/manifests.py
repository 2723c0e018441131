"""The provider's install YAML: CRDs with structural schemas, RBAC, a Deployment.

``nodesmith controller manifests | kubectl apply -f -`` installs nodesmith as the cluster's
kubeadm bootstrap provider. The CRDs carry the label Cluster API reads to map its contract
version to ours (``cluster.x-k8s.io/v1beta1: v1beta1``). Their schemas type every field the
controller reads and leave the kubeadm documents (cluster/init/join configuration) open
(``x-kubernetes-preserve-unknown-fields``): the render pipeline validates those against the
kubeadm schema of the Machine's version, with messages naming the field, which a CRD
schema fixed at install time cannot do for every version.

The RBAC is what the controller uses and no more: the tests run the controller as this
ServiceAccount's user on a real API server with RBAC on.

With a :class:`ReportEndpoint` the replicas also serve the node status endpoint on
:data:`REPORT_PORT`, behind the Service ``nodesmith-reports`` (a LoadBalancer by default: the
nodes of workload clusters are usually outside the management cluster), over TLS from a
``kubernetes.io/tls`` Secret whose ``ca.crt`` (as cert-manager writes it) is rendered into the
userdata as the CA the nodes trust for their reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from bootstrap.controller.kube import GROUP

Obj = dict[str, Any]

NAMESPACE = "nodesmith-system"
SERVICE_ACCOUNT = "nodesmith-controller"
SA_USER = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
"""The user name the API server gives that ServiceAccount (what RBAC's subject matches)."""
SA_GROUPS = ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"]
REPORT_PORT = 8443
REPORT_TLS_DIR = "/etc/nodesmith/report-tls"


@dataclass(frozen=True)
class ReportEndpoint:
    """The node status endpoint: ``url`` as nodes reach it, TLS from ``tls_secret``."""

    url: str
    tls_secret: str | None = None
    service_type: str = "LoadBalancer"
    tls_ca: bool = True  # the Secret's ca.crt is what nodes trust; False: their system store


def _open() -> Obj:
    return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


def _strings() -> Obj:
    return {"type": "array", "items": {"type": "string"}}


def _secret_ref() -> Obj:
    return {
        "type": "object",
        "required": ["name", "key"],
        "properties": {"name": {"type": "string"}, "key": {"type": "string"}},
    }


def spec_schema() -> Obj:
    """KubeadmConfigSpec (v1beta1), structural."""
    return {
        "type": "object",
        "properties": {
            "clusterConfiguration": _open(),
            "initConfiguration": _open(),
            "joinConfiguration": _open(),
            "files": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["path"],
                    "properties": {
                        "path": {"type": "string"},
                        "owner": {"type": "string"},
                        "permissions": {"type": "string"},
                        "encoding": {
                            "type": "string",
                            "enum": ["base64", "gzip", "gzip+base64"],
                        },
                        "append": {"type": "boolean"},
                        "content": {"type": "string"},
                        "contentFrom": {
                            "type": "object",
                            "required": ["secret"],
                            "properties": {"secret": _secret_ref()},
                        },
                    },
                },
            },
            "diskSetup": _open(),
            "mounts": {"type": "array", "items": _strings()},
            "bootCommands": _strings(),
            "preKubeadmCommands": _strings(),
            "postKubeadmCommands": _strings(),
            "users": {"type": "array", "items": _open()},
            "ntp": _open(),
            "format": {"type": "string", "enum": ["cloud-config", "ignition"]},
            "verbosity": {"type": "integer", "format": "int32"},
            "useExperimentalRetryJoin": {"type": "boolean"},
            "ignition": _open(),
        },
    }


def status_schema() -> Obj:
    condition = {
        "type": "object",
        "required": ["type", "status"],
        "properties": {
            name: {"type": "string"}
            for name in ("type", "status", "severity", "reason", "message", "lastTransitionTime")
        },
    }
    return {
        "type": "object",
        "properties": {
            "ready": {"type": "boolean"},
            "dataSecretName": {"type": "string"},
            "failureReason": {"type": "string"},
            "failureMessage": {"type": "string"},
            "observedGeneration": {"type": "integer", "format": "int64"},
            "conditions": {"type": "array", "items": condition},
        },
    }


def _crd(kind: str, plural: str, schema: Obj, status: bool) -> Obj:
    version: Obj = {
        "name": "v1beta1",
        "served": True,
        "storage": True,
        "schema": {"openAPIV3Schema": schema},
    }
    if status:
        version["subresources"] = {"status": {}}
        version["additionalPrinterColumns"] = [
            {"name": "Ready", "type": "boolean", "jsonPath": ".status.ready"},
            {"name": "Reason", "type": "string", "jsonPath": ".status.failureReason"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {
                "cluster.x-k8s.io/v1beta1": "v1beta1",
                "cluster.x-k8s.io/provider": "bootstrap-nodesmith",
            },
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "categories": ["cluster-api"],
            },
            "scope": "Namespaced",
            "versions": [version],
        },
    }


def crds() -> list[Obj]:
    meta = {"type": "object"}
    config = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": meta,
            "spec": spec_schema(),
            "status": status_schema(),
        },
    }
    template = {
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": meta,
            "spec": {
                "type": "object",
                "required": ["template"],
                "properties": {
                    "template": {
                        "type": "object",
                        "properties": {"metadata": _open(), "spec": spec_schema()},
                    }
                },
            },
        },
    }
    return [
        _crd("KubeadmConfig", "kubeadmconfigs", config, status=True),
        _crd("KubeadmConfigTemplate", "kubeadmconfigtemplates", template, status=False),
    ]


def rbac(namespace: str = NAMESPACE) -> list[Obj]:
    rules = [
        {
            "apiGroups": [GROUP],
            "resources": ["kubeadmconfigs", "kubeadmconfigs/status"],
            "verbs": ["get", "list", "watch", "patch", "update"],
        },
        {
            "apiGroups": ["cluster.x-k8s.io"],
            "resources": ["clusters", "machines"],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "verbs": ["get", "list", "watch", "create", "patch", "update"],
        },
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "delete"]},
    ]
    subject = {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": namespace}
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": SERVICE_ACCOUNT, "namespace": namespace},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "nodesmith-controller"},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "nodesmith-controller"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "nodesmith-controller",
            },
            "subjects": [subject],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "nodesmith-leader-election", "namespace": namespace},
            "rules": [
                {
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "verbs": ["get", "create", "update"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "nodesmith-leader-election", "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "nodesmith-leader-election",
            },
            "subjects": [subject],
        },
    ]


LABELS = {"app.kubernetes.io/name": "nodesmith-controller"}


def _report_args(report: ReportEndpoint) -> list[str]:
    args = [f"--report-bind=0.0.0.0:{REPORT_PORT}", f"--report-url={report.url}"]
    if report.tls_secret:
        args += [
            f"--report-tls-cert={REPORT_TLS_DIR}/tls.crt",
            f"--report-tls-key={REPORT_TLS_DIR}/tls.key",
        ]
        if report.tls_ca:
            args.append(f"--report-ca={REPORT_TLS_DIR}/ca.crt")
    return args


def report_service(report: ReportEndpoint, namespace: str = NAMESPACE) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "nodesmith-reports", "namespace": namespace, "labels": dict(LABELS)},
        "spec": {
            "type": report.service_type,
            "selector": dict(LABELS),  # every replica serves reports, the standby too
            "ports": [{"name": "reports", "port": REPORT_PORT, "targetPort": "reports"}],
        },
    }


def deployment(
    image: str,
    namespace: str = NAMESPACE,
    replicas: int = 2,
    report: ReportEndpoint | None = None,
) -> Obj:
    labels = dict(LABELS)
    container: Obj = {
        "name": "manager",  # the name clusterctl's contract gives a provider's container
        "image": image,
        "args": [
            "controller",
            "run",
            # the Pod's own namespace (downward API): right under clusterctl's
            # --target-namespace too, which moves the objects but rewrites no args
            "--leader-election-namespace=$(POD_NAMESPACE)",
            "--metrics-bind=0.0.0.0:8080",
            *(_report_args(report) if report else []),
        ],
        "env": [
            {
                "name": "POD_NAMESPACE",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
            }
        ],
        "ports": [
            {"name": "metrics", "containerPort": 8080},
            *([{"name": "reports", "containerPort": REPORT_PORT}] if report else []),
        ],
        "securityContext": {
            "runAsNonRoot": True,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "resources": {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"memory": "512Mi"},
        },
    }
    volumes: list[Obj] = []
    if report is not None and report.tls_secret:
        container["volumeMounts"] = [
            {"name": "report-tls", "mountPath": REPORT_TLS_DIR, "readOnly": True}
        ]
        volumes = [{"name": "report-tls", "secret": {"secretName": report.tls_secret}}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "nodesmith-controller", "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            # its own copy: the selector is immutable, labels added to the object's (a
            # clusterctl release's provider label) must never reach it
            "selector": {"matchLabels": dict(LABELS)},
            "template": {
                "metadata": {"labels": dict(LABELS)},
                "spec": {
                    "serviceAccountName": SERVICE_ACCOUNT,
                    "terminationGracePeriodSeconds": 30,
                    "containers": [container],
                    **({"volumes": volumes} if volumes else {}),
                },
            },
        },
    }


def manifests(
    image: str,
    namespace: str = NAMESPACE,
    replicas: int = 2,
    report: ReportEndpoint | None = None,
) -> list[Obj]:
    namespace_obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    return [
        namespace_obj,
        *crds(),
        *rbac(namespace),
        deployment(image, namespace, replicas, report),
        *([report_service(report, namespace)] if report else []),
    ]


class _PlainDumper(yaml.SafeDumper):
    """No ``&id001``/``*id001``: an install YAML is read by people, and by tools that do not
    follow aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render_yaml(objects: list[Obj]) -> str:
    return yaml.dump_all(objects, Dumper=_PlainDumper, sort_keys=False)
