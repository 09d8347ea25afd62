"""What the planner remembers between cycles, as an explicit immutable value.

How ``plan`` and ``commit`` share the work (the clock is always an argument, never read):

1. ``plan(snapshot, usage, config, state, now)`` decides and returns ``Plan.state``: the input state with
   this cycle's anomaly counts applied (over: +1, not over: 0) and migrations that no longer matter
   dropped. It records no migration and resets no count for the evictions it proposes, because
   nothing has been evicted yet.
2. The caller runs the evictions (or not: dry-run) and calls ``commit(plan.state, plan, evicted, now)``
   with the keys of the pods that really were evicted. Only those become recorded migrations, and only
   their source nodes get their anomaly counts reset. A failed eviction therefore changes nothing: the
   node stays a hotspot and is acted on again next cycle.
3. The state returned by ``commit`` is what the next ``plan`` receives. In dry-run, ``commit`` with no
   evicted pods keeps a hotspot a hotspot, so every audit cycle shows what would be done.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from descheduler.planner.model import Plan


@dataclass(frozen=True, slots=True)
class AnomalyCount:
    """Consecutive cycles a node has been over, and when that count was last written."""

    count: int
    updated: float


@dataclass(frozen=True, slots=True)
class Migration:
    """An eviction that really happened: limits count it while it is in flight or in its window."""

    pod: str
    """``namespace/name`` of the evicted pod."""
    uid: str
    namespace: str
    node: str
    """The node the pod was evicted from."""
    workload: str
    """Identity of the pod's workload (see ``WorkloadRef.identity``), empty for bare pods."""
    started: float


@dataclass(frozen=True, slots=True)
class Departure:
    """A pod this descheduler evicted: its load stays in its old node's sample for one metrics window."""

    pod: str
    """``namespace/name``."""
    uid: str
    node: str
    workload: str
    """Workload identity (``WorkloadRef.identity``), empty for bare pods."""
    created: float
    left: float
    """When it was evicted (seconds since the epoch)."""
    usage: Mapping[str, int]
    """The pod's usage sample when it was evicted."""


@dataclass(frozen=True)
class PlannerState:
    """Anomaly counters per node and recorded migrations. ``PlannerState()`` is the empty state.

    The mappings are never mutated: every change builds a new state.
    """

    anomalies: Mapping[str, AnomalyCount] = field(default_factory=dict)
    prod_anomalies: Mapping[str, AnomalyCount] = field(default_factory=dict)
    """Counters of the prod pass (``prodHighThresholds``), kept apart from the node's overall ones."""
    migrations: tuple[Migration, ...] = ()
    departures: tuple[Departure, ...] = ()
    """Pods evicted less than one metrics window (plus ``nodeMetricExpirationSeconds``) ago, with their
    usage: their load is still in their old node's sample (see ``estimate.py``)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "anomalies": {
                k: {"count": v.count, "updated": v.updated} for k, v in sorted(self.anomalies.items())
            },
            "prodAnomalies": {
                k: {"count": v.count, "updated": v.updated} for k, v in sorted(self.prod_anomalies.items())
            },
            "migrations": [
                {
                    "pod": m.pod,
                    "uid": m.uid,
                    "namespace": m.namespace,
                    "node": m.node,
                    "workload": m.workload,
                    "started": m.started,
                }
                for m in self.migrations
            ],
            "departures": [
                {
                    "pod": d.pod,
                    "uid": d.uid,
                    "node": d.node,
                    "workload": d.workload,
                    "created": d.created,
                    "left": d.left,
                    "usage": dict(d.usage),
                }
                for d in self.departures
            ],
        }


def commit(state_after_plan: PlannerState, plan: Plan, evicted: Collection[str], now: float) -> PlannerState:
    """Record the evictions that really happened (pod keys in ``evicted``) into the plan's state.

    Each becomes a migration started at ``now`` and resets its source node's anomaly counts (overall
    and prod). Planned evictions missing from ``evicted`` leave no trace. A key that the plan did not
    propose is a caller bug and raises ``ValueError``.
    """
    done = set(evicted)
    if not done:
        return state_after_plan
    planned = {e.pod.key: e for e in plan.evictions}
    unknown = sorted(done - planned.keys())
    if unknown:
        raise ValueError(f"commit: pods {unknown} were not planned for eviction in this plan")
    anomalies = dict(state_after_plan.anomalies)
    prod_anomalies = dict(state_after_plan.prod_anomalies)
    migrations = list(state_after_plan.migrations)
    departures = list(state_after_plan.departures)
    for key in sorted(done):
        eviction = planned[key]
        migrations.append(
            Migration(
                pod=key,
                uid=eviction.pod.uid,
                namespace=eviction.pod.namespace,
                node=eviction.node,
                workload=eviction.workload,
                started=now,
            )
        )
        departures.append(
            Departure(
                pod=key,
                uid=eviction.pod.uid,
                node=eviction.node,
                workload=eviction.workload,
                created=eviction.pod.created,
                left=now,
                usage={name: amount for name, amount in eviction.usage.items() if name != "pods"},
            )
        )
        anomalies[eviction.node] = AnomalyCount(0, now)
        if eviction.node in prod_anomalies:
            prod_anomalies[eviction.node] = AnomalyCount(0, now)
    return PlannerState(
        anomalies=anomalies,
        prod_anomalies=prod_anomalies,
        migrations=tuple(migrations),
        departures=tuple(departures),
    )


def forget(state: PlannerState, pods: Collection[tuple[str, str]]) -> PlannerState:
    """Drop the recorded migrations (and departures) of ``(pod key, uid)`` pairs: evictions of unknown
    outcome that the cache has since shown did not happen. Anomaly counts stay as they are (reset is the
    safe side)."""
    gone = set(pods)
    if not gone:
        return state
    kept = tuple(m for m in state.migrations if (m.pod, m.uid) not in gone)
    departures = tuple(d for d in state.departures if (d.pod, d.uid) not in gone)
    if len(kept) == len(state.migrations) and len(departures) == len(state.departures):
        return state
    return PlannerState(
        anomalies=state.anomalies,
        prod_anomalies=state.prod_anomalies,
        migrations=kept,
        departures=departures,
    )
