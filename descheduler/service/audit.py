"""Turn a cycle record into metrics and into the audit text people read.

Dry-run and live cycles are observed the same way, so a dry-run dashboard shows exactly what a live run
would have done.
"""

from __future__ import annotations

from typing import Any

import structlog

from descheduler.config.load import EffectiveConfig
from descheduler.planner import reasons
from descheduler.report.text import render_plan_text
from descheduler.service.cures import cure_lines
from descheduler.service.cycle import CycleRecord
from descheduler.service.observability import Metrics
from descheduler.usage.samples import SCRAPE_GAP

log = structlog.get_logger("descheduler.audit")

STRATEGY = "LowNodeLoad"


USAGE_SKIPS = (reasons.NODE_NO_USAGE, reasons.NODE_USAGE_ERROR, reasons.NODE_STALE_USAGE)


def usage_unavailable(record: CycleRecord) -> list[str]:
    """The distinct reasons, when no node had usable usage although some needed it; else empty.

    Such a cycle judged nothing: a metrics source down looks like a quiet cluster unless it is said."""
    reports = record.plan.node_reports
    if any(r.node_class != "skipped" for r in reports):
        return []
    return list(dict.fromkeys(r.skip_message for r in reports if r.skip_code in USAGE_SKIPS))


def nodes_without_sample(record: CycleRecord) -> int:
    """Nodes the cycle could not judge for want of a trustworthy usage sample: the source's errors and
    every node the planner skipped as without usage, with an error, or with a sample too old."""
    names = set(record.usage_errors)
    names.update(r.node for r in record.plan.node_reports if r.skip_code in USAGE_SKIPS)
    return len(names)


def readiness(
    synced: bool, stale_cache: str, usage_problem: list[str], steering_off: str = ""
) -> tuple[bool, str]:
    """/readyz: ready only with a synced, fresh cache and, in the last cycle, some usable usage. Steering
    refused by the server is a condition in the detail, not unreadiness: the descheduler works on."""
    ok, why = True, "ok"
    if not synced:
        ok, why = False, "cache not synced"
    elif stale_cache:
        ok, why = False, stale_cache
    elif usage_problem:
        ok, why = False, "usage source unavailable in the last cycle: " + "; ".join(usage_problem[:3])
    return ok, f"{why}\n{steering_off}" if steering_off else why


def observe_record(metrics: Metrics, record: CycleRecord, effective: EffectiveConfig) -> None:
    profile = effective.config.profiles[0].name if effective.config.profiles else ""
    metrics.cycle_duration.observe(record.duration)
    if record.skipped:
        metrics.cycles.labels(outcome="skipped").inc()
        metrics.cycles_skipped.labels(record.skip_code).inc()
        metrics.unknown_pending.set(len(record.unconfirmed))
        if record.dry_run:
            log.info("audit", record=record.to_dict())
        return
    metrics.cycles.labels(outcome="aborted" if record.aborted else "completed").inc()
    metrics.last_cycle.set(record.started + record.duration)
    metrics.observe_nodes(record.plan.node_reports)
    metrics.observe_controls(record.window, record.budget)
    for eviction in record.evictions:
        namespace = eviction.pod.split("/", 1)[0]
        metrics.pods_evicted.labels(
            eviction.result,
            "overutilized",
            STRATEGY,
            profile,
            eviction.node,
            namespace,
            eviction.workload_kind,
            eviction.workload_name,
        ).inc()
    for resolved in record.resolved:
        metrics.unknown_resolved.labels(resolved.result).inc()
    for followed in record.restarts:
        metrics.restarts_followed.labels(followed.result).inc()
    for seconds in record.restart_seconds:
        metrics.restart_seconds.observe(seconds)
    metrics.unknown_pending.set(len(record.unconfirmed))
    if record.restore is not None:
        metrics.state_rebuilds.labels(record.restore.result, record.restore.reason).inc()
        metrics.state_rebuilt_migrations.set(record.restore.migrations)
    metrics.quiet_seconds.set(record.quiet_seconds_left)
    for reason in record.journal_failures:
        metrics.journal_write_failures.labels(reason).inc()
    for dropped in record.journal_compactions:
        metrics.journal_compactions.labels(dropped).inc()
    for code, count in record.plan.skip_counts().items():  # a summary counts every pod it stands for
        metrics.pods_skipped.labels(code).inc(count)
    for backoff in record.plan.new_backoffs():
        metrics.ping_pong_backoffs.labels(backoff.kind, backoff.name).inc()
    metrics.ping_pong_backing_off.set(len(record.plan.backoffs))
    lnl = effective.low_node_load
    steering_on = lnl is not None and lnl.hotspot_taint.enabled
    metrics.steering_active.set(1 if steering_on and not record.steering_off else 0)
    metrics.pdb_backing_off.set(len(record.pdb_backoffs))
    fallbacks = sum(1 for why in record.object_problems.values() if why.startswith("kept"))
    metrics.cluster_objects.labels("fallback").set(fallbacks)
    metrics.cluster_objects.labels("left-out").set(len(record.object_problems) - fallbacks)
    if record.verify_requests:
        metrics.verify_requests.inc(record.verify_requests)
    for event, fields in cure_lines(record.cycle, metrics.cures.observe(record)):
        log.info(event, **fields)
    observe_usage(metrics, record)
    if record.dry_run:
        for event, fields in audit_lines(record):
            log.info(event, **fields)


