"""What a cycle saw and did, as plain values: the audit record of dry-run and the summary of live runs.

``CycleRecord.to_dict`` is the JSON the audit log and ``once --output json`` print; metrics and Events are
derived from the same record (``audit.py``), so every channel tells the same story.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from descheduler.planner import Plan, PlannedEviction
from descheduler.planner.controls import BudgetState, WindowState
from descheduler.service.unknown import Unconfirmed


@dataclass(frozen=True)
class Restore:
    """How a start or a takeover got its migration state: ``rebuilt`` from the journal, or the
    ``fallback`` (no live eviction for one objectLimiters window) and why."""

    result: str
    reason: str
    """``ok`` when rebuilt; else ``forbidden``, ``unavailable``, ``invalid``, ``no-journal`` or ``lost``
    (deleted: the evictions its Events show rebuilt, then a quiet period)."""
    migrations: int = 0
    pending: int = 0
    quiet_seconds: float = 0.0
    message: str = ""
    lost: tuple[str, str] | None = None
    """Namespace and name of a journal that was deleted (reason ``lost``): the Warning Event's object."""


@dataclass(frozen=True)
class EvictionRecord:
    pod: str
    node: str
    destination: str
    reason: str
    result: str
    message: str
    workload_kind: str = ""
    workload_name: str = ""

    @classmethod
    def of(cls, moved: PlannedEviction | Unconfirmed, result: str, message: str) -> EvictionRecord:
        """The record of ``moved``'s eviction call (or settlement) with its result."""
        return cls(
            pod=moved.pod.key,
            node=moved.node,
            destination=moved.destination,
            reason=moved.reason,
            result=result,
            message=message,
            workload_kind=getattr(moved, "workload_kind", ""),
            workload_name=getattr(moved, "workload_name", ""),
        )


@dataclass(frozen=True)
class CycleRecord:
    """What one cycle saw and did: the audit record of dry-run, and the summary of live runs."""

    cycle: int
    started: float
    duration: float
    dry_run: bool
    plan: Plan
    evictions: tuple[EvictionRecord, ...]
    aborted: str = ""
    usage_errors: dict[str, str] = field(default_factory=dict)
    oldest_sample: float | None = None
    """Measurement time of the oldest node usage sample of the cycle (freshness of the metrics source)."""
    resolved: tuple[EvictionRecord, ...] = ()
    """Evictions of unknown outcome (earlier cycles) that this cycle's cache settled: evicted or failed."""
    unconfirmed: tuple[str, ...] = ()
    """Pods whose eviction outcome is still unknown after this cycle (counted as evicted meanwhile)."""
    restarts: tuple[EvictionRecord, ...] = ()
    """Restarts (earlier cycles) this cycle saw completed (old pod gone, rolled out) or failed."""
    restart_seconds: tuple[float, ...] = ()
    """For each completed one: seconds from its patch to this cycle."""
    taints: tuple[Mapping[str, str], ...] = ()
    """Hotspot taints added or removed this cycle (``hotspotTaint``), or that dry-run would have."""
    tainted: tuple[str, ...] = ()
    """Nodes that keep the hotspot taint after this cycle."""
    steering_off: str = ""
    """Why hotspot taints are not applied (the API server refused one), or ``""`` (``steering.py``)."""
    skipped: str = ""
    """Why the cycle did not run at all (its plan is empty), e.g. a stale cache."""
    skip_code: str = ""
    """Bounded reason code of ``skipped`` (a metric label)."""
    restore: Restore | None = None
    """Set on the first cycle after a start or a takeover."""
    quiet_seconds_left: float = 0.0
    """Seconds of the fallback quiet period still to go (no live eviction meanwhile)."""
    journal_failures: tuple[str, ...] = ()
    """Reason codes of the journal writes that failed this cycle (each stopped an eviction or a confirm)."""
    journal_compactions: tuple[str, ...] = ()
    """What journal writes near the size limit dropped this cycle (``planner/journal.COMPACTION``)."""
    object_problems: Mapping[str, str] = field(default_factory=dict)
    """Cluster objects left out or kept with a fallback (``Kind name`` -> what happened)."""
    verify_requests: int = 0
    """API requests made this cycle to verify planned evictions against the server."""
    window: WindowState | None = None
    """``evictionWindows`` at the cycle's clock (None when the cycle did not run)."""
    budget: BudgetState | None = None
    """What is left of ``churnBudget`` after the cycle (None without one)."""
    pdb_backoffs: Mapping[str, float] = field(default_factory=dict)
    """PodDisruptionBudgets left alone after refusals (``evictions.PdbBackoff``), until when (wall clock)."""

    def to_dict(self) -> dict[str, Any]:
        body = self.plan.to_dict()
        # Each planned eviction (usage, workload, pass) with the outcome of its call: the runner records
        # one outcome per planned eviction, in plan order.
        planned = {(e["pod"], e["node"]): e for e in body["evictions"]}
        body.update(
            {
                "cycle": self.cycle,
                "started": self.started,
                "durationSeconds": round(self.duration, 6),
                "dryRun": self.dry_run,
                "evictions": [
                    {
                        **planned.get((e.pod, e.node), {}),
                        "pod": e.pod,
                        "node": e.node,
                        "destination": e.destination,
                        "reason": e.reason,
                        "result": e.result,
                        "message": e.message,
                    }
                    for e in self.evictions
                ],
            }
        )
        if self.resolved:
            body["resolvedEvictions"] = [
                {"pod": e.pod, "node": e.node, "result": e.result, "message": e.message}
                for e in self.resolved
            ]
        if self.unconfirmed:
            body["unconfirmedEvictions"] = list(self.unconfirmed)
        if self.restarts:
            body["followedRestarts"] = [
                {
                    "pod": e.pod,
                    "node": e.node,
                    "workload": e.workload_name,
                    "result": e.result,
                    "message": e.message,
                }
                for e in self.restarts
            ]
        if self.taints or self.tainted:
            body["hotspotTaints"] = {"changes": [dict(t) for t in self.taints], "kept": list(self.tainted)}
        if self.steering_off:
            body["steeringOff"] = self.steering_off
        if self.restore is not None:
            body["restore"] = {
                "result": self.restore.result,
                "reason": self.restore.reason,
                "migrations": self.restore.migrations,
                "pending": self.restore.pending,
                "quietSeconds": self.restore.quiet_seconds,
            }
        if self.window is not None and self.window.configured:
            body["evictionWindow"] = self.window.to_dict()
        if self.budget is not None:
            body["churnBudget"] = self.budget.to_dict()
        if self.object_problems:
            body["objectProblems"] = dict(sorted(self.object_problems.items()))
        if self.aborted:
            body["aborted"] = self.aborted
        if self.skipped:
            body["skipped"] = {"code": self.skip_code, "message": self.skipped}
        return body
