"""What the planner remembers between cycles, as an explicit immutable value, and the changes to it that
need no plan (a refusal, a settled or forgotten eviction, a reset count).

Recording a cycle's evictions into it is ``record.commit``: that needs the plan's types, and keeping it
out of here lets ``model.Plan`` carry a ``PlannerState`` without a circle between the two modules.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class AnomalyCount:
    """One node's anomaly detector (``anomaly.py``): consecutive over cycles, when it was last written,
    and, once confirmed a hotspot, since when and how many normal cycles it has had since it was last
    over."""

    count: int
    updated: float
    normal: int = 0
    """Consecutive normal cycles of a confirmed node (0 while unconfirmed)."""
    confirmed: float | None = None
    """When the node was confirmed a hotspot (seconds since the epoch); None: not confirmed."""
    cure: bool = False
    """Confirmed by a round of its own cure (``reset_anomalies``): the confirmation outlasts
    ``anomalyCondition.timeout`` while that round is in motion (``anomaly.trusted``)."""
    settled: float = 0.0
    """When a cycle first found the cure's latest round over (0: still in motion, or no cure)."""
    began: float = 0.0
    """When the cure began: the node's first confirmation, kept across the rounds that confirm it again
    (0: ``confirmed``). A successor measures a cure it takes over from here (``service/cures.py``)."""
    spent: int = 0
    """Evictions from the node since its cure began (recorded by ``reset_anomalies``)."""
    cooled: float = 0.0
    """First cycle of the confirmed node's current streak of normal cycles (0: over in its last one)."""

    @property
    def cure_began(self) -> float | None:
        """When this confirmed node's cure began; None while unconfirmed."""
        return None if self.confirmed is None else self.began or self.confirmed

    def to_dict(self) -> dict[str, Any]:
        """The stored form: the two fields of old journals, the others only when set."""
        out: dict[str, Any] = {"count": self.count, "updated": self.updated}
        if self.normal:
            out["normal"] = self.normal
        if self.confirmed is not None:
            out["confirmed"] = self.confirmed
        if self.cure:
            out["cure"] = True
        if self.settled:
            out["settled"] = self.settled
        if self.began and self.began != self.confirmed:
            out["began"] = self.began
        if self.spent:
            out["spent"] = self.spent
        if self.cooled:
            out["cooled"] = self.cooled
        return out


