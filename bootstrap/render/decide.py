"""What a Machine is in its cluster, and which CAs it gets: decided here, once, for every driver.

``nodesmith render``, ``serve``, the VM tools and the bootstrap provider controller ask the same
questions of a Machine, and they must get the same answers, or a node that renders one way on
the command line boots another way under the controller:

- its **role**: ``init`` (the first control plane, holding the cluster's init lock), a
  control-plane join, or a worker join (:func:`role`), as CABPK decides it;
- **who asks first** for the init lock in a run (:func:`init_order`);
- the **init lock** itself, a protocol (:class:`InitLock`): one run of the command line keeps
  it in memory (``batch.RunLock``), the controller in CABPK's ``<cluster>-lock`` ConfigMap;
- the **CA pairs** a control plane gets: looked up from the cluster's Secrets, or generated for
  an init when they are missing (CABPK's ``LookupOrGenerate``, per pair).

The pipeline then builds from a :class:`Decision` and decides nothing itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from bootstrap.errors import NodesmithError, TerminalError, TransientError
from bootstrap.render import pki
from bootstrap.render.external_etcd import external_etcd
from bootstrap.render.objects import CONTROL_PLANE_LABEL, Cluster, Machine
from bootstrap.render.resolve import Bundle, Context, resolve

INIT = "init-control-plane"
JOIN_CP = "join-control-plane"
WORKER = "worker-join"


class InitLock(Protocol):
    """CABPK's init lock: exactly one control plane of a cluster runs ``kubeadm init``."""

    def initialized(self, cluster: Cluster) -> bool:
        """Whether an init of ``cluster`` is known to have happened beyond what its status
        says (an init rendered earlier in the same run)."""
        ...

    def acquire(self, cluster: Cluster, machine: Machine) -> str:
        """Take the lock for ``machine`` unless another Machine holds it; return the holder's
        name ('' when it cannot be told)."""
        ...

    def release(self, cluster: Cluster) -> None:
        """Drop the lock: the cluster is initialized, the lock has done its work."""
        ...


@dataclass(frozen=True)
class Decision:
    """A Machine's role and, for a control plane, its CA pairs (``kinds`` of them: no etcd CA
    with an external etcd); ``generated`` holds the CA Secrets an init made, to be stored."""

    role: str
    cas: dict[str, pki.KeyPair] = field(default_factory=dict, repr=False)
    kinds: tuple[str, ...] = ()
    generated: list[dict[str, Any]] = field(default_factory=list, repr=False)


def _waiting_for_init(cluster: Cluster, why: str) -> TransientError:
    return TransientError(
        why,
        obj=cluster.ref,
        field="status.conditions",
        reason="WaitingForControlPlaneInitialized",
        retry_after=30,
    )


def role(ctx: Context, lock: InitLock) -> str:
    """init, control-plane join or worker join, decided as CABPK decides it.

    The Machine's ``cluster.x-k8s.io/control-plane`` label (v1alpha1: ``versions.controlPlane``)
    says what it is; the Cluster's ControlPlaneInitialized state (or an init the lock saw) says
    what it does. The spec's shape never decides: a KubeadmControlPlane scale-up config carries
    a ClusterConfiguration and must join, not start a second cluster.

    - control plane, cluster not initialized: init, for the one Machine holding the init lock;
      the others wait (transient) for that init;
    - control plane, cluster initialized: control-plane join (and the lock is released);
    - worker: join once the cluster is initialized, wait (transient) until then; a worker
      asking for ``joinConfiguration.controlPlane`` is wrong (terminal), since it would get
      every CA private key.

    Example: with ``status.conditions: [{type: ControlPlaneInitialized, status: "True"}]`` on
    the Cluster, a labelled Machine whose config has only a ClusterConfiguration is
    ``join-control-plane``.
    """
    machine, cluster = ctx.machine, ctx.cluster
    initialized = cluster.initialized or lock.initialized(cluster)
    if not machine.control_plane:
        join = ctx.config.spec.join_configuration or {}
        if join.get("controlPlane") is not None:
            marker = (
                "spec.versions.controlPlane" if machine.seed else f"label {CONTROL_PLANE_LABEL}"
            )
            raise TerminalError(
                f"is set, but Machine {machine.ref.namespace}/{machine.name} is a worker "
                f"(no {marker}); a worker never gets the control plane's keys",
                obj=ctx.config.ref,
                field="spec.joinConfiguration.controlPlane",
                reason="WorkerAsksForControlPlane",
            )
        if machine.seed and not initialized:
            # The 2018 API has no initialized state: its actuators joined a worker once the
            # Cluster reported status.apiEndpoints, which they set when the master answered.
            if cluster.endpoint_field == "status.apiEndpoints[0]" and cluster.endpoint:
                return WORKER
            raise TransientError(
                "the control plane has not reported an API endpoint yet (cluster.k8s.io/"
                "v1alpha1 has no initialized state; its apiEndpoints say a master answers); "
                "a worker joins after it",
                obj=cluster.ref,
                field="status.apiEndpoints",
                reason="WaitingForControlPlaneInitialized",
                retry_after=30,
            )
        if not initialized:
            raise _waiting_for_init(
                cluster,
                "the control plane is not initialized yet (no ControlPlaneInitialized in its "
                "status and no init in this run); a worker joins after it",
            )
        return WORKER
    if initialized:
        lock.release(cluster)
        return JOIN_CP
    holder = lock.acquire(cluster, machine)
    if holder != machine.name:
        raise _waiting_for_init(
            cluster,
            f"the control plane is not initialized yet and Machine {cluster.ref.namespace}/"
            f"{holder or '?'} holds the init lock; this control plane joins after that init",
        )
    return INIT


