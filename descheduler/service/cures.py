"""Cure time as a product metric: how long a confirmed hotspot stays hot, and how many evictions cured it.

Users judge a descheduler by how long their nodes stay hot, so each cure is measured from the cycle that
first found the node confirmed a hotspot to the first cycle of the streak in which it no longer read
over, observed once its confirmation has ended (``consecutiveNormalities`` normal cycles, or a low one):
a node that goes back over inside that streak is still the same cure. A node confirmed again while over
(its confirmation lapsed but it never read normal) also stays the same cure. A skipped cycle changes
nothing; a node gone from the cluster ends its cure unobserved. The open cures are kept in memory, but
a successor (a restart, a new leader) takes over a cure from the journal it restored: a node the state
holds confirmed opens its cure at the confirmation that began it, with the evictions it spent and the
start of its normal streak as the detectors kept them (``AnomalyCount``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Histogram

from descheduler.planner.model import HOTSPOT, OVER, SKIPPED, NodeReport
from descheduler.planner.state import PlannerState
from descheduler.service.records import CycleRecord

MOVED = ("evicted", "would-evict", "restarted", "would-restart")
"""Eviction-call results that moved a pod (or would have, in dry-run): what a cure spends."""


@dataclass(frozen=True)
class Cure:
    """One ended cure: the audit's ``audit_cure`` line and the two histograms' observations."""

    node: str
    confirmed: float
    cured: float
    evictions: int

    @property
    def seconds(self) -> float:
        return max(0.0, self.cured - self.confirmed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "confirmed": self.confirmed,
            "cured": self.cured,
            "seconds": round(self.seconds, 3),
            "evictions": self.evictions,
        }


@dataclass
class _Open:
    confirmed: float
    evictions: int = 0
    cool_since: float | None = None
    """First cycle of the current streak in which the node did not read over (None: over now)."""


@dataclass
class CureTracker:
    """The cures in progress, advanced by every cycle record."""

    open: dict[str, _Open] = field(default_factory=dict)

    def advance(self, record: CycleRecord) -> list[Cure]:
        """The cures this cycle ended, oldest confirmation first.

        A cycle that rebuilt the state from the journal (a takeover) drops the cures this replica held
        open: while it was not leading, another replica went on with them and may have ended (and told)
        them. The journal's detectors say which are still open; ``_opened`` takes those over."""
        if record.restore is not None:
            self.open.clear()
        now = record.started
        moved: dict[str, int] = {}
        for e in record.evictions:
            if e.result in MOVED:
                moved[e.node] = moved.get(e.node, 0) + 1
        ended: list[Cure] = []
        seen = set()
        for report in record.plan.node_reports:
            seen.add(report.node)
            cure = self.open.get(report.node)
            if report.node_class == SKIPPED:
                continue
            if cure is None:
                if not _confirmed(report):
                    continue
                cure = self.open[report.node] = _opened(record.plan.state, report.node, now)
            cure.evictions += moved.get(report.node, 0)
            if _over(report):
                cure.cool_since = None
                continue
            cure.cool_since = now if cure.cool_since is None else cure.cool_since
            if not _confirmed(report):
                ended.append(Cure(report.node, cure.confirmed, cure.cool_since, cure.evictions))
                del self.open[report.node]
        for gone in [node for node in self.open if node not in seen]:
            del self.open[gone]
        return sorted(ended, key=lambda c: (c.confirmed, c.node))


def _opened(state: PlannerState, node: str, now: float) -> _Open:
    """A cure found confirmed: begun now, or earlier when the state (a journal a successor restored) says
    so, with what it spent before this cycle and, in a streak of normal cycles, when that began."""
    held = [c for c in (state.anomalies.get(node), state.prod_anomalies.get(node)) if c is not None]
    began = [c.cure_began for c in held if c.cure_began is not None]
    if not began:
        return _Open(confirmed=now)
    cooled = [c.cooled for c in held if c.confirmed is not None]
    return _Open(
        confirmed=min([now, *began]),
        evictions=max(c.spent for c in held),
        cool_since=max(cooled) if all(cooled) else None,
    )


def _confirmed(report: NodeReport) -> bool:
    return report.confirmed or report.prod_confirmed


def _over(report: NodeReport) -> bool:
    return report.node_class in (OVER, HOTSPOT) or report.prod_class in (OVER, HOTSPOT)


class CureMetrics:
    """``descheduler_hotspot_cure_seconds`` and ``descheduler_hotspot_cure_evictions``, and the tracker
    that feeds them."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.tracker = CureTracker()
        self.seconds = Histogram(
            "descheduler_hotspot_cure_seconds",
            "Seconds from a node's confirmation as a hotspot to the first cycle it read not over, per cure "
            "(observed once its confirmation ended).",
            buckets=(30, 60, 120, 180, 300, 450, 600, 900, 1200, 1800, 3600),
            registry=registry,
        )
        self.evictions = Histogram(
            "descheduler_hotspot_cure_evictions",
            "Evictions (or, in dry-run, would-be evictions) from a node during one cure.",
            buckets=(0, 1, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30),
            registry=registry,
        )

    def observe(self, record: CycleRecord) -> list[Cure]:
        """Advance the tracker by one cycle; the cures it ended, observed."""
        ended = self.tracker.advance(record)
        for cure in ended:
            self.seconds.observe(cure.seconds)
            self.evictions.observe(cure.evictions)
        return ended


def cure_lines(cycle: int, cures: Iterable[Cure]) -> list[tuple[str, dict[str, Any]]]:
    """The audit's ``audit_cure`` records (one per ended cure), joined to the cycle like the others."""
    return [("audit_cure", {"cycle": cycle, **cure.to_dict()}) for cure in cures]
