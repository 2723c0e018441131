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
WEBHOOK_SERVICE = "nodesmith-webhook-service"
WEBHOOK_SECRET = "nodesmith-webhook-service-cert"  # as CABPK's <prefix>-webhook-service-cert
WEBHOOK_PORT = 9443
CERTIFICATE = "nodesmith-serving-cert"
ISSUER = "nodesmith-selfsigned-issuer"


@dataclass(frozen=True)
class ReportEndpoint:
    """The node status endpoint: ``url`` as nodes reach it, TLS from ``tls_secret``."""

    url: str
    tls_secret: str | None = None
    service_type: str = "LoadBalancer"
    tls_ca: bool = True  # the Secret's ca.crt is what nodes trust; False: their system store
    node_port: int | None = None  # a NodePort Service's fixed port (the URL names it)


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


def spec_schema(version: str = "v1beta1") -> Obj:
    """KubeadmConfigSpec, structural (v1beta2 has no ``useExperimentalRetryJoin``; its kubeadm
    documents differ only inside what is left open here)."""
    schema: Obj = {
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
    if version != "v1beta1":
        del schema["properties"]["useExperimentalRetryJoin"]
    return schema


def _conditions(v1beta1: bool) -> Obj:
    """Cluster API v1beta1 conditions (with a severity) or ``metav1.Condition``s."""
    names = ["type", "status", "reason", "message", "lastTransitionTime"]
    props: Obj = {name: {"type": "string"} for name in names}
    if v1beta1:
        props["severity"] = {"type": "string"}
    else:
        props["observedGeneration"] = {"type": "integer", "format": "int64"}
    required = ["type", "status"] if v1beta1 else ["type", "status", "reason"]
    return {
        "type": "array",
        "items": {"type": "object", "required": required, "properties": props},
    }


def status_schema(version: str = "v1beta1") -> Obj:
    """The status of each contract: v1beta1's ``ready``/``failureReason`` (v1beta2 conditions
    carried under ``v1beta2``), v1beta2's ``initialization`` with v1beta1's under
    ``deprecated.v1beta1``, as CABPK's."""
    generation = {"type": "integer", "format": "int64"}
    if version == "v1beta1":
        return {
            "type": "object",
            "properties": {
                "ready": {"type": "boolean"},
                "dataSecretName": {"type": "string"},
                "failureReason": {"type": "string"},
                "failureMessage": {"type": "string"},
                "observedGeneration": generation,
                "conditions": _conditions(True),
                "v1beta2": {
                    "type": "object",
                    "properties": {"conditions": _conditions(False)},
                },
            },
        }
    return {
        "type": "object",
        "properties": {
            "initialization": {
                "type": "object",
                "properties": {"dataSecretCreated": {"type": "boolean"}},
            },
            "dataSecretName": {"type": "string"},
            "observedGeneration": generation,
            "conditions": _conditions(False),
            "deprecated": {
                "type": "object",
                "properties": {
                    "v1beta1": {
                        "type": "object",
                        "properties": {
                            "conditions": _conditions(True),
                            "failureReason": {"type": "string"},
                            "failureMessage": {"type": "string"},
                        },
                    }
                },
            },
        },
    }


@dataclass(frozen=True)
class Webhook:
    """How the API server reaches the conversion webhook: the Service in front of the
    controller's replicas (``url`` None) or a URL (a controller outside the cluster, as in the
    tests); its CA from cert-manager's injector or written by the controller itself."""

    self_signed: bool = False
    url: str | None = None


CERT_MANAGER = Webhook()


def _version(name: str, schema: Obj, status: bool, storage: bool) -> Obj:
    version: Obj = {
        "name": name,
        "served": True,
        "storage": storage,
        "schema": {"openAPIV3Schema": schema},
    }
    if status:
        version["subresources"] = {"status": {}}
        ready = ".status.ready" if name == "v1beta1" else ".status.initialization.dataSecretCreated"
        reason = (
            ".status.failureReason"
            if name == "v1beta1"
            else ".status.conditions[?(@.type=='Ready')].reason"
        )
        version["additionalPrinterColumns"] = [
            {"name": "Ready", "type": "boolean", "jsonPath": ready},
            {"name": "Reason", "type": "string", "jsonPath": reason},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ]
    return version


def _crd(
    kind: str, plural: str, schemas: dict[str, Obj], status: bool, namespace: str, hook: Webhook
) -> Obj:
    client: Obj = (
        {"url": hook.url}
        if hook.url
        else {
            "service": {
                "name": WEBHOOK_SERVICE,
                "namespace": namespace,
                "path": "/convert",
                "port": 443,
            }
        }
    )
    meta: Obj = {
        "name": f"{plural}.{GROUP}",
        "labels": {
            "cluster.x-k8s.io/v1beta1": "v1beta1",
            "cluster.x-k8s.io/v1beta2": "v1beta2",
            "cluster.x-k8s.io/provider": "bootstrap-nodesmith",
        },
    }
    if not hook.self_signed:
        meta["annotations"] = {"cert-manager.io/inject-ca-from": f"{namespace}/{CERTIFICATE}"}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": meta,
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
            # v1beta2 is stored (the contract of Cluster API 1.11+); v1beta1 is served through
            # the conversion webhook for v1beta1 clients until Cluster API drops it
            "versions": [
                _version(name, schema, status, storage=name == "v1beta2")
                for name, schema in schemas.items()
            ],
            "conversion": {
                "strategy": "Webhook",
                "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": client},
            },
        },
    }


