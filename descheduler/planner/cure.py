"""A cure in rounds: when a confirmed hotspot whose own evictions keep it confirmed may go on.

Koordinator selects what a hot node needs and lets its migrations run as slots free up; we evict at most
``maxMigratingPerNode`` pods of a node per round. So that a second round does not wait for N fresh over
cycles, ``record.commit`` keeps an evicted-from hotspot confirmed (``state.reset_anomalies``) with its
count at 0. Until it has N over cycles again, such a node is *continuing*: it is a source only when its
previous round is over, i.e. every migration from it started since its confirmation less
``anomalyCondition.timeout`` has

- left the server (the evicted pod is gone, the outcome is known), and
- for a workload's pod, a replacement that is bound and Ready (bare pods have none to wait for).

Readings that predate the round still hold the evicted pods; the estimate subtracts them
(``estimate.py``), and the node is judged on that, so they never cause extra evictions.
"""

from __future__ import annotations

from collections.abc import Iterable

from descheduler.planner.anomaly import Rule
from descheduler.planner.index import ClusterIndex
from descheduler.planner.state import FAILED, AnomalyCount, Migration


def continuing(count: AnomalyCount | None, rule: Rule) -> bool:
    """Confirmed by its own earlier round rather than by N over cycles since it."""
    return (
        count is not None
        and count.confirmed is not None
        and rule.consecutive_abnormalities > 1
        and count.count < rule.consecutive_abnormalities
    )


def in_motion(node: str, migrations: Iterable[Migration], index: ClusterIndex, since: float) -> str:
    """Why the node's previous round is not over yet ("" when it is). ``since``: migrations that started
    earlier are no round of this cure (the caller passes the confirmation less ``timeout``, so a round
    that took a whole cycle to send still counts)."""
    for m in migrations:
        if m.node != node or m.restart == FAILED or m.started < since:
            continue
        if m.unresolved or index.pod_exists(m.uid, m.pod):
            return f"pod {m.pod} evicted by the previous round is still leaving"
        if m.workload and not _replacement_ready(m, index):
            return f"the replacement of pod {m.pod} evicted by the previous round is not Ready yet"
    return ""


def _replacement_ready(m: Migration, index: ClusterIndex) -> bool:
    if not m.replacement or not m.landed:
        return False
    return any(p.key == m.replacement and p.ready for p in index.pods_on(m.landed))
