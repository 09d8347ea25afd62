"""How many pods may move: per-cycle limits, migration limits over migrations in flight, and PDBs.

Counting rules (documented in the README's configuration reference):

- ``maxNoOfPodsToEvict{PerNode,PerNamespace,Total}`` count this cycle's evictions; unset is no limit,
  0 allows none (as the Kubernetes descheduler).
- ``maxMigrating{PerNode,PerNamespace,Globally}`` count migrations in flight (a recorded eviction whose
  pod still exists, e.g. terminating) plus this cycle's; unset or 0 is no limit (as Koordinator).
- ``maxMigratingPerWorkload`` and ``maxUnavailablePerWorkload`` are an int or a percent of the expected
  replicas (scaled down, at least 1, capped at the replicas, as Koordinator); 0 is no limit; unset uses
  Koordinator's table (more than 10 replicas: 10% rounded down, 4 to 10: 2, fewer: 1). Unavailable pods
  are the workload's pods that are not running and ready, plus those migrating.
- ``objectLimiters.workload`` allows at most ``maxMigrating`` (default: as maxMigratingPerWorkload)
  evictions per workload within ``duration`` (a sliding window over recorded migrations).
- A PodDisruptionBudget allows ``status.disruptionsAllowed`` evictions of its pods in a cycle; a pod
  matched by more than one PDB cannot be evicted at all (the Eviction API refuses it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import UTC, datetime

from descheduler.cluster.selectors import selector_matches
from descheduler.cluster.types import Pod, PodDisruptionBudget
from descheduler.planner import reasons
from descheduler.planner.controls import Spending
from descheduler.planner.index import ClusterIndex, PodMemo, WorkloadRef
from descheduler.planner.settings import Settings
from descheduler.planner.state import FAILED, Migration

_NONE: frozenset[str] = frozenset()

POD = "pod"
NODE = "node"
GLOBAL = "global"


def default_workload_max(replicas: int) -> int:
    """Koordinator's table for an unset per-workload limit: more than 10 replicas 10% (rounded down,
    at least 1), 4 to 10 replicas 2, fewer 1."""
    if replicas > 10:
        return max(1, replicas * 10 // 100)
    if replicas >= 4:
        return 2
    return 1


def workload_max(replicas: int | None, value: int | str | None) -> int | None:
    """A per-workload limit for ``replicas`` expected replicas; None means no limit.

    0 (or ``"0%"``) is no limit; unset is Koordinator's table; a percentage is scaled down (Kubernetes'
    ``GetScaledValueFromIntOrPercent`` without rounding up) with a minimum of 1. The result never exceeds
    the replicas, so a workload scaled to 0 allows none. Unknown replicas (a pod whose controller is not
    in the snapshot, moved only by the evict annotation) get the most careful limit: 1 (or the int given).
    """
    if value in (0, "0%"):
        return None
    if replicas is None:
        return value if isinstance(value, int) else 1
    if value is None:
        result = default_workload_max(replicas)
    elif isinstance(value, int):
        result = value
    else:
        result = max(1, replicas * int(value.rstrip("%")) // 100)
    return min(result, replicas)


def describe_workload_max(value: int | str | None, replicas: int | None, result: int) -> str:
    """Where a per-workload number came from, for skip messages (``2 (25% of 10 replicas, rounded down)``)."""
    if value is None:
        return f"{result} (unset: Koordinator's table for {replicas} replicas)"
    if isinstance(value, str) and replicas is not None:
        return f"{result} ({value} of {replicas} replicas, rounded down, at least 1)"
    return str(result)


@dataclass(frozen=True, slots=True)
class LimitHit:
    code: str
    message: str
    scope: str
    """``pod``: only this pod; ``node``: every further pod of this node; ``global``: every further pod."""


def in_flight(migrations: Iterable[Migration], index: ClusterIndex) -> list[Migration]:
    """Migrations whose pod still exists in the snapshot (typically terminating); not a failed restart's,
    whose old pod stays (``surge.follow_restarts``)."""
    return [m for m in migrations if m.restart != FAILED and index.pod_exists(m.uid, m.pod)]


class LimitTracker:
    """Counts migrations in flight and this cycle's evictions, and says which limit a new one would break."""

    def __init__(self, settings: Settings, index: ClusterIndex, migrations: Iterable[Migration], now: float):
        self.settings = settings
        self.index = index
        recorded = list(migrations)
        flying = in_flight(recorded, index)
        self.migrating_node: Counter[str] = Counter(m.node for m in flying)
        self.migrating_namespace: Counter[str] = Counter(m.namespace for m in flying)
        self.migrating_total = len(flying)
        self.migrating_pods = {m.uid or m.pod for m in flying}
        self.migrating_workload: dict[str, set[str]] = {}
        for m in flying:
            if m.workload:
                self.migrating_workload.setdefault(m.workload, set()).add(m.pod)
        self.window: Counter[str] = Counter()
        limit = settings.object_limit
        if limit is not None:
            self.window.update(
                m.workload for m in recorded if m.workload and m.in_window(limit.duration, now)
            )
        self.spending = Spending(settings.budget, recorded, now) if settings.budget is not None else None
        """``churnBudget``: every recorded migration inside its period, and this cycle's."""
        self.now = now
        self.evicted_node: Counter[str] = Counter()
        self.evicted_namespace: Counter[str] = Counter()
        self.evicted_total = 0
        self._maxima: dict[int, tuple[WorkloadRef, int | None, int | None, int | None]] = {}
        """Per resolved workload (by identity), its object limiter's, maxMigratingPerWorkload's and
        maxUnavailablePerWorkload's number: pure functions of its replicas and the settings."""

    def _workload_maxima(self, workload: WorkloadRef) -> tuple[int | None, int | None, int | None]:
        found = self._maxima.get(id(workload))
        if found is not None and found[0] is workload:
            return found[1], found[2], found[3]
        s = self.settings
        limit = s.object_limit
        window_max = None
        if limit is not None:
            source = limit.max_migrating if limit.max_migrating is not None else s.max_migrating_per_workload
            window_max = workload_max(workload.replicas, source)
        max_migrating = workload_max(workload.replicas, s.max_migrating_per_workload)
        max_unavailable = workload_max(workload.replicas, s.max_unavailable_per_workload)
        self._maxima[id(workload)] = (workload, window_max, max_migrating, max_unavailable)
        return window_max, max_migrating, max_unavailable

    def check(self, pod: Pod, node: str, workload: WorkloadRef | None) -> LimitHit | None:
        s = self.settings
        if (pod.uid or pod.key) in self.migrating_pods:
            return LimitHit(
                reasons.ALREADY_MIGRATING,
                "this pod's eviction is already in flight (it has not left yet)",
                POD,
            )
        if s.max_total is not None and self.evicted_total + 1 > s.max_total:
            return LimitHit(reasons.LIMIT_TOTAL, f"maxNoOfPodsToEvictTotal ({s.max_total}) reached", GLOBAL)
        if s.max_migrating_globally is not None and self.migrating_total >= s.max_migrating_globally:
            return LimitHit(
                reasons.MIGRATING_GLOBALLY,
                f"{self.migrating_total} pods migrating, maxMigratingGlobally is {s.max_migrating_globally}",
                GLOBAL,
            )
        spending = self.spending
        if spending is not None:
            if spending.left_total()[0] == 0:
                return LimitHit(reasons.BUDGET_SPENT, spending.spent_message(None), GLOBAL)
            if spending.left_in(pod.namespace)[0] == 0:
                return LimitHit(reasons.BUDGET_SPENT, spending.spent_message(pod.namespace), POD)
        if s.max_per_node is not None and self.evicted_node[node] + 1 > s.max_per_node:
            return LimitHit(
                reasons.LIMIT_PER_NODE,
                f"maxNoOfPodsToEvictPerNode ({s.max_per_node}) reached on {node}",
                NODE,
            )
        if s.max_migrating_per_node is not None and self.migrating_node[node] >= s.max_migrating_per_node:
            return LimitHit(
                reasons.MIGRATING_PER_NODE,
                f"{self.migrating_node[node]} pods migrating from {node}, maxMigratingPerNode is "
                f"{s.max_migrating_per_node}",
                NODE,
            )
        ns = pod.namespace
        if s.max_per_namespace is not None and self.evicted_namespace[ns] + 1 > s.max_per_namespace:
            return LimitHit(
                reasons.LIMIT_PER_NAMESPACE,
                f"maxNoOfPodsToEvictPerNamespace ({s.max_per_namespace}) reached in namespace {ns}",
                POD,
            )
        if (
            s.max_migrating_per_namespace is not None
            and self.migrating_namespace[ns] >= s.max_migrating_per_namespace
        ):
            return LimitHit(
                reasons.MIGRATING_PER_NAMESPACE,
                f"{self.migrating_namespace[ns]} pods migrating in namespace {ns}, "
                f"maxMigratingPerNamespace is {s.max_migrating_per_namespace}",
                POD,
            )
        if workload is not None:
            return self._check_workload(pod, workload)
        return None

    def _check_workload(self, pod: Pod, workload: WorkloadRef) -> LimitHit | None:
        s = self.settings
        limit = s.object_limit
        window_max, max_migrating, max_unavailable = self._workload_maxima(workload)
        if limit is not None:
            used = self.window[workload.identity]
            if window_max is not None and used >= window_max:
                return LimitHit(
                    reasons.OBJECT_LIMITER,
                    f"{workload.describe()} already had {used} evictions in the last {limit.duration:g}s "
                    f"(objectLimiters.workload allows {window_max})",
                    POD,
                )
        migrating = self.migrating_workload.get(workload.identity, _NONE)
        if max_migrating is not None and len(migrating) >= max_migrating:
            return LimitHit(
                reasons.MIGRATING_PER_WORKLOAD,
                f"{len(migrating)} pods of {workload.describe()} migrating, "
                "maxMigratingPerWorkload is "
                f"{describe_workload_max(s.max_migrating_per_workload, workload.replicas, max_migrating)}",
                POD,
            )
        if max_unavailable is not None:
            unavailable: AbstractSet[str] = self.index.unavailable_pods(workload.identity)
            if migrating:
                unavailable = migrating | unavailable
            if len(unavailable) >= max_unavailable:
                allowed = describe_workload_max(
                    s.max_unavailable_per_workload, workload.replicas, max_unavailable
                )
                return LimitHit(
                    reasons.UNAVAILABLE_PER_WORKLOAD,
                    f"{len(unavailable)} pods of {workload.describe()} unavailable or migrating, "
                    f"maxUnavailablePerWorkload is {allowed}",
                    POD,
                )
        return None

    def record(self, pod: Pod, node: str, workload: WorkloadRef | None) -> None:
        if self.spending is not None:
            self.spending.add(pod.namespace, self.now)
        self.evicted_total += 1
        self.evicted_node[node] += 1
        self.evicted_namespace[pod.namespace] += 1
        self.migrating_total += 1
        self.migrating_node[node] += 1
        self.migrating_namespace[pod.namespace] += 1
        self.migrating_pods.add(pod.uid or pod.key)
        if workload is not None:
            self.migrating_workload.setdefault(workload.identity, set()).add(pod.key)
            self.window[workload.identity] += 1


