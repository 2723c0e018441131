"""The Secrets a reconcile reads and writes on the management cluster: inputs, CAs, data.

- inputs: the Secrets a render may read, from the cache, and for the cluster's own
  (``<cluster>-ca`` and the like, which an init of this controller may just have created) from
  the API when the cache has not seen them yet;
- CAs: the CA Secrets an init generated (``decide``), created owned by its KubeadmConfig;
- data: the bootstrap data Secret, named as the config and owned by it (CABPK's contract),
  created once; one that exists already and is ours is adopted, never written twice.
"""

from __future__ import annotations

from typing import Any

from lightkube import ApiError

from bootstrap.controller import kube
from bootstrap.controller.scope import Cache, Scope, referenced_secrets
from bootstrap.errors import TerminalError, TransientError
from bootstrap.render.objects import Cluster, parse_stored
from bootstrap.render.outputs import bootstrap_secret
from bootstrap.render.result import RenderResult

Obj = dict[str, Any]

TOKEN_ID_ANNOTATION = "bootstrap.nodesmith.dev/token-id"
CONFIG_API_VERSION = f"{kube.GROUP}/v1beta1"


def owner_ref(scope: Scope) -> Obj:
    """The controller reference a config puts on what it creates (its CAs, its data)."""
    return {
        "apiVersion": scope.doc.get("apiVersion", CONFIG_API_VERSION),
        "kind": "KubeadmConfig",
        "name": scope.name,
        "uid": scope.stored.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


class SecretStore:
    """Secrets of the management cluster ``api``, read through ``cache`` first."""

    def __init__(self, api: kube.Api, cache: Cache) -> None:
        self.api = api
        self.cache = cache

    def inputs(self, scope: Scope, cluster: Cluster) -> list[Obj]:
        """The Secrets the render of ``scope`` may read, as they are now."""
        out = []
        for name in sorted(referenced_secrets(scope, cluster.name)):
            secret = self.cache.get(scope.namespace, name)
            if secret is None and name.startswith(cluster.name + "-"):
                secret = self.api.get(kube.Secret, name, scope.namespace)  # just created
            if secret is not None:
                out.append(secret)
        return out

    def create_cas(self, scope: Scope, generated: list[Obj]) -> None:
        """Create the CA Secrets an init generated. One that exists already was made by an
        earlier run or a rival: the CAs just generated are then not the cluster's, so the
        render waits for the next reconcile, which reads the stored ones."""
        for secret in generated:
            secret["metadata"]["ownerReferences"] = [owner_ref(scope)]
            try:
                self.api.create(kube.Secret, secret)
            except ApiError as exc:
                if kube.status_code(exc) != 409:
                    raise
                raise TransientError(
                    f"Secret {scope.namespace}/{secret['metadata']['name']} was created "
                    "meanwhile; the next reconcile renders with it",
                    obj=f"KubeadmConfig {scope.namespace}/{scope.name}",
                    reason="WaitingForCertificates",
                ) from None

    def data_secret(self, scope: Scope) -> Obj | None:
        """The config's data Secret, if one exists and it is ours."""
        found = self.cache.get(scope.namespace, scope.name) or self.api.get(
            kube.Secret, scope.name, scope.namespace
        )
        return found if found is not None and self._ours(found, scope) else None

    def store_data(self, scope: Scope, result: RenderResult) -> None:
        """Create the data Secret; one of an earlier run that stopped before its status is
        adopted as it is; someone else's of that name is a conflict nobody can retry away."""
        secret = bootstrap_secret(result)
        if result.bootstrap_token_secret is not None:
            token_name = str(result.bootstrap_token_secret["metadata"]["name"])
            secret["metadata"]["annotations"] = {
                TOKEN_ID_ANNOTATION: token_name.removeprefix("bootstrap-token-")
            }
        try:
            self.api.create(kube.Secret, secret)
            return
        except ApiError as exc:
            if kube.status_code(exc) != 409:
                raise
        existing = self.api.get(kube.Secret, scope.name, scope.namespace)
        if existing is None:  # deleted between our create and get: try again
            raise TransientError(
                f"Secret {scope.namespace}/{scope.name} came and went while being written",
                obj=f"KubeadmConfig {scope.namespace}/{scope.name}",
                reason="DataSecretRace",
            )
        if not self._ours(existing, scope):
            raise TerminalError(
                f"Secret {scope.namespace}/{scope.name} exists and is not owned by this "
                "KubeadmConfig; the data Secret must carry the config's name",
                obj=f"KubeadmConfig {scope.namespace}/{scope.name}",
                field="status.dataSecretName",
                reason="DataSecretConflict",
            )

    @staticmethod
    def _ours(secret: Obj, scope: Scope) -> bool:
        return parse_stored(secret).owned_by(scope.stored.uid)
