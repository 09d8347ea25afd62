"""Decide from the cache, verify from the server: the last check before an eviction is sent.

A watch cannot know it is stale inside its read timeout (a connection that silently stopped delivering
looks exactly like a quiet cluster), so no staleness bound closes the window in which the cache still
shows a Deployment at 6 replicas that the server already holds at 1. The plan is made from the cache; right
before each eviction the service reads what the eviction rests on from the server (consistent reads: the
pod, its controller chain and the workload's pods) and this module decides, over those plain values, whether
the eviction still holds:

- the pod is the same one, on the same node, not terminating or finished (``verify-pod-changed``);
- its node and namespace carry no pause mark and the node no autoscaler's removal taint, as the server
  holds them now (``verify-refused``): an operator's mark made seconds before the request counts;
- its controller is the one the cache named and expects as many replicas as the cache said
  (``verify-workload-changed``): any difference means the plan was made on stale state;
- every rule that reads those objects passes again on the server's copies (``verify-refused``): the pod's
  own filters, the single-replica and scaling-to-zero protections, ``maxMigratingPerWorkload``,
  ``maxUnavailablePerWorkload`` and the per-workload window, counting this cycle's earlier evictions;
- a read that failed or timed out never lets an eviction through (``verify-unreadable``);
- a restart (``surgeSingleReplica``) is checked the same way, its Deployment's strategy and rollout status
  read fresh from the server (the pod filter's surge rules), and never overlaps one of ours.

Pure: the shell (``kube/verify.py``) does the reads; the same rules run in dry-run, so an audit shows what
a live run would do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from descheduler.cluster.types import ClusterSnapshot, Namespace, Node, Pod, Workload
from descheduler.planner import reasons
from descheduler.planner.autoscaler import removal_mark
from descheduler.planner.candidates import PodFilter
from descheduler.planner.index import ClusterIndex, WorkloadRef
from descheduler.planner.limits import LimitTracker
from descheduler.planner.model import RESTART, PlannedEviction
from descheduler.planner.settings import Settings
from descheduler.planner.state import PlannerState
from descheduler.planner.surge import recent_restart


@dataclass(frozen=True, slots=True)
class ServerView:
    """What the API server held right before the eviction, parsed like the cache parses it."""

    pod: Pod | None
    """None: the server has no pod of that name."""
    workloads: tuple[Workload, ...] = ()
    """The pod's controller chain as the server holds it (ReplicaSet, its Deployment; a StatefulSet...),
    and for a Deployment its other ReplicaSets, so every pod of the workload resolves to it."""
    pods: tuple[Pod, ...] = ()
    """The workload's pods as the server lists them (the pod itself included)."""
    problem: str = ""
    """Why the view is incomplete (a read failed or timed out): nothing is evicted on it."""
    requests: int = 0
    """How many API requests the view took (reported: the cost of verifying)."""
    node: Node | None = None
    """The pod's node as the server holds it (None: not there): its pause mark and taints."""
    namespace: Namespace | None = None
    """The pod's namespace as the server holds it, for its pause mark (None: the server lists none, which
    cannot hold the pod: nothing there to pause it)."""
    pod_version: str = ""
    """The pod's ``metadata.resourceVersion`` as read: the eviction's precondition, so the server applies
    it only to exactly the pod verified here (409 Conflict otherwise)."""


@dataclass(frozen=True, slots=True)
class Disagreement:
    """Why the eviction does not hold on the server's objects; ``stale`` names the cache resources that
    disagreed with the server (the service re-lists them)."""

    code: str
    message: str
    stale: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Threshold:
    """The cycle's resolved priority threshold (``PodFilter``), reused: the server view holds only one
    workload's pods, from which a named PriorityClass could not be resolved again."""

    value: int | None
    problem: str


