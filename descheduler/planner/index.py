"""Lookups over one snapshot, built once per cycle so no decision scans the whole cluster.

At 150,000 pods a per-pod scan over nodes (or over pods per candidate) would take seconds; grouping
pods by node once and resolving each workload once keeps a cycle linear in the cluster's size.
"""

from __future__ import annotations

from dataclasses import dataclass

from descheduler.cluster.types import ClusterSnapshot, Node, Pod, Workload


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

    @property
    def known(self) -> bool:
        return self.replicas is not None

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


class ClusterIndex:
    """Pods by node and by uid, workloads by uid and name, and lazily the pods of each workload."""

    _last: tuple[ClusterSnapshot, ClusterIndex] | None = None

    @classmethod
    def of(cls, snapshot: ClusterSnapshot) -> ClusterIndex:
        """The index of ``snapshot``, reused while the same snapshot object is planned again (a cycle
        classifies nodes for the usage fetch and then plans on one snapshot). Indexes hold no cycle state."""
        last = cls._last
        if last is not None and last[0] is snapshot:
            return last[1]
        index = cls(snapshot)
        cls._last = (snapshot, index)
        return index

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
        self._pod_keys: set[str] | None = None
        self._workloads_by_uid: dict[str, Workload] = {}
        self._workloads_by_name: dict[tuple[str, str, str], Workload] = {}
        for workload in snapshot.workloads:
            if workload.uid:
                self._workloads_by_uid[workload.uid] = workload
            self._workloads_by_name[(workload.kind, workload.namespace, workload.name)] = workload
        self._resolved: dict[tuple[str, str, str, str], WorkloadRef] = {}
        self._unavailable: dict[str, set[str]] | None = None

    def pods_on(self, node: str) -> list[Pod]:
        return self.pods_by_node.get(node, [])

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
            return WorkloadRef("Deployment", namespace, parent.name, parent_identity, replicas)
        return WorkloadRef(kind, namespace, name, workload.uid or identity, workload.replicas)

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
