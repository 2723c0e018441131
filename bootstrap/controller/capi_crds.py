"""Cluster API core CRDs (cluster.x-k8s.io/v1beta1 Cluster and Machine), written by nodesmith.

A management cluster that nodesmith starts itself (the controller's tests, its benchmark and
``nodesmith vm cluster --via-controller``) has no Cluster API core installed; these stand in
for its CRDs. The fields the controller reads are typed, the rest is kept open; status is a
subresource, as in Cluster API, so whoever plays CAPI's own controllers sets it the way they do
(PATCH .../status). They are not an installation of Cluster API: no controller comes with them.
"""

from __future__ import annotations

from typing import Any

import yaml

_CRDS = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: clusters.cluster.x-k8s.io
  labels:
    cluster.x-k8s.io/v1beta1: v1beta1
spec:
  group: cluster.x-k8s.io
  names: {kind: Cluster, listKind: ClusterList, plural: clusters, singular: cluster}
  scope: Namespaced
  versions:
    - name: v1beta1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            apiVersion: {type: string}
            kind: {type: string}
            metadata: {type: object}
            spec:
              type: object
              x-kubernetes-preserve-unknown-fields: true
              properties:
                paused: {type: boolean}
                clusterNetwork: {type: object, x-kubernetes-preserve-unknown-fields: true}
                controlPlaneEndpoint:
                  type: object
                  properties:
                    host: {type: string}
                    port: {type: integer, format: int32}
            status:
              type: object
              x-kubernetes-preserve-unknown-fields: true
              properties:
                infrastructureReady: {type: boolean}
                controlPlaneReady: {type: boolean}
                conditions:
                  type: array
                  items: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: machines.cluster.x-k8s.io
  labels:
    cluster.x-k8s.io/v1beta1: v1beta1
spec:
  group: cluster.x-k8s.io
  names: {kind: Machine, listKind: MachineList, plural: machines, singular: machine}
  scope: Namespaced
  versions:
    - name: v1beta1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            apiVersion: {type: string}
            kind: {type: string}
            metadata: {type: object}
            spec:
              type: object
              required: [clusterName]
              x-kubernetes-preserve-unknown-fields: true
              properties:
                clusterName: {type: string}
                version: {type: string}
                bootstrap:
                  type: object
                  properties:
                    configRef:
                      type: object
                      properties:
                        apiVersion: {type: string}
                        kind: {type: string}
                        name: {type: string}
                        namespace: {type: string}
                        uid: {type: string}
                    dataSecretName: {type: string}
            status:
              type: object
              x-kubernetes-preserve-unknown-fields: true
              properties:
                nodeRef: {type: object, x-kubernetes-preserve-unknown-fields: true}
                bootstrapReady: {type: boolean}
"""


def crds() -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(_CRDS) if doc]


def render_yaml() -> str:
    return _CRDS