def _object(spec: Obj, status: Obj | None = None) -> Obj:
    """A top-level object's schema: type meta, open metadata, ``spec`` (and ``status``)."""
    props: Obj = {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": spec,
    }
    if status is not None:
        props["status"] = status
    return {"type": "object", "properties": props}


def crds(namespace: str = NAMESPACE, hook: Webhook = CERT_MANAGER) -> list[Obj]:
    def config(version: str) -> Obj:
        return _object(spec_schema(version), status_schema(version))

    def template(version: str) -> Obj:
        inner = {
            "type": "object",
            "properties": {"metadata": _open(), "spec": spec_schema(version)},
        }
        return _object(
            {"type": "object", "required": ["template"], "properties": {"template": inner}}
        )

    versions = ("v1beta1", "v1beta2")
    return [
        _crd("KubeadmConfig", "kubeadmconfigs", {v: config(v) for v in versions}, True,
             namespace, hook),
        _crd("KubeadmConfigTemplate", "kubeadmconfigtemplates",
             {v: template(v) for v in versions}, False, namespace, hook),
    ]  # fmt: skip


def webhook_objects(namespace: str = NAMESPACE, hook: Webhook = CERT_MANAGER) -> list[Obj]:
    """The Service in front of the webhook and, with cert-manager, its Issuer and Certificate
    (which writes :data:`WEBHOOK_SECRET`; the CA injector fills the CRDs' caBundle)."""
    service: Obj = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": WEBHOOK_SERVICE, "namespace": namespace, "labels": dict(LABELS)},
        "spec": {
            "selector": dict(LABELS),  # every replica converts, the standby too
            "ports": [{"name": "webhook", "port": 443, "targetPort": "webhook-server"}],
        },
    }
    if hook.self_signed:
        return [service]
    names = [
        f"{WEBHOOK_SERVICE}.{namespace}.svc",
        f"{WEBHOOK_SERVICE}.{namespace}.svc.cluster.local",
    ]
    return [
        service,
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Issuer",
            "metadata": {"name": ISSUER, "namespace": namespace},
            "spec": {"selfSigned": {}},
        },
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Certificate",
            "metadata": {"name": CERTIFICATE, "namespace": namespace},
            "spec": {
                "dnsNames": names,
                "issuerRef": {"kind": "Issuer", "name": ISSUER},
                "secretName": WEBHOOK_SECRET,
            },
        },
    ]


