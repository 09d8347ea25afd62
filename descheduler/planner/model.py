"""The planner's output: evictions to perform and an explanation for every node and every pod left alone."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from descheduler.cluster.types import Pod
from descheduler.planner import reasons
from descheduler.planner.pingpong import Backoff
from descheduler.planner.state import PlannerState

# How a planned move is made: an eviction, or a rollout restart of a single-replica Deployment that surges
# first (``surgeSingleReplica``, ``surge.py``).
EVICT = "evict"
RESTART = "restart"

# Node classes, from coolest to hottest.
LOW = "low"
NORMAL = "normal"
OVER = "over"
HOTSPOT = "hotspot"
SKIPPED = "skipped"

SkipForm = Literal["detailed", "summarised"]
"""How a plan reports the pods a hotspot never needed: one ``PodSkip`` each (``detailed``), or one
``SkipSummary`` per hotspot and reason (``summarised``, what the service audits)."""
DETAILED: SkipForm = "detailed"
SUMMARISED: SkipForm = "summarised"


@dataclass(frozen=True, slots=True)
class ResourceReport:
    """One resource of one node: measured usage against the node's thresholds, absolute and in percent."""

    resource: str
    base: int
    """What the percentages are of: allocatable, or Koordinator's raw-allocatable when annotated."""
    usage: int
    low: int
    high: int
    usage_percent: float
    low_percent: float
    high_percent: float
    sample: int | None = None
    """The raw usage sample; ``usage`` is the migration-aware estimate decided on (``estimate.py``)."""
    other: int | None = None
    """The part of the sample that belongs to no pod."""
    running: int | None = None
    """Where it differs from ``usage``: the estimate without the pods bound here that have not started
    (the lower bound, what makes a node over); ``usage`` counts them (the upper bound, what a destination
    check uses)."""

    @property
    def over(self) -> bool:
        """Over is judged on the pods that run: a pod merely bound here does not make the node a source."""
        return (self.running if self.running is not None else self.usage) > self.high

    @property
    def running_percent(self) -> float | None:
        return None if self.running is None else reasons.percent(self.running, self.base)

    @property
    def sample_percent(self) -> float | None:
        return None if self.sample is None else reasons.percent(self.sample, self.base)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "resource": self.resource,
            "allocatable": self.base,
            "usage": self.usage,
            "usagePercent": round(self.usage_percent, 2),
            "low": self.low,
            "lowPercent": round(self.low_percent, 2),
            "high": self.high,
            "highPercent": round(self.high_percent, 2),
            "over": self.over,
        }
        if self.sample is not None:
            out["sample"] = self.sample
            out["samplePercent"] = round(reasons.percent(self.sample, self.base), 2)
        if self.other is not None:
            out["other"] = self.other
        if self.running is not None:
            out["running"] = self.running
            out["runningPercent"] = round(reasons.percent(self.running, self.base), 2)
        return out


@dataclass(frozen=True, slots=True)
class NodeReport:
    """How the planner saw one node this cycle and what it did there."""

    node: str
    node_class: str
    """``low``, ``normal``, ``over`` (not yet a hotspot), ``hotspot`` or ``skipped``."""
    pool: str = ""
    anomaly_count: int = 0
    consecutive_abnormalities: int = 0
    cordoned: bool = False
    resources: tuple[ResourceReport, ...] = ()
    skip_code: str = ""
    skip_message: str = ""
    prod_class: str = ""
    """Class under ``prodLowThresholds``/``prodHighThresholds`` (usage of prod pods only); empty if unset."""
    prod_anomaly_count: int = 0
    prod_resources: tuple[ResourceReport, ...] = ()
    evicted: int = 0
    """Evictions planned from this node in this cycle."""
    stop_code: str = ""
    stop_message: str = ""
    """For hotspots: why eviction stopped (or never started) on this node."""
    normal_count: int = 0
    """Consecutive normal cycles of a confirmed hotspot (``planner/anomaly.py``): more than
    ``consecutive_normalities`` and it must be confirmed again."""
    consecutive_normalities: int = 0
    confirmed: bool = False
    """Confirmed a hotspot: a source in any cycle it is over, until a reset, the normal cycles or the
    ``anomalyCondition.timeout`` end it."""
    prod_normal_count: int = 0
    prod_confirmed: bool = False

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "node": self.node,
            "pool": self.pool,
            "class": self.node_class,
            "anomalyCount": self.anomaly_count,
            "consecutiveAbnormalities": self.consecutive_abnormalities,
            "normalCount": self.normal_count,
            "consecutiveNormalities": self.consecutive_normalities,
            "confirmed": self.confirmed,
            "cordoned": self.cordoned,
            "resources": [r.to_dict() for r in self.resources],
            "evicted": self.evicted,
        }
        if self.skip_code:
            out["skip"] = {"code": self.skip_code, "message": self.skip_message}
        if self.prod_class:
            out["prodClass"] = self.prod_class
            out["prodAnomalyCount"] = self.prod_anomaly_count
            out["prodNormalCount"] = self.prod_normal_count
            out["prodConfirmed"] = self.prod_confirmed
            out["prodResources"] = [r.to_dict() for r in self.prod_resources]
        if self.stop_code:
            out["stop"] = {"code": self.stop_code, "message": self.stop_message}
        return out