def _secret_pair(ctx: Context, kind: str) -> pki.KeyPair | None:
    name = f"{ctx.cluster.name}-{pki.SECRET_SUFFIXES[kind]}"
    secret = ctx.secret(name)
    if secret is None:
        return None
    cert, key = secret.tls()
    assert key is not None  # tls() refuses a pair without its key
    try:
        return pki.load_pair(cert, key, kind)
    except ValueError as exc:
        raise TerminalError(
            f"is not a usable {kind} key pair: {exc}",
            obj=secret.ref,
            field="data",
            reason="InvalidSecret",
        ) from None


def certificates(
    ctx: Context, role_: str, kinds: tuple[str, ...], now: datetime
) -> tuple[dict[str, pki.KeyPair], list[dict[str, Any]]]:
    """The CA pairs of ``kinds`` from their Secrets; an init generates the missing ones.

    A control-plane join only looks them up: the init that creates them may not have happened
    yet, so a missing one waits (CABPK requeues too). Nor does anyone generate them for a
    Cluster with a control-plane provider (``spec.controlPlaneRef``: KubeadmControlPlane makes
    ``<cluster>-ca`` and the rest before its first Machine): its init waits for them, as
    CABPK's does. Otherwise only the Secrets that were missing are generated, each a new CA
    (CABPK's ``LookupOrGenerate``, per pair).
    """
    pairs: dict[str, pki.KeyPair] = {}
    missing: list[str] = []
    for kind in kinds:
        pair = _secret_pair(ctx, kind)
        if pair is None:
            missing.append(kind)
        else:
            pairs[kind] = pair
    if not missing:
        return pairs, []
    names = ", ".join(f"{ctx.cluster.name}-{pki.SECRET_SUFFIXES[k]}" for k in missing)
    provider = ctx.cluster.control_plane_provider
    if role_ != INIT or provider is not None:
        who = (
            f"its control-plane provider ({provider}, the Cluster's spec.controlPlaneRef) "
            "creates them"
            if provider is not None
            else "the init creates them"
        )
        raise TransientError(
            f"a control plane needs the cluster's CA Secrets and {who}; {names} not in the "
            "input yet",
            obj=ctx.machine.ref,
            reason="CANotFound",
            retry_after=30,
        )
    fresh = pki.generate_cluster_pki(ctx.cluster.name, now)
    pairs.update({k: fresh[k] for k in missing})
    wanted = {f"{ctx.cluster.name}-{pki.SECRET_SUFFIXES[k]}" for k in missing}
    generated = [
        s
        for s in pki.pki_secrets(ctx.cluster.name, ctx.machine.ref.namespace, fresh)
        if s["metadata"]["name"] in wanted
    ]
    return pairs, generated


def decide(ctx: Context, lock: InitLock, now: datetime) -> Decision:
    """The Machine's role, then its CAs: a control plane's (no etcd CA with an external
    etcd, which is someone else's), none for a worker."""
    role_ = role(ctx, lock)
    if role_ == WORKER:
        return Decision(role_)
    kinds = tuple(k for k in pki.KINDS if k != "etcd") if external_etcd(ctx) else pki.KINDS
    cas, generated = certificates(ctx, role_, kinds, now)
    return Decision(role_, cas, kinds, generated)


def init_order(bundle: Bundle, name: str) -> int:
    """Who asks for the init lock first: 0 for a control plane whose config is written for
    init (an init or cluster configuration, no ``joinConfiguration.controlPlane``), 1 for the
    other control planes, 2 for workers and Machines that will fail anyway.

    CABPK's lock goes to whichever Machine reconciles first; a run picks the one its author
    wrote for init, so the other control planes join it instead of waiting.
    """
    try:
        ctx = resolve(bundle, name)
    except NodesmithError:
        return 2
    if not ctx.machine.control_plane:
        return 2
    spec = ctx.config.spec
    wrote_init = spec.init_configuration is not None or spec.cluster_configuration is not None
    asks_join = (spec.join_configuration or {}).get("controlPlane") is not None
    return 0 if wrote_init and not asks_join else 1
