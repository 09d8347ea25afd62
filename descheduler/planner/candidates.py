"""Which pods may move at all: the MigrationController's and LowNodeLoad's filters.

Filters are properties of a pod and the configuration; limits and budgets (``limits.py``) come after.
DaemonSet, mirror, static, terminating pods and those with an eviction cost of int32 max never move.
Namespace and selector scoping always applies. The ``descheduler.alpha.kubernetes.io/evict`` annotation
is the owner's explicit consent and bypasses the safety filters that follow it (bare, critical,
priority, local storage, PVC, DRA claims, replica checks); it never bypasses limits or PDBs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from descheduler.cluster.parse import WORKLOAD_KINDS, pause_value
from descheduler.cluster.selectors import selector_matches
from descheduler.cluster.types import Pod
from descheduler.config.migration import PAUSE_ANNOTATION
from descheduler.config.models import Namespaces
from descheduler.planner import reasons
from descheduler.planner.index import ClusterIndex, WorkloadRef
from descheduler.planner.limits import workload_max
from descheduler.planner.order import EVICTION_COST, INT32_MAX, annotation_int32
from descheduler.planner.settings import Settings
from descheduler.planner.surge import surge_refusal

EVICT_ANNOTATION = "descheduler.alpha.kubernetes.io/evict"
SYSTEM_CRITICAL_PRIORITY = 2_000_000_000
BUILTIN_PRIORITY_CLASSES = {"system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}


@dataclass(frozen=True, slots=True)
class Rejection:
    code: str
    message: str


def resolve_priority_threshold(settings: Settings, index: ClusterIndex) -> tuple[int | None, str]:
    """The priority at and above which pods stay, and a problem message if a named class is unknown.

    A ``priorityThreshold.name`` is resolved from the built-in classes, else from the priority that
    admission wrote on pods using that class. If neither knows it, no pod may move (returned message).
    """
    if settings.evict_system_critical_pods:
        return None, ""
    if settings.priority_threshold_value is not None:
        return settings.priority_threshold_value, ""
    name = settings.priority_threshold_name
    if not name:
        return None, ""
    if name in BUILTIN_PRIORITY_CLASSES:
        return BUILTIN_PRIORITY_CLASSES[name], ""
    for pod in index.snapshot.pods:
        if pod.priority_class_name == name and pod.priority is not None:
            return pod.priority, ""
    return None, (
        f"priorityThreshold.name {name!r} is neither a built-in PriorityClass nor used by any pod, so its "
        "value is unknown; no pod is moved until it can be resolved"
    )


def _namespace_rejected(namespaces: Namespaces | None, namespace: str, field: str) -> Rejection | None:
    if namespaces is None:
        return None
    if namespaces.include and namespace not in namespaces.include:
        return Rejection(reasons.FILTERED_NAMESPACE, f"namespace {namespace} is not in {field}.include")
    if namespace in namespaces.exclude:
        return Rejection(reasons.FILTERED_NAMESPACE, f"namespace {namespace} is in {field}.exclude")
    return None


_WORKLOAD = Rejection("", "")
"""``PodFilter._pod_checks``' answer when only the workload checks are left to decide."""


