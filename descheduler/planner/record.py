"""Recording what a cycle really did: the one path by which the live service, dry-run and ``simulate`` turn
planned evictions into the state the next ``plan`` receives.

How ``plan`` and ``commit`` share the work (the clock is always an argument, never read):

1. ``plan(snapshot, usage, config, state, now)`` decides and returns ``Plan.state``: the input state with
   this cycle's anomaly detectors advanced (``anomaly.py``) and migrations that no longer matter
   dropped. It records no migration and resets no count for the evictions it proposes, because
   nothing has been evicted yet.
2. The caller runs the evictions (or not: dry-run). When the API server refuses one, it plans again
   with ``plan(..., already=sent, attempted=tried)``: the same starting state, this cycle's sent
   evictions counted as its own. At the end it calls ``commit(plan.state, evicted, now)`` with the
   planned evictions that really (or possibly) happened, whichever plan proposed them. Only those become
   recorded migrations, and only their source nodes get their anomaly counts reset. A failed eviction
   therefore changes nothing: the node stays a confirmed hotspot and is acted on again in its next
   over cycle, until its ``anomalyCondition.timeout`` runs out (``anomaly.py``).
3. The state returned by ``commit`` is what the next ``plan`` receives. In dry-run, ``commit`` with no
   evicted pods keeps a hotspot a hotspot, so every audit cycle shows what would be done.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TypedDict, Unpack

from descheduler.planner.model import RESTART, Plan, PlannedEviction
from descheduler.planner.state import RESTARTING, Departure, Migration, PlannerState, reset_anomalies


class Marks(TypedDict, total=False):
    """What a caller knows of its evictions beyond the plan, passed on to ``add_migrations``: when the
    server may last have applied each (``applied``, by pod key), when each request was sent (``sent``:
    replacements are matched from there) and which are of unknown outcome."""

    applied: Mapping[str, float] | None
    sent: Mapping[str, float] | None
    unresolved: Collection[str]


def commit(
    state: PlannerState, evictions: Sequence[PlannedEviction], now: float, **marks: Unpack[Marks]
) -> PlannerState:
    """Record the evictions that (possibly) happened into the state the cycle's plan returned: the one path
    by which the live service, dry-run and ``simulate`` record a cycle.

    Each becomes a migration (starting when the server may last have applied it: ``applied`` by pod key,
    else ``now``; those in ``unresolved`` stay in every window until ``settle_migrations``), a departure
    (its load leaves its node's sample only later), and resets its source node's anomaly counts (overall
    and prod). Planned evictions left out leave no trace: a failed eviction changes nothing.
    """
    if not evictions:
        return state
    recorded = add_migrations(state, evictions, now, **marks)
    return reset_anomalies(add_departures(recorded, evictions, now), [e.node for e in evictions], now)


def evicted_from(plan: Plan, keys: Collection[str]) -> list[PlannedEviction]:
    """The plan's evictions of the pods ``keys`` (in plan order). A key the plan did not propose is a
    caller bug and raises ``ValueError``."""
    planned = {e.pod.key for e in plan.evictions}
    unknown = sorted(set(keys) - planned)
    if unknown:
        raise ValueError(f"commit: pods {unknown} were not planned for eviction in this plan")
    wanted = set(keys)
    return [e for e in plan.evictions if e.pod.key in wanted]


def add_migrations(
    state: PlannerState,
    evictions: Iterable[PlannedEviction],
    now: float,
    *,
    applied: Mapping[str, float] | None = None,
    sent: Mapping[str, float] | None = None,
    unresolved: Collection[str] = (),
) -> PlannerState:
    """Record ``evictions`` as migrations (limits count them); counts untouched.

    Each starts when the server may last have applied it: ``applied`` by pod key (when its answer
    came), else ``now``, and keeps when it was sent (``sent`` by pod key, if known); those in
    ``unresolved`` (pod keys, outcome unknown) stay in every window until
    ``settle_migrations``. The runner also uses it to re-plan within a cycle after a refusal: what it
    already evicted must count against every limit, while the anomaly counts stay those of the cycle's
    first plan.
    """
    at = applied or {}
    left = sent or {}
    added = tuple(
        Migration(
            pod=e.pod.key,
            uid=e.pod.uid,
            namespace=e.pod.namespace,
            node=e.node,
            workload=e.workload,
            started=at.get(e.pod.key, now),
            workload_kind=e.workload_kind,
            workload_name=e.workload_name,
            unresolved=e.pod.key in unresolved,
            sent=left.get(e.pod.key, 0.0),
            restart=RESTARTING if e.action == RESTART else "",
        )
        for e in evictions
    )
    return replace(state, migrations=state.migrations + added) if added else state


def add_departures(state: PlannerState, evictions: Iterable[PlannedEviction], now: float) -> PlannerState:
    """Record ``evictions`` as departures (their load leaves their node's sample only later)."""
    added = tuple(
        Departure(
            pod=e.pod.key,
            uid=e.pod.uid,
            node=e.node,
            workload=e.workload,
            created=e.pod.created,
            left=now,
            usage={name: amount for name, amount in e.usage.items() if name != "pods"},
            restart=e.action == RESTART,
        )
        for e in evictions
    )
    return replace(state, departures=state.departures + added) if added else state
