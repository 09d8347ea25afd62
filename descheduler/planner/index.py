"""Lookups over one snapshot, built once per cycle so no decision scans the whole cluster.

At 150,000 pods a per-pod scan over nodes (or over pods per candidate) would take seconds; grouping
pods by node once and resolving each workload once keeps a cycle linear in the cluster's size.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import compress, count, islice
from operator import attrgetter, is_not
from typing import Any

from descheduler.cluster.types import ClusterSnapshot, Node, Pod, Rollout, Workload

_CREATED = attrgetter("created")

PodMemo = dict[str, tuple[Any, ...]]
"""``pod.uid -> (pod, values...)``: values derived from one pod object, valid while ``entry[0] is pod``
(the watch cache replaces a changed pod by a new object; pods sharing a uid just take turns)."""

NodeMemo = dict[str, tuple[Any, ...]]
"""``node name -> (bucket, values...)``: values derived from the node's ``pods_on`` list (and whatever the
entry also holds), valid while ``entry[0]`` is that very list."""


@dataclass(frozen=True, slots=True)
class WorkloadRef:
    """The workload a pod belongs to, resolved to its top controller (a ReplicaSet to its Deployment)."""

    kind: str
    namespace: str
    name: str
    identity: str
    """Stable key for limits: the top controller's uid (survives a Deployment's rollouts)."""
    replicas: int | None
    """Expected replicas; None when the controller is not in the snapshot (or of a kind we cannot read)."""
    pause: str = ""
    """Why the workload is paused (its pause annotation, or its ReplicaSet's), "" when it is not."""
    rollout: Rollout | None = None
    """A Deployment's strategy and rollout status (None: not a Deployment, or not in the snapshot)."""

    @property
    def known(self) -> bool:
        return self.replicas is not None

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def _diff(old: Sequence[Pod], new: Sequence[Pod], limit: int) -> tuple[list[Pod], list[Pod]] | None:
    """Pods of ``old`` not in ``new`` and the reverse, found by position (C loops, no per-pod Python):
    where both hold the very same object at the same place nothing changed. A pod that only moved
    comes out in both lists, which is still a correct diff. None when it exceeds ``limit``."""
    if len(old) == len(new):
        changed = list(islice(compress(count(), map(is_not, old, new)), limit + 1))
        if len(changed) > limit:
            return None
        return [old[i] for i in changed], [new[i] for i in changed]
    shorter = min(len(old), len(new))
    head = next(compress(count(), map(is_not, old, new)), shorter)
    tail = min(next(compress(count(), map(is_not, reversed(old), reversed(new))), shorter), shorter - head)
    removed = old[head : len(old) - tail]
    added = new[head : len(new) - tail]
    if len(removed) + len(added) > limit:
        return None
    return list(removed), list(added)


def _bucketed(pod: Pod) -> bool:
    """Whether the pod is in its node's bucket (``pods_by_node``): bound and not terminal."""
    return bool(pod.node_name) and pod.phase not in ("Succeeded", "Failed")


def _same_place(old: Pod, new: Pod) -> bool:
    """``new`` is ``old`` changed in what the index does not place by: the same uid, name and node, and in
    its node's bucket exactly when ``old`` was."""
    return (
        old.uid == new.uid
        and old.name == new.name
        and old.namespace == new.namespace
        and old.node_name == new.node_name
        and _bucketed(old) == _bucketed(new)
    )


class ClusterIndex:
    """Pods by node and by uid, workloads by uid and name, and lazily the pods of each workload."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        self.nodes: dict[str, Node] = {n.name: n for n in snapshot.nodes}
        self.pods_by_node: dict[str, list[Pod]] = {}
        """Non-terminal pods (terminating included) per node: what runs there and counts as ``pods``."""
        self.pod_uids: set[str] = set()
        by_node = self.pods_by_node
        for pod in snapshot.pods:
            self.pod_uids.add(pod.uid)
            if pod.node_name and pod.phase not in ("Succeeded", "Failed"):
                bucket = by_node.get(pod.node_name)
                if bucket is None:
                    by_node[pod.node_name] = [pod]
                else:
                    bucket.append(pod)
        self._unique_uids = len(self.pod_uids) == len(snapshot.pods)
        self._pod_keys: set[str] | None = None
        self._workloads_by_uid: dict[str, Workload] = {}
        self._workloads_by_name: dict[tuple[str, str, str], Workload] = {}
        for workload in snapshot.workloads:
            if workload.uid:
                self._workloads_by_uid[workload.uid] = workload
            self._workloads_by_name[(workload.kind, workload.namespace, workload.name)] = workload
        self._resolved: dict[tuple[str, str, str, str], WorkloadRef] = {}
        self._unavailable: dict[str, set[str]] | None = None
        self._node_of_key: dict[str, str] | None = None
        """Lazily: ``namespace/name`` -> node of every pod in ``pods_by_node`` (``nodes_holding``)."""
        self._shared_keys: dict[str, set[str]] = {}
        """Names that more than one bucketed pod has (none in a real cluster), with all their nodes."""
        self._memos: dict[str, tuple[object, PodMemo]] = {}
        self._requested: dict[str, dict[str, int]] = {}
        self._youngest: dict[str, float] = {}
        self._node_memos: dict[str, tuple[object, NodeMemo]] = {}
        self.workloads_version = object()
        """The same object in a derived index whose workloads are those of this one (so is every
        ``workload_of`` answer), a new one otherwise: what a memo of workload-dependent values checks."""

    def updated(self, snapshot: ClusterSnapshot) -> ClusterIndex | None:
        """The index of ``snapshot``, built from this one when they differ in a few pods (the watch cache
        keeps unchanged pods as the same objects, in the same order); None when a full build is as cheap
        or the shortcut does not apply. Equal to ``ClusterIndex(snapshot)`` (a randomised test checks it)."""
        if not self._unique_uids:
            return None
        diff = _diff(self.snapshot.pods, snapshot.pods, len(snapshot.pods) // 8)
        if diff is None:
            return None
        removed, added = diff
        # The common change: a pod's status or metadata, so a new object for the same pod in the same place
        # on the same node. Then the uids, names and nodes are the parent's, and each such bucket only has
        # the new object where the old one was.
        in_place = len(removed) == len(added) and all(map(_same_place, removed, added))
        uids = self.pod_uids if in_place else self._uids_after(removed, added, len(snapshot.pods))
        if uids is None:
            return None
        index = ClusterIndex.__new__(ClusterIndex)
        index.snapshot = snapshot
        index.nodes = {n.name: n for n in snapshot.nodes}
        index.pod_uids = uids
        index._unique_uids = True
        index._pod_keys = self._pod_keys if in_place else None
        touched = {p.node_name for p in (*removed, *added) if p.node_name}
        if in_place:
            index.pods_by_node = self._buckets_swapped(removed, added)
        else:
            index.pods_by_node = self._buckets_rebuilt(snapshot, touched)
        self._carry_workloads(index)
        index._unavailable = None
        index._node_of_key = None
        index._shared_keys = {}
        if in_place:  # the same names on the same nodes (read only: shared)
            index._node_of_key, index._shared_keys = self._node_of_key, self._shared_keys
        elif self._node_of_key is not None and not self._shared_keys:
            index._carry_node_of_key(self._node_of_key, removed, added)
        self._carry_memos(index, removed, touched)
        return index

    def _uids_after(self, removed: list[Pod], added: list[Pod], pods: int) -> set[str] | None:
        """The uids once ``removed`` left and ``added`` came; None when they are no longer unique (only a
        full build counts duplicates right)."""
        uids = set(self.pod_uids)
        for pod in removed:
            uids.discard(pod.uid)
        for pod in added:
            if pod.uid in uids:
                return None
            uids.add(pod.uid)
        return uids if len(uids) == pods else None

    def _buckets_swapped(self, removed: list[Pod], added: list[Pod]) -> dict[str, list[Pod]]:
        """The buckets after pods changed in place: each new object where its old one was, in a copy of
        that node's bucket (the parent's stays as it was); every other bucket shared."""
        by_node = dict(self.pods_by_node)
        for old, new in zip(removed, added, strict=True):
            if not _bucketed(old):
                continue
            own = by_node[old.node_name]
            if own is self.pods_by_node[old.node_name]:
                own = by_node[old.node_name] = list(own)
            own[next(i for i, pod in enumerate(own) if pod is old)] = new
        return by_node

    def _buckets_rebuilt(self, snapshot: ClusterSnapshot, touched: set[str]) -> dict[str, list[Pod]]:
        """The buckets with the touched nodes' built again, in snapshot order, exactly as the full build
        fills them; every other bucket shared."""
        by_node = dict(self.pods_by_node)
        for name in touched:
            by_node.pop(name, None)
        if touched:
            for pod in snapshot.pods:
                name = pod.node_name
                if name in touched and pod.phase not in ("Succeeded", "Failed"):
                    bucket = by_node.get(name)
                    if bucket is None:
                        by_node[name] = [pod]
                    else:
                        bucket.append(pod)
        return by_node

    def _carry_workloads(self, index: ClusterIndex) -> None:
        """The workload look-ups of ``index``: this index's when its snapshot has the same workloads
        (resolutions read the workloads alone), else built afresh under a new ``workloads_version``."""
        workloads = index.snapshot.workloads
        if workloads == self.snapshot.workloads:
            index._workloads_by_uid = self._workloads_by_uid
            index._workloads_by_name = self._workloads_by_name
            index._resolved = self._resolved
            index.workloads_version = self.workloads_version
            return
        index._workloads_by_uid = {}
        index._workloads_by_name = {}
        for workload in workloads:
            if workload.uid:
                index._workloads_by_uid[workload.uid] = workload
            index._workloads_by_name[(workload.kind, workload.namespace, workload.name)] = workload
        index._resolved = {}
        index.workloads_version = object()

    def _carry_memos(self, index: ClusterIndex, removed: list[Pod], touched: set[str]) -> None:
        """Per-pod results of the unchanged pods carry over (a removed pod's entry goes with it), and the
        per-node ones of the nodes whose pods did not change (a touched node's entries held for a bucket
        it no longer has: dropped to free them)."""
        index._memos = {}
        for name, (token, memo) in self._memos.items():
            carried = dict(memo)
            for pod in removed:
                entry = carried.get(pod.uid)
                if entry is not None and entry[0] is pod:
                    del carried[pod.uid]
            index._memos[name] = (token, carried)
        requested, youngest = dict(self._requested), dict(self._youngest)
        for name in touched:
            requested.pop(name, None)
            youngest.pop(name, None)
        index._requested, index._youngest = requested, youngest
        index._node_memos = {}
        for name, (token, node_memo) in self._node_memos.items():
            kept = dict(node_memo)
            for node in touched:
                kept.pop(node, None)
            index._node_memos[name] = (token, kept)

    def _carry_node_of_key(self, parent: dict[str, str], removed: list[Pod], added: list[Pod]) -> None:
        """``_node_of_key`` from the parent index's after a diff (a copy is C-speed; 150,000 keys are not)."""
        mapping = dict(parent)
        for pod in removed:
            if mapping.get(pod.key) == pod.node_name:
                del mapping[pod.key]
        for pod in added:
            if pod.node_name and pod.phase not in ("Succeeded", "Failed"):
                mapping[pod.key] = pod.node_name
        # Any doubt (a name shared with another pod, lost or doubled by the diff) and it is built afresh.
        if len(mapping) == sum(map(len, self.pods_by_node.values())):
            self._node_of_key = mapping

    def nodes_holding(self, keys: Iterable[str]) -> set[str]:
        """The nodes of the bucketed pods named by ``keys`` (``namespace/name``; other names are ignored).

        The usage estimate asks it which nodes have any pod sample at all: the others need no per-pod
        look-ups (a cycle fetches pod usage for a few nodes only)."""
        if self._node_of_key is None:
            mapping: dict[str, str] = {}
            shared: dict[str, set[str]] = {}
            for name, pods in self.pods_by_node.items():
                for pod in pods:
                    key = f"{pod.namespace}/{pod.name}"
                    other = mapping.setdefault(key, name)
                    if other != name:
                        shared.setdefault(key, {other}).add(name)
            self._node_of_key, self._shared_keys = mapping, shared
        names = list(keys)
        found = {node for node in map(self._node_of_key.get, names) if node is not None}
        if self._shared_keys:
            for key in names:
                found |= self._shared_keys.get(key, set())
        return found

    @property
    def unique_uids(self) -> bool:
        """Whether no two pods of the snapshot share a uid."""
        return self._unique_uids

    def pods_on(self, node: str) -> list[Pod]:
        return self.pods_by_node.get(node, [])

    def pod_memo(self, name: str, token: object = None) -> PodMemo:
        """The memo ``name`` of values that depend on a pod object and on ``token`` alone (compared with
        ``==``: a different token, say other settings, starts it afresh), by uid; an entry holds for the very
        pod object it was made from. It lives as long as the index and is carried to the index ``updated``
        derives, without the removed pods, so a steady cycle computes such values only for the pods that
        changed. Whatever else a value reads belongs in ``token``, or in the entry (``workloads_version``)."""
        found = self._memos.get(name)
        if found is None or found[0] != token:
            found = self._memos[name] = (token, {})
        return found[1]

    def node_memo(self, name: str, token: object = None) -> NodeMemo:
        """Like ``pod_memo``, per node: values that depend on the node's bucket (the ``pods_on`` list) and on
        ``token`` alone; an entry holds while ``entry[0] is pods_on(node)``. The bucket of a node whose pods
        did not change is the same list in the index ``updated`` derives, so such values carry over."""
        found = self._node_memos.get(name)
        if found is None or found[0] != token:
            found = self._node_memos[name] = (token, {})
        return found[1]

    def youngest_on(self, node: str) -> float:
        """The latest creation time of the node's pods (``pods_on``; 0 without pods). Carried by ``updated``
        for the nodes whose pods did not change."""
        found = self._youngest.get(node)
        if found is None:
            found = self._youngest[node] = max(map(_CREATED, self.pods_by_node.get(node, ())), default=0.0)
        return found

    def requested_on(self, node: str) -> dict[str, int]:
        """The summed requests of the node's pods (``pods_on``), per resource. Shared: callers copy it
        before adding to it. Carried by ``updated`` for the nodes whose pods did not change."""
        total = self._requested.get(node)
        if total is None:
            total = {}
            for pod in self.pods_by_node.get(node, ()):
                for name, amount in pod.requests.items():
                    total[name] = total.get(name, 0) + amount
            self._requested[node] = total
        return total

    def pod_exists(self, uid: str, key: str) -> bool:
        if uid:
            return uid in self.pod_uids
        if self._pod_keys is None:
            self._pod_keys = {p.key for p in self.snapshot.pods}
        return key in self._pod_keys

    def _find(self, kind: str, namespace: str, name: str, uid: str) -> Workload | None:
        found = self._workloads_by_uid.get(uid) if uid else None
        if found is not None and found.kind == kind:
            return found
        return self._workloads_by_name.get((kind, namespace, name))

    def workload_of(self, pod: Pod) -> WorkloadRef | None:
        """The pod's workload; None for a bare pod. Unknown controllers come back with ``replicas=None``."""
        owner = pod.owner
        if owner is None:
            return None
        cache_key = (owner.kind, pod.namespace, owner.name, owner.uid)
        cached = self._resolved.get(cache_key)
        if cached is not None:
            return cached
        ref = self._resolve(owner.kind, pod.namespace, owner.name, owner.uid)
        self._resolved[cache_key] = ref
        return ref

    def _resolve(self, kind: str, namespace: str, name: str, uid: str) -> WorkloadRef:
        identity = uid or f"{kind}/{namespace}/{name}"
        workload = self._find(kind, namespace, name, uid)
        if workload is None:
            return WorkloadRef(kind, namespace, name, identity, None)
        if kind == "ReplicaSet" and workload.owner is not None and workload.owner.kind == "Deployment":
            parent = workload.owner
            deployment = self._find("Deployment", namespace, parent.name, parent.uid)
            parent_identity = parent.uid or f"Deployment/{namespace}/{parent.name}"
            # A ReplicaSet's spec.replicas follows its Deployment's; use it when the Deployment is absent.
            replicas = deployment.replicas if deployment is not None else workload.replicas
            pause = (deployment.pause if deployment is not None else "") or workload.pause
            rollout = deployment.rollout if deployment is not None else None
            return WorkloadRef(
                "Deployment", namespace, parent.name, parent_identity, replicas, pause=pause, rollout=rollout
            )
        uid = workload.uid or identity
        return WorkloadRef(
            kind, namespace, name, uid, workload.replicas, pause=workload.pause, rollout=workload.rollout
        )

    def unavailable_pods(self, identity: str) -> set[str]:
        """Keys of the workload's pods that are not running and ready (terminating ones included).

        Built on first use from the few unavailable pods only, so the cost is one attribute scan.
        """
        if self._unavailable is None:
            grouped: dict[str, set[str]] = {}
            for pod in self.snapshot.pods:
                if pod.ready and not pod.terminating and pod.phase not in ("Succeeded", "Failed"):
                    continue
                ref = self.workload_of(pod)
                if ref is not None:
                    grouped.setdefault(ref.identity, set()).add(pod.key)
            self._unavailable = grouped
        return self._unavailable.get(identity, set())


class IndexCache:
    """The index of the snapshot planned last, kept by whoever plans cycle after cycle (the service's
    ``CycleRunner``, one ``simulate`` run) and passed to ``plan`` and ``pod_usage_nodes``.

    A cycle classifies nodes for the usage fetch and then plans on one snapshot, and the watch cache
    hands out the same snapshot while nothing changed: both find the index here instead of building it
    again, and the next cycle's is derived from it when only a few pods changed (``updated``). It only
    saves work: a plan made with any cache, shared or not, equals the plan made without one. It belongs
    to its caller, never to the process, so two callers in one process do not see each other."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: ClusterIndex | None = None
        """The index handed out last (None before the first)."""

    def index_of(self, snapshot: ClusterSnapshot) -> ClusterIndex:
        """The index of ``snapshot``: the last one if it is of this very snapshot object, else derived
        from the last one, else built."""
        last = self.last
        if last is not None and last.snapshot is snapshot:
            return last
        index = last.updated(snapshot) if last is not None else None
        if index is None:
            index = ClusterIndex(snapshot)
        self.last = index
        return index