def rbac(namespace: str = NAMESPACE, hook: Webhook = CERT_MANAGER) -> list[Obj]:
    rules: list[Obj] = [
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
        {  # storage migration (migrate.py): rewrite each template once, then say so in the CRD
            "apiGroups": [GROUP],
            "resources": ["kubeadmconfigtemplates"],
            "verbs": ["get", "list", "update"],
        },
        {  # its own two CRDs; self-signed, it writes its CA into them too
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "resourceNames": [f"kubeadmconfigs.{GROUP}", f"kubeadmconfigtemplates.{GROUP}"],
            "verbs": ["get", "patch"] if hook.self_signed else ["get"],
        },
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions/status"],
            "resourceNames": [f"kubeadmconfigs.{GROUP}", f"kubeadmconfigtemplates.{GROUP}"],
            "verbs": ["patch"],
        },
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
            # A replica whose node the control plane marks NotReady for a moment (a missed
            # heartbeat on a busy node) still serves: it stays an endpoint, and a node whose
            # report reaches a replica that is not serving yet retries (the script does).
            "publishNotReadyAddresses": True,
            "ports": [
                {
                    "name": "reports",
                    "port": REPORT_PORT,
                    "targetPort": "reports",
                    **({"nodePort": report.node_port} if report.node_port else {}),
                }
            ],
        },
    }


def deployment(
    image: str,
    namespace: str = NAMESPACE,
    replicas: int = 2,
    report: ReportEndpoint | None = None,
    hook: Webhook = CERT_MANAGER,
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
            f"--webhook-bind=0.0.0.0:{WEBHOOK_PORT}",
            f"--webhook-secret={WEBHOOK_SECRET}",
            *(["--webhook-self-signed"] if hook.self_signed else []),
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
            {"name": "webhook-server", "containerPort": WEBHOOK_PORT},
            *([{"name": "reports", "containerPort": REPORT_PORT}] if report else []),
        ],
        # in the Service's endpoints only once its webhook answers (every replica converts)
        "readinessProbe": {
            "httpGet": {"path": "/healthz", "port": "webhook-server", "scheme": "HTTPS"},
            "periodSeconds": 5,
            # a busy node must not drop the only replica from the Service: 30 s of failures
            "timeoutSeconds": 5,
            "failureThreshold": 6,
        },
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
    # the webhook's TLS context is loaded through /tmp (read-only root): memory, not disk
    mounts: list[Obj] = [{"name": "tmp", "mountPath": "/tmp"}]
    volumes: list[Obj] = [{"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}}]
    if report is not None and report.tls_secret:
        mounts.append({"name": "report-tls", "mountPath": REPORT_TLS_DIR, "readOnly": True})
        volumes.append({"name": "report-tls", "secret": {"secretName": report.tls_secret}})
    container["volumeMounts"] = mounts
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
                    "volumes": volumes,
                    # a management cluster may be its control plane alone (clusterctl move
                    # onto a fresh cluster), as Cluster API's own managers tolerate
                    "tolerations": [
                        {"key": "node-role.kubernetes.io/master", "effect": "NoSchedule"},
                        {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"},
                    ],
                },
            },
        },
    }


def manifests(
    image: str,
    namespace: str = NAMESPACE,
    replicas: int = 2,
    report: ReportEndpoint | None = None,
    hook: Webhook = CERT_MANAGER,
) -> list[Obj]:
    namespace_obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    return [
        namespace_obj,
        *crds(namespace, hook),
        *rbac(namespace, hook),
        *webhook_objects(namespace, hook),
        deployment(image, namespace, replicas, report, hook),
        *([report_service(report, namespace)] if report else []),
    ]


class _PlainDumper(yaml.SafeDumper):
    """No ``&id001``/``*id001``: an install YAML is read by people, and by tools that do not
    follow aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render_yaml(objects: list[Obj]) -> str:
    return yaml.dump_all(objects, Dumper=_PlainDumper, sort_keys=False)