@dataclass(frozen=True, slots=True)
class PlannedEviction:
    """A pod to evict from ``node``; ``destination`` is the low node whose headroom was reserved for it."""

    pod: Pod
    node: str
    destination: str
    reason: str
    """Koordinator's wording, e.g. ``node is overutilized, node cpu usage(68.53%)>threshold(50.00%)``."""
    usage: Mapping[str, int]
    """The pod's measured usage of each resource the planner considered."""
    workload: str = ""
    """Identity of the pod's workload (recorded with the migration), empty for bare pods."""
    workload_kind: str = ""
    workload_name: str = ""
    """The workload's top controller (a ReplicaSet resolves to its Deployment), empty for bare pods: a
    bounded label for metrics, unlike pod names, and named in the migration record, so a restart maps
    the record back to the workload even when the pod is long gone."""
    pool: str = ""
    prod: bool = False
    """True when decided by the prod pass (``prodHighThresholds``)."""
    action: str = EVICT
    """``evict``, or ``restart``: a rollout restart of the pod's Deployment (``workload_name``), whose new
    pod is created before this one stops; counted against every limit exactly as an eviction."""
    devices: str = ""
    """For a pod holding DRA devices: the devices its destination would give it, of how many free
    matching ones there (``devices.DeviceIndex.describe``); "" otherwise."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "action": self.action,
            "pod": self.pod.key,
            "node": self.node,
            "reason": self.reason,
            "destination": self.destination,
            "usage": dict(self.usage),
            "workload": self.workload,
            "workloadKind": self.workload_kind,
            "workloadName": self.workload_name,
            "pool": self.pool,
            "pass": "prod" if self.prod else "load",
        }
        if self.devices:
            out["devices"] = self.devices
        return out


@dataclass(frozen=True, slots=True)
class PodSkip:
    """A pod on a hotspot that was considered and not moved, and why."""

    pod: str
    node: str
    code: str
    message: str
    prod: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "node": self.node,
            "code": self.code,
            "message": self.message,
            "pass": "prod" if self.prod else "load",
        }


@dataclass(frozen=True, slots=True)
class SkipSummary:
    """The pods of one hotspot refused by one filter (or without a usage sample) that the hotspot never
    needed: it stopped (cured, a limit, no room left) for its own reason, so they are counted, not listed.

    ``count`` is exactly the number of ``PodSkip`` the detailed form holds for (``node``, ``code``); the
    counts by reason (metrics, dashboards) add it. ``examples`` names the first few, in the node's order."""

    node: str
    code: str
    count: int
    examples: tuple[str, ...]
    message: str
    """The first pod's message (the others' may name other values)."""
    stop: str
    """The hotspot's stop code: why the rest of its pods were not needed."""
    prod: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "code": self.code,
            "count": self.count,
            "examples": list(self.examples),
            "message": self.message,
            "stop": self.stop,
            "pass": "prod" if self.prod else "load",
        }


@dataclass(frozen=True)
class Plan:
    """Everything one cycle decided, with its reasons, and the state to carry to ``commit``."""

    evictions: tuple[PlannedEviction, ...] = ()
    node_reports: tuple[NodeReport, ...] = ()
    pod_skips: tuple[PodSkip, ...] = ()
    state: PlannerState = field(default_factory=PlannerState)
    notes: tuple[str, ...] = ()
    """Cycle-wide explanations, e.g. why nothing happened in a pool."""
    now: float = 0.0
    moving: Mapping[str, int] = field(default_factory=dict)
    """Per resource, the most one pod in motion uses: this cycle's evictions and this descheduler's
    recent evictions whose replacement has not started yet. Empty when nothing is moving. Steering
    (``steer.py``) keeps replacements off nodes with less room than that."""
    backoffs: tuple[Backoff, ...] = ()
    """Workloads the ping-pong guard leaves alone this cycle (``pingpong.py``), by description."""
    skip_summaries: tuple[SkipSummary, ...] = ()
    """In the summarised form: the pods of each hotspot it never needed, per reason (``SkipSummary``)."""
    skip_form: SkipForm = DETAILED

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: used by ``simulate --output json`` and by the dry-run audit record."""
        out: dict[str, Any] = {
            "evictions": [e.to_dict() for e in self.evictions],
            "nodes": [n.to_dict() for n in self.node_reports],
            "skips": [s.to_dict() for s in self.pod_skips],
            "skipForm": self.skip_form,
            "notes": list(self.notes),
        }
        if self.skip_summaries:
            out["skipSummaries"] = [s.to_dict() for s in self.skip_summaries]
        if self.moving:
            out["moving"] = dict(self.moving)
        if self.backoffs:
            out["backoffs"] = [b.to_dict() for b in self.backoffs]
        return out

    def new_backoffs(self) -> tuple[Backoff, ...]:
        """The back-offs that began this cycle: each episode is announced once (log, Event, metric)."""
        return tuple(b for b in self.backoffs if b.started == self.now)

    def skip_counts(self) -> dict[str, int]:
        """Skipped pods by reason code (for a one-line cycle summary or a metric): the same in either form,
        a summary counting for the pods it stands for."""
        counts: dict[str, int] = {}
        for skip in self.pod_skips:
            counts[skip.code] = counts.get(skip.code, 0) + 1
        for summary in self.skip_summaries:
            counts[summary.code] = counts.get(summary.code, 0) + summary.count
        return dict(sorted(counts.items()))
