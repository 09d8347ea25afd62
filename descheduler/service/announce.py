"""What a cycle tells the world about outcomes other than its own evictions: log lines and Events.

The runner decides; these say it, once each: evictions of unknown outcome the cache has now settled,
rollout restarts that completed or failed, and ping-pong back-offs as they begin.
"""

from __future__ import annotations

from collections.abc import Iterable

import structlog

from descheduler.cluster.types import Pod
from descheduler.kube.events import Regarding
from descheduler.planner import Plan
from descheduler.service.edges import Evictor, WorkloadEvents
from descheduler.service.records import Restore
from descheduler.service.restarts import Followed
from descheduler.service.unknown import Resolution

log = structlog.get_logger("descheduler.cycle")


def _outcome(good: bool, event: str, pod: Pod, node: str, result: str, message: str, **more: object) -> None:
    """One log line for how a pod's eviction or restart turned out: info when it went well, else warning."""
    (log.info if good else log.warning)(event, pod=pod.key, node=node, result=result, message=message, **more)


def resolved(settled: Iterable[Resolution], evictor: Evictor, now: float) -> None:
    """Earlier evictions of unknown outcome, settled from the cache: a log line and the pod's Event."""
    for r in settled:
        item = r.eviction
        _outcome(
            r.result == "evicted",
            "eviction_resolved",
            item.pod,
            item.node,
            r.result,
            r.message,
            seconds_unknown=round(now - item.sent, 3),
        )
        evictor.report_resolved(item.pod, item.node, item.reason, r.result, r.message)


def followed(restarts: Iterable[Followed], evictor: Evictor) -> None:
    """Restarts that completed (old pod gone, rolled out) or failed: told on the Deployment and pod."""
    for f in restarts:
        m = f.migration
        completed = f.result == "completed"
        _outcome(
            completed,
            "restart_followed",
            f.pod,
            m.node,
            f.result,
            f.message,
            deployment=m.workload_name,
            seconds=round(f.seconds, 3),
            new_pod=f.new_pod.key if f.new_pod is not None else None,
            new_node=f.new_pod.node_name if f.new_pod is not None else None,
        )
        evictor.report_restart(
            f.pod,
            m.workload_name,
            "Normal" if completed else "Warning",
            "RestartCompleted" if completed else "RestartFailed",
            f"Rollout restart to move pod {f.pod.name} off node {m.node} {f.message}",
        )


def backoffs(decided: Plan, events: WorkloadEvents | None, dry_run: bool) -> None:
    """Once per episode, that the ping-pong guard backs a workload off: a log line and a Warning Event on
    the workload (the metric and the audit's skips come from the cycle record)."""
    for backoff in decided.new_backoffs():
        log.warning(
            "ping_pong_backoff",
            workload=backoff.describe(),
            backoff_number=backoff.level,
            until=backoff.until,
            cooldown_seconds=backoff.cooldown,
            bounces=backoff.bounces,
            destinations=dict(backoff.destinations),
            attractor=backoff.attractor or None,
            message=backoff.message(),
        )
        if events is not None and backoff.kind and not dry_run:
            uid = backoff.workload if "/" not in backoff.workload else ""
            events.record_object(
                Regarding.workload(backoff.kind, backoff.namespace, backoff.name, uid),
                "Warning",
                "PingPongBackoff",
                backoff.message(),
                action="Descheduling",
            )


def journal_lost(restore: Restore, events: WorkloadEvents | None, dry_run: bool) -> None:
    """A deleted migration journal, said loudly: a Warning Event on the ConfigMap (the log line and the
    metric come from the ledger and the cycle record; a dry run writes no Event)."""
    if events is None or restore.lost is None or dry_run:
        return
    namespace, name = restore.lost
    events.record_object(
        Regarding("ConfigMap", "v1", namespace, name),
        "Warning",
        "MigrationJournalLost",
        f"The migration journal was deleted: churn budget, eviction windows, ping-pong back-offs and anomaly "
        f"counts were reset with it. Rebuilt {restore.migrations} migration(s) from Events; no live eviction "
        f"for {restore.quiet_seconds:.0f}s. {restore.message}",
        action="Descheduling",
    )