class PodFilter:
    """Applies the filters with the cycle's resolved inputs (priority threshold, workload index).

    Verdicts are kept in the ``ClusterIndex`` (``pod_memo``), keyed by everything else they read: the
    settings and the resolved priority threshold (the memo's token), and the workloads (each entry's
    ``workloads_version``: when the workloads changed, the part decided by the pod's own fields is kept
    and the workload checks are made again). The index carries them from cycle to cycle for the pods
    that did not change, so a steady cycle decides only new pods."""

    def __init__(
        self, settings: Settings, index: ClusterIndex, threshold: tuple[int | None, str] | None = None
    ) -> None:
        """``threshold``: the priority threshold already resolved (by another index of the same cycle)."""
        self.settings = settings
        self.index = index
        resolved = threshold if threshold is not None else resolve_priority_threshold(settings, index)
        self.threshold, self.threshold_problem = resolved
        self._memo = index.pod_memo("filter", (settings, self.threshold, self.threshold_problem))
        """uid -> (pod, verdict, workloads version of the verdict, the pod's own checks' answer)."""
        self._namespace_pauses = {ns.name: ns.pause for ns in index.snapshot.namespaces if ns.pause}
        self._paused_nodes = any(node.pause for node in index.snapshot.nodes)
        self._workload_verdicts: dict[int, tuple[WorkloadRef, Rejection | None]] = {}
        """The workload checks' answer per resolved workload (by identity: the index hands out one
        ``WorkloadRef`` per owner), the same for every pod of it: each workload has pods on many hotspots."""

    def check(self, pod: Pod) -> Rejection | None:
        """Why this pod can never be moved by this configuration; None if it is a candidate."""
        version = self.index.workloads_version
        entry = self._memo.get(pod.uid)
        if entry is not None and entry[0] is pod:
            if entry[2] is version:
                verdict: Rejection | None = entry[1]
                if verdict is None and (self._namespace_pauses or self._paused_nodes):
                    return self._paused_here(pod)
                return verdict
            own: Rejection | None = entry[3]
        else:
            own = self._pod_checks(pod)
        verdict = own
        if own is _WORKLOAD:
            workload = self.index.workload_of(pod)
            known = self._workload_verdicts.get(id(workload))
            if workload is None:
                verdict = None
            elif known is not None and known[0] is workload:
                verdict = known[1]
            else:
                verdict = self._check_workload(workload)
                self._workload_verdicts[id(workload)] = (workload, verdict)
        self._memo[pod.uid] = (pod, verdict, version, own)
        if verdict is None and (self._namespace_pauses or self._paused_nodes):
            return self._paused_here(pod)
        return verdict

    def decide(self, pod: Pod) -> Rejection | None:
        """``check`` without anything remembered (what the shortcuts must agree with)."""
        own = self._pod_checks(pod)
        if own is _WORKLOAD:
            workload = self.index.workload_of(pod)
            own = None if workload is None else self._check_workload(workload)
        return own if own is not None else self._paused_here(pod)

    def _pod_checks(self, pod: Pod) -> Rejection | None:
        """The checks that read the pod, the settings and the priority threshold only: a rejection, None
        for a candidate whatever its workload, or ``_WORKLOAD`` when the workload checks decide."""
        s = self.settings
        if pod.terminating:
            return Rejection(reasons.FILTERED_TERMINATING, "pod is terminating")
        if pod.is_mirror:
            return Rejection(reasons.FILTERED_MIRROR, "mirror pod (managed by the kubelet)")
        if pod.is_static:
            return Rejection(reasons.FILTERED_STATIC, "static pod (managed by the kubelet)")
        if pod.owner is not None and pod.owner.kind == "DaemonSet":
            surge = "; surgeSingleReplica restarts Deployments only" if s.surge_single_replica else ""
            return Rejection(
                reasons.FILTERED_DAEMONSET,
                f"owned by DaemonSet {pod.owner.name}: it runs on every node{surge}",
            )
        annotations = pod.annotations
        marked = self._marked(annotations)
        if marked is not None:
            return marked
        if EVICTION_COST in annotations and annotation_int32(pod, EVICTION_COST) == INT32_MAX:
            return Rejection(
                reasons.FILTERED_EVICTION_COST, f"annotation {EVICTION_COST} is int32 max: never evicted"
            )
        if s.evictable_namespaces is not None or s.namespaces is not None:
            rejected = _namespace_rejected(
                s.evictable_namespaces, pod.namespace, "LowNodeLoadArgs.evictableNamespaces"
            )
            rejected = rejected or _namespace_rejected(
                s.namespaces, pod.namespace, "MigrationControllerArgs.namespaces"
            )
            if rejected is not None:
                return rejected
        if s.label_selector is not None and not selector_matches(s.label_selector, pod.labels):
            return Rejection(
                reasons.FILTERED_LABEL_SELECTOR, "labels do not match MigrationControllerArgs.labelSelector"
            )
        if s.pod_selectors and not any(selector_matches(sel, pod.labels) for sel in s.pod_selectors):
            return Rejection(
                reasons.FILTERED_POD_SELECTOR, "labels match none of LowNodeLoadArgs.podSelectors"
            )
        if annotations.get(EVICT_ANNOTATION) is not None:
            return None
        if pod.owner is None:
            failed_ok = s.evict_failed_bare_pods and pod.phase == "Failed"
            if not (s.evict_all_bare_pods or failed_ok):
                surge = "; surgeSingleReplica restarts Deployments only" if s.surge_single_replica else ""
                return Rejection(
                    reasons.FILTERED_BARE,
                    f"bare pod (no controller would recreate it); see evictAllBarePods{surge}",
                )
        if not s.evict_system_critical_pods:
            if pod.priority is not None and pod.priority >= SYSTEM_CRITICAL_PRIORITY:
                return Rejection(
                    reasons.FILTERED_CRITICAL,
                    f"system-critical priority {pod.priority}; see evictSystemCriticalPods",
                )
            if self.threshold_problem:
                return Rejection(reasons.FILTERED_PRIORITY, self.threshold_problem)
            if self.threshold is not None and pod.priority is not None and pod.priority >= self.threshold:
                return Rejection(
                    reasons.FILTERED_PRIORITY,
                    f"priority {pod.priority} is at or above priorityThreshold ({self.threshold})",
                )
        if pod.has_local_storage and not s.evict_local_storage_pods:
            return Rejection(
                reasons.FILTERED_LOCAL_STORAGE,
                "uses local storage (emptyDir or hostPath); see evictLocalStoragePods",
            )
        if pod.has_pvc and s.ignore_pvc_pods:
            return Rejection(reasons.FILTERED_PVC, "uses a PersistentVolumeClaim and ignorePvcPods is true")
        if pod.has_resource_claims and not s.evict_resource_claim_pods:
            return Rejection(
                reasons.FILTERED_RESOURCE_CLAIMS,
                "holds DRA devices (spec.resourceClaims); see evictResourceClaimPods",
            )
        return None if pod.owner is None else _WORKLOAD

    def _marked(self, annotations: Mapping[str, str]) -> Rejection | None:
        """An opt-out (``optOutAnnotations``) or our pause annotation on the pod. Checked before the evict
        annotation: an owner's "do not disrupt" wins over a consent to eviction."""
        for key, value in self.settings.opt_outs.items():
            found = annotations.get(key)
            if found is not None and found.strip().lower() == value:
                return Rejection(reasons.OPTED_OUT, f"annotated {key}: {found!r} (optOutAnnotations)")
        paused = pause_value(annotations)
        if paused:
            return Rejection(reasons.PAUSED, f"the pod is paused ({PAUSE_ANNOTATION}: {paused!r})")
        return None

    def _paused_here(self, pod: Pod) -> Rejection | None:
        """Its namespace or node paused: read every time (a paused namespace or node changes no pod, so
        the remembered verdicts cannot know of it), from the cycle's snapshot."""
        namespace = self._namespace_pauses.get(pod.namespace)
        if namespace:
            return Rejection(
                reasons.PAUSED, f"namespace {pod.namespace} is paused ({PAUSE_ANNOTATION}: {namespace!r})"
            )
        node = self.index.nodes.get(pod.node_name)
        if node is not None and node.pause:
            return Rejection(
                reasons.PAUSED, f"node {pod.node_name} is paused ({PAUSE_ANNOTATION}: {node.pause!r})"
            )
        return None

    def restarts(self, pod: Pod, workload: WorkloadRef | None) -> bool:
        """Whether a candidate moves by a rollout restart (``surge.py``) rather than an eviction: the
        single-replica Deployment case that ``surgeSingleReplica`` lets through (not the evict
        annotation's consent, which evicts)."""
        return (
            self.settings.surge_single_replica
            and workload is not None
            and workload.kind == "Deployment"
            and workload.replicas == 1
            and pod.annotations.get(EVICT_ANNOTATION) is None
        )

    def _check_workload(self, workload: WorkloadRef) -> Rejection | None:
        s = self.settings
        if workload.pause:
            return Rejection(
                reasons.PAUSED, f"{workload.describe()} is paused ({PAUSE_ANNOTATION}: {workload.pause!r})"
            )
        if not workload.known:
            if workload.kind in WORKLOAD_KINDS:
                message = f"{workload.describe()} is not in the snapshot: its expected replicas are unknown"
            else:
                message = (
                    f"owned by {workload.describe()}: expected replicas are read only from ReplicaSets, "
                    "Deployments, StatefulSets and ReplicationControllers, so its budgets cannot be checked"
                )
            return Rejection(reasons.WORKLOAD_UNKNOWN, message)
        if s.skip_check_expected_replicas:
            return None
        replicas = workload.replicas or 0
        if replicas == 1:
            if s.surge_single_replica:
                return _surge_rejection(workload)
            return Rejection(
                reasons.REPLICAS_ONE,
                f"{workload.describe()} expects 1 replica: evicting it is an outage; "
                "see skipCheckExpectedReplicas",
            )
        if replicas == 0:
            return Rejection(
                reasons.REPLICAS_UNPROTECTED,
                f"{workload.describe()} expects 0 replicas (scaling to zero): its pods are going away, "
                "so none is moved; see skipCheckExpectedReplicas",
            )
        max_migrating = workload_max(replicas, s.max_migrating_per_workload)
        max_unavailable = workload_max(replicas, s.max_unavailable_per_workload)
        if replicas in (max_migrating, max_unavailable):
            return Rejection(
                reasons.REPLICAS_UNPROTECTED,
                f"{workload.describe()} expects {replicas} replicas and maxMigratingPerWorkload "
                f"({max_migrating}) or maxUnavailablePerWorkload ({max_unavailable}) would allow all of them "
                "to go at once; see skipCheckExpectedReplicas",
            )
        return None


def _surge_rejection(workload: WorkloadRef) -> Rejection | None:
    """A single-replica workload under ``surgeSingleReplica``: None when a rollout restart surges first,
    else why it stays (the other kinds stay protected, with a reason that says why)."""
    if workload.kind != "Deployment":
        why = (
            "a StatefulSet's rolling update deletes its pod before it creates the new one"
            if workload.kind == "StatefulSet"
            else "only a Deployment's rollout can create the new pod first"
        )
        return Rejection(
            reasons.REPLICAS_ONE,
            f"{workload.describe()} expects 1 replica: evicting it is an outage, and surgeSingleReplica "
            f"restarts Deployments only ({why})",
        )
    refused = surge_refusal(f"{workload.namespace}/{workload.name}", workload.rollout, 1)
    return None if refused is None else Rejection(*refused)
