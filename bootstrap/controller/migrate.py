"""Storage migration: every KubeadmConfig(Template) rewritten in the storage version, once.

An install that stored v1beta1 (nodesmith before v1beta2) keeps those objects encoded as v1beta1
in etcd, and ``v1beta1`` in the CRD's ``status.storedVersions``, until each is written again:
the day Cluster API drops v1beta1 (1.16), the version cannot leave the CRD while anything is
still stored in it. The leader does what kube-storage-version-migrator (and Cluster API's own
CRD migrator) does: an unchanged update of every object (the API server encodes it in the
storage version), then ``storedVersions`` set to the storage version alone. It runs when a
leader starts and the CRD lists another stored version; a 409 (the object changed meanwhile:
that write stored it) counts as migrated, any other API error leaves ``storedVersions`` as it
is for the next leader.
"""

from __future__ import annotations

from typing import Any

from lightkube import ApiError
from lightkube.generic_resource import create_namespaced_resource

from bootstrap.controller import kube
from bootstrap.log import log_event

STORAGE = "v1beta2"
KINDS = (("KubeadmConfig", "kubeadmconfigs"), ("KubeadmConfigTemplate", "kubeadmconfigtemplates"))


def storage(api: kube.Api) -> int:
    """Migrate what needs it; returns the objects rewritten."""
    rewritten = 0
    for kind, plural in KINDS:
        name = f"{plural}.{kube.GROUP}"
        crd = api.get(kube.CRD, name)
        stored = list(((crd or {}).get("status") or {}).get("storedVersions") or [])
        if crd is None or stored == [STORAGE]:
            continue
        res: Any = create_namespaced_resource(kube.GROUP, STORAGE, kind, plural)
        for obj in api.client.list(res, namespace="*"):
            doc = dict(obj)
            try:
                api.replace(res, doc)
                rewritten += 1
            except ApiError as exc:
                if kube.status_code(exc) not in (404, 409):  # gone, or written since: stored
                    raise
        api.merge_patch(
            kube.CRD, name, None, {"status": {"storedVersions": [STORAGE]}}, status=True
        )
        log_event("storage-migrated", crd=name, was=stored, objects=rewritten)
    return rewritten