class PdbTracker:
    """Disruptions left per PodDisruptionBudget in this cycle."""

    def __init__(
        self,
        pdbs: Iterable[PodDisruptionBudget],
        refusals: Mapping[str, float] | None = None,
        memo: PodMemo | None = None,
    ) -> None:
        self.refusals = refusals or {}
        """Budgets the API server refused recently (``namespace/name`` -> until when, wall clock)."""
        self.memo = memo
        """Each pod's matching budgets, kept across cycles by the caller while the budgets are the same
        (``ClusterIndex.pod_memo`` with the budgets as its token)."""
        self.by_namespace: dict[str, list[PodDisruptionBudget]] = {}
        """Per namespace, the budgets without ``matchLabels`` (None selectors select nothing)."""
        self.by_label: dict[tuple[str, str, str], list[PodDisruptionBudget]] = {}
        """Budgets with ``matchLabels``, under their first pair: only they can match a pod with that label."""
        for pdb in pdbs:
            if pdb.selector is None:
                continue
            if pdb.selector.match_labels:
                key, value = next(iter(pdb.selector.match_labels.items()))
                self.by_label.setdefault((pdb.namespace, key, value), []).append(pdb)
            else:
                self.by_namespace.setdefault(pdb.namespace, []).append(pdb)
        self.used: Counter[tuple[str, str]] = Counter()

    def matching(self, pod: Pod) -> list[PodDisruptionBudget]:
        """The budgets selecting the pod, looked up by its labels (a namespace can hold thousands)."""
        memo = self.memo
        if memo is None:
            return self._matching(pod)
        entry = memo.get(pod.uid)
        if entry is not None and entry[0] is pod:
            found: list[PodDisruptionBudget] = entry[1]
            return found
        found = self._matching(pod)
        memo[pod.uid] = (pod, found)
        return found

    def _matching(self, pod: Pod) -> list[PodDisruptionBudget]:
        namespace, labels = pod.namespace, pod.labels
        found = [p for p in self.by_namespace.get(namespace, ()) if selector_matches(p.selector, labels)]
        by_label = self.by_label
        if by_label:
            for key, value in labels.items():
                for pdb in by_label.get((namespace, key, value), ()):
                    if selector_matches(pdb.selector, labels):
                        found.append(pdb)
        return found

    def check(self, pod: Pod) -> LimitHit | None:
        found = self.matching(pod)
        if len(found) > 1:
            names = ", ".join(sorted(p.name for p in found))
            return LimitHit(
                reasons.PDB_MULTIPLE,
                f"matched by more than one PodDisruptionBudget ({names}): the Eviction API refuses such pods",
                POD,
            )
        if found:
            pdb = found[0]
            until = self.refusals.get(f"{pdb.namespace}/{pdb.name}")
            if until is not None:
                return LimitHit(
                    reasons.PDB_REFUSED,
                    f"the API server refused an eviction under PodDisruptionBudget {pdb.name}; none of its "
                    f"pods is tried before {_iso(until)} (its Retry-After)",
                    POD,
                )
            left = pdb.disruptions_allowed - self.used[(pdb.namespace, pdb.name)]
            if left <= 0:
                return LimitHit(
                    reasons.PDB,
                    f"PodDisruptionBudget {pdb.name} allows {pdb.disruptions_allowed} disruptions and "
                    f"{self.used[(pdb.namespace, pdb.name)]} are planned this cycle",
                    POD,
                )
        return None

    def record(self, pod: Pod) -> None:
        for pdb in self.matching(pod):
            self.used[(pdb.namespace, pdb.name)] += 1


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