def recheck(
    planned: PlannedEviction,
    cached: WorkloadRef | None,
    view: ServerView,
    settings: Settings,
    state: PlannerState,
    earlier: Sequence[PlannedEviction],
    threshold: Threshold,
    now: float,
) -> Disagreement | None:
    """None when the eviction still holds on the server's objects; else what disagrees.

    ``cached`` is the workload the plan resolved from the cache (None for a bare pod); ``state`` is the
    state the plan was made from and ``earlier`` the evictions of that plan already sent (possibly
    evicted): they count exactly as the planner counted them."""
    if view.problem:
        return Disagreement(
            reasons.VERIFY_UNREADABLE,
            f"not sent: what the eviction rests on could not be read from the API server ({view.problem})",
        )
    changed = _pod_changed(planned, view.pod)
    if changed is not None:
        return changed
    pod = view.pod
    assert pod is not None  # _pod_changed answers for a missing pod
    marked = _place_marked(pod, view)
    if marked is not None:
        return marked
    assert view.node is not None  # _place_marked answers for a missing one
    index = ClusterIndex(
        ClusterSnapshot(
            nodes=(view.node,),
            pods=_with(view.pods, pod),
            workloads=view.workloads,
            namespaces=(view.namespace,) if view.namespace is not None else (),
        )
    )
    fresh = index.workload_of(pod)
    moved = _workload_changed(cached, fresh, pod)
    if moved is not None:
        return moved
    verdict = PodFilter(settings, index, threshold=(threshold.value, threshold.problem)).decide(pod)
    if verdict is not None:
        return Disagreement(
            reasons.VERIFY_REFUSED,
            f"not sent: on the API server's objects the pod is no longer a candidate ({verdict.code}: "
            f"{verdict.message})",
            ("pods", "nodes", "namespaces") if verdict.code == reasons.PAUSED else ("pods",),
        )
    if planned.action == RESTART and fresh is not None:
        window = settings.object_limit.duration if settings.object_limit is not None else 0.0
        exists = {p.uid for p in view.pods}
        earlier_same = any(e.workload == fresh.identity for e in earlier)
        found = recent_restart(state.migrations, fresh.identity, window, now, lambda m: m.uid in exists)
        if earlier_same or found is not None:
            return Disagreement(
                reasons.VERIFY_REFUSED,
                f"not sent: {fresh.describe()} was moved by us recently ({reasons.SURGE_RESTARTING}): "
                "restarts never overlap",
            )
    tracker = LimitTracker(settings, index, state.migrations, now)
    for done in earlier:
        tracker.record(
            done.pod, done.node, fresh if fresh is not None and done.workload == fresh.identity else None
        )
    hit = tracker.check(pod, planned.node, fresh)
    if hit is not None:
        return Disagreement(
            reasons.VERIFY_REFUSED,
            f"not sent: on the API server's objects a limit refuses it ({hit.code}: {hit.message})",
            ("pods",),
        )
    return None


def _with(pods: tuple[Pod, ...], pod: Pod) -> tuple[Pod, ...]:
    """The listed pods with the freshly read pod in its own place (the two reads are not one snapshot)."""
    return (*(p for p in pods if p.uid != pod.uid and p.key != pod.key), pod)


def _pod_changed(planned: PlannedEviction, current: Pod | None) -> Disagreement | None:
    chosen = planned.pod
    what = ""
    if current is None:
        what = "the API server no longer has the pod"
    elif chosen.uid and current.uid != chosen.uid:
        what = f"the pod was replaced (uid {current.uid}, the cache had {chosen.uid})"
    elif current.node_name != planned.node:
        what = f"the pod is on node {current.node_name or '(none)'} now, not {planned.node}"
    elif current.terminating:
        what = "the pod is terminating already"
    elif current.is_terminal:
        what = f"the pod has finished (phase {current.phase})"
    elif _owner_uid(current) != _owner_uid(chosen):
        what = "the pod's controller changed since the cache saw it"
    if not what:
        return None
    return Disagreement(reasons.VERIFY_POD_CHANGED, f"not sent: {what}", ("pods",))


def _place_marked(pod: Pod, view: ServerView) -> Disagreement | None:
    """Where the pod runs, as the server holds it now: a node that is gone, or one an autoscaler is
    removing, refuses the eviction (the pause marks are the pod filter's, which reads them from the node
    and namespace of the view)."""
    what = ""
    if view.node is None:
        what = f"node {pod.node_name} is not on the API server"
    else:
        mark = removal_mark(view.node)
        if mark:
            what = f"an autoscaler is removing node {pod.node_name} ({mark})"
    if not what:
        return None
    return Disagreement(reasons.VERIFY_REFUSED, f"not sent: {what}", ("nodes", "namespaces"))


def _owner_uid(pod: Pod) -> str:
    return pod.owner.uid if pod.owner is not None else ""


def _workload_changed(cached: WorkloadRef | None, fresh: WorkloadRef | None, pod: Pod) -> Disagreement | None:
    what = _workload_difference(cached, fresh, pod)
    if not what:
        return None
    stale = _resources_of(cached.kind) if cached is not None and fresh is not None else ("pods",)
    return Disagreement(reasons.VERIFY_WORKLOAD_CHANGED, f"not sent: {what}", stale)


def _workload_difference(cached: WorkloadRef | None, fresh: WorkloadRef | None, pod: Pod) -> str:
    """How the server's idea of the pod's workload differs from the cache's, or ``""``."""
    if cached is None or fresh is None:
        return "" if cached is fresh else f"the pod {pod.key} belongs to another workload on the API server"
    if fresh.replicas is None and cached.replicas is not None:
        return f"{cached.describe()} is gone from the API server (or its controller chain changed)"
    if fresh.identity != cached.identity:
        return f"the pod's workload is {fresh.describe()} on the API server, not {cached.describe()}"
    if fresh.replicas != cached.replicas:
        return (
            f"{fresh.describe()} expects {fresh.replicas} replicas on the API server, the cache said "
            f"{cached.replicas}; planning again on a refreshed cache"
        )
    return ""


def _resources_of(kind: str) -> tuple[str, ...]:
    """The cache resources a workload's expected replicas come from."""
    if kind == "Deployment":
        return ("deployments", "replicasets")
    return {
        "ReplicaSet": ("replicasets",),
        "StatefulSet": ("statefulsets",),
        "ReplicationController": ("replicationcontrollers",),
    }.get(kind, ())
