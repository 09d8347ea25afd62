"""Turn a cycle record into metrics and into the audit text people read.

Dry-run and live cycles are observed the same way, so a dry-run dashboard shows exactly what a live run
would have done.
"""

from __future__ import annotations

import structlog

from descheduler.config.load import EffectiveConfig
from descheduler.service.cycle import CycleRecord
from descheduler.service.observability import Metrics

log = structlog.get_logger("descheduler.audit")

STRATEGY = "LowNodeLoad"


def observe_record(metrics: Metrics, record: CycleRecord, effective: EffectiveConfig) -> None:
    profile = effective.config.profiles[0].name if effective.config.profiles else ""
    metrics.cycle_duration.observe(record.duration)
    metrics.cycles.labels(outcome="aborted" if record.aborted else "completed").inc()
    metrics.last_cycle.set(record.started + record.duration)
    metrics.observe_nodes(record.plan.node_reports)
    for eviction in record.evictions:
        namespace = eviction.pod.split("/", 1)[0]
        metrics.pods_evicted.labels(
            eviction.result, "overutilized", STRATEGY, profile, eviction.node, namespace
        ).inc()
    for resolved in record.resolved:
        metrics.unknown_resolved.labels(resolved.result).inc()
    metrics.unknown_pending.set(len(record.unconfirmed))
    for skip in record.plan.pod_skips:
        metrics.pods_skipped.labels(skip.code).inc()
    metrics.usage_errors.set(len(record.usage_errors))
    if record.oldest_sample is not None:
        metrics.usage_age.set(max(0.0, record.started - record.oldest_sample))
    if record.dry_run:
        log.info("audit", record=record.to_dict())


def render_record_text(record: CycleRecord) -> str:
    """The same tables ``simulate --output text`` prints, plus the result of each eviction call."""
    from descheduler.simulate.render import render_plan_text

    title = f"Cycle {record.cycle}" + (" (dry-run)" if record.dry_run else "")
    lines = render_plan_text(record.plan, title)
    if record.evictions:
        lines.append("Eviction calls:")
        for e in record.evictions:
            lines.append(f"  {e.pod} on {e.node}: {e.result}" + (f" ({e.message})" if e.message else ""))
    if record.resolved:
        lines.append("Evictions of unknown outcome, now settled:")
        for e in record.resolved:
            lines.append(f"  {e.pod} on {e.node}: {e.result} ({e.message})")
    if record.unconfirmed:
        pending = ", ".join(record.unconfirmed)
        lines.append(f"Evictions still of unknown outcome (counted as evicted): {pending}")
    if record.aborted:
        lines.append(f"Cycle stopped early: {record.aborted}")
    return "\n".join(lines)