def observe_usage(metrics: Metrics, record: CycleRecord) -> None:
    """The cycle's usage health: nodes without a sample, nodes unknown after a scrape gap, a source down."""
    metrics.usage_errors.set(nodes_without_sample(record))
    gaps = sorted(node for node, why in record.usage_errors.items() if why.startswith(SCRAPE_GAP))
    metrics.usage_unknown.labels("scrape-gap").set(len(gaps))
    if gaps:
        log.warning(
            "usage_unknown",
            cycle=record.cycle,
            reason="scrape-gap",
            count=len(gaps),
            nodes=gaps[:10],
            notice="usage windows overlap a scrape gap: these nodes are unknown this cycle, not low",
        )
    missing = usage_unavailable(record)
    metrics.usage_unavailable.set(1 if missing else 0)
    if missing:
        log.warning(
            "usage_unavailable",
            cycle=record.cycle,
            nodes=len(record.plan.node_reports),
            reasons=missing[:3],
            notice="no node had a usable usage sample: nothing was judged this cycle",
        )
    if record.oldest_sample is not None:
        metrics.usage_age.set(max(0.0, record.started - record.oldest_sample))


def audit_lines(record: CycleRecord) -> list[tuple[str, dict[str, Any]]]:
    """The cycle's audit as small log records: one ``audit_cycle`` header, then one ``audit_node`` per node,
    ``audit_eviction`` per eviction, ``audit_skip`` per pod left alone and listed, and ``audit_skip_summary``
    per hotspot and reason of the summarised form (the header's ``skipForm``), each carrying the cycle id.

    One record for the whole cycle would be ~500 bytes per node; container runtimes split lines over
    16 KiB, which breaks log shippers. Joined on ``cycle``, these lines are the whole record."""
    body = record.to_dict()
    nodes = body.pop("nodes", [])
    evictions = body.pop("evictions", [])
    skips = body.pop("skips", [])
    summaries = body.pop("skipSummaries", [])
    cycle = record.cycle
    header = {
        "cycle": cycle,
        **{k: v for k, v in body.items() if k != "cycle"},
        "nodeCount": len(nodes),
        "evictionCount": len(evictions),
        "skipCount": len(skips) + sum(int(s["count"]) for s in summaries),
        "skipSummaryCount": len(summaries),
    }
    lines: list[tuple[str, dict[str, Any]]] = [("audit_cycle", header)]
    lines += [("audit_node", {"cycle": cycle, **node}) for node in nodes]
    lines += [("audit_eviction", {"cycle": cycle, **eviction}) for eviction in evictions]
    lines += [("audit_skip", {"cycle": cycle, **skip}) for skip in skips]
    lines += [("audit_skip_summary", {"cycle": cycle, **summary}) for summary in summaries]
    return lines


def render_record_text(record: CycleRecord) -> str:
    """The same tables ``simulate --output text`` prints, plus the result of each eviction call."""
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
    if record.restarts:
        lines.append("Restarts followed to their end:")
        for e in record.restarts:
            lines.append(f"  {e.pod} on {e.node}: {e.result} ({e.message})")
    if record.unconfirmed:
        pending = ", ".join(record.unconfirmed)
        lines.append(f"Evictions still of unknown outcome (counted as evicted): {pending}")
    if record.object_problems:
        lines.append("Cluster objects not taken as sent:")
        lines += [f"  {name}: {why}" for name, why in sorted(record.object_problems.items())]
    if record.window is not None and not record.window.open:
        lines.append(record.window.message())
    if record.budget is not None:
        lines.append(record.budget.describe())
    if record.aborted:
        lines.append(f"Cycle stopped early: {record.aborted}")
    if record.skipped:
        lines.append(f"Cycle skipped ({record.skip_code}): {record.skipped}")
    return "\n".join(lines)