RESTARTING = "restarting"
COMPLETED = "completed"
FAILED = "failed"
"""``Migration.restart``: a restart in flight, and its two outcomes."""


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
    """The latest moment the server may have applied the eviction: windows count from here."""
    workload_kind: str = ""
    workload_name: str = ""
    """Kind and name of the workload (its top controller), kept for the migration record."""
    unresolved: bool = False
    """The eviction's outcome is unknown: the server may still apply it at any moment, so every time
    window counts it as if it happened now, until it is resolved (``settle_migrations``)."""
    replacement: str = ""
    """``namespace/name`` of the workload's pod created after the eviction and matched to it (the
    replacement), once it is bound to a node (``pingpong.match_replacements``)."""
    landed: str = ""
    """The node the replacement was bound to."""
    landed_at: float = 0.0
    """When the replacement was first seen bound there (0: unknown, from a journal written before it
    was kept; ``started`` stands in): a bounce counts only shortly after (``pingpong.mark_bounces``)."""
    sent: float = 0.0
    """When the request was sent (0: unknown, ``started`` stands in). Replacements are matched from
    here: ``started`` may be much later (an answer that came late, an outcome settled later)."""
    bounced: float = 0.0
    """When ``landed`` was first seen over its high threshold (0: not so far): the ping-pong guard's
    evidence, kept in the journal so a restart does not forget a back-off."""
    restart: str = ""
    """A surge-first restart (``surge.py``): ``restarting`` until its outcome, then ``completed`` or
    ``failed`` (overdue: the old pod counts as staying and holds no slot); "" for an eviction. In the
    journal, so a successor follows it on and reports it once."""

    def in_window(self, duration: float, now: float) -> bool:
        """Whether a window of ``duration`` seconds ending at ``now`` holds this migration."""
        return self.unresolved or self.started + duration > now

    def remembered(self, duration: float, now: float) -> bool:
        """Whether the planner keeps this migration once its pod is gone: in its window (limits and
        budgets count it), or a restart not yet followed to its outcome. The cache may show the old pod
        gone before the Deployment's status shows the rollout (two watches, in no order); dropping the
        restart then would never tell how it ended (``surge.follow_restarts`` ends it by its deadline)."""
        return self.restart == RESTARTING or self.in_window(duration, now)


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
    restart: bool = False
    """Moved by a surge-first restart and still there: the pod keeps running until its replacement is
    ready, and is counted as leaving meanwhile (``plan.restarts_leaving``), as an evicted pod that is
    terminating; ``left`` follows the cycles until it is gone (``plan._restart_departure``)."""


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
    pdb_refusals: Mapping[str, float] = field(default_factory=dict)
    """PodDisruptionBudgets (``namespace/name``) under which the API server refused an eviction, and until
    when (wall clock) no pod they cover is tried again: the server's Retry-After, so a budget the cache
    thinks has room but the server does not is not hammered every cycle."""

    def to_dict(self) -> dict[str, Any]:
        body = {
            "anomalies": {k: v.to_dict() for k, v in sorted(self.anomalies.items())},
            "prodAnomalies": {k: v.to_dict() for k, v in sorted(self.prod_anomalies.items())},
            "migrations": [
                {
                    "pod": m.pod,
                    "uid": m.uid,
                    "namespace": m.namespace,
                    "node": m.node,
                    "workload": m.workload,
                    "started": m.started,
                    **({"replacement": m.replacement, "landed": m.landed} if m.landed else {}),
                    **({"bounced": m.bounced} if m.bounced else {}),
                    **({"restart": m.restart} if m.restart else {}),
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
        if self.pdb_refusals:
            body["pdbRefusals"] = dict(sorted(self.pdb_refusals.items()))
        return body


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
    return replace(state, migrations=kept, departures=departures)


def settle_migrations(
    state: PlannerState,
    applied: Mapping[tuple[str, str], float],
    sent: Mapping[tuple[str, str], float] | None = None,
) -> PlannerState:
    """Evictions of unknown outcome that turned out applied: ``(pod key, uid)`` -> the latest moment the
    server may have applied them (when the cache showed it, or the request's deadline if that came
    first). Their windows run from there, not from when the request was sent; their replacements are
    still matched from the send time (``sent``, by the same keys, where the migration has none)."""
    if not applied:
        return state
    when = sent or {}
    migrations = tuple(
        replace(
            m,
            started=applied[(m.pod, m.uid)],
            unresolved=False,
            sent=m.sent or when.get((m.pod, m.uid), 0.0),
        )
        if (m.pod, m.uid) in applied
        else m
        for m in state.migrations
    )
    return replace(state, migrations=migrations)


def reset_anomalies(state: PlannerState, nodes: Iterable[str], now: float) -> PlannerState:
    """Nodes pods were (possibly) evicted from (a node once per pod) start counting again (overall and
    prod). A confirmed node stays confirmed, from ``now``, so the next round of its cure does not wait for
    N fresh over cycles (``cure.py`` says when it may go on), and adds the round to what its cure spent;
    an unconfirmed one starts from nothing."""
    rounds = Counter(nodes)
    if not rounds:
        return state
    anomalies = dict(state.anomalies)
    prod_anomalies = dict(state.prod_anomalies)
    for node, pods in rounds.items():
        anomalies[node] = _round_done(anomalies.get(node), now, pods)
        if node in prod_anomalies:
            prod_anomalies[node] = _round_done(prod_anomalies[node], now, pods)
    return replace(state, anomalies=anomalies, prod_anomalies=prod_anomalies)


def _round_done(count: AnomalyCount | None, now: float, pods: int) -> AnomalyCount:
    if count is None or count.confirmed is None:
        return AnomalyCount(0, now)
    began = count.began or count.confirmed
    return AnomalyCount(0, now, 0, now, cure=True, began=began, spent=count.spent + pods)


def refuse(state: PlannerState, pdbs: Iterable[str], until: float) -> PlannerState:
    """Remember that the server refused evictions under ``pdbs`` (``namespace/name``) until ``until``."""
    refusals = dict(state.pdb_refusals)
    for key in pdbs:
        refusals[key] = max(until, refusals.get(key, 0.0))
    return replace(state, pdb_refusals=refusals)
