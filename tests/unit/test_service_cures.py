"""Cure time as a product metric (``service/cures.py``): confirmation to normal, and evictions per cure.

``cycles`` is the node's report each cycle, 60 s apart, one letter a cycle: ``H`` a confirmed hotspot,
``h`` confirmed and over but waiting (e.g. ``cure-in-motion``), ``n`` normal and still confirmed, ``N``
normal and no longer confirmed, ``L`` low (unconfirmed), ``o`` over but unconfirmed, ``s`` skipped.
``evictions`` is the pods moved from it each cycle. ``cures`` is the (seconds, evictions) of each ended
cure, worked out by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from descheduler.planner import Plan
from descheduler.planner.model import NodeReport
from descheduler.planner.state import AnomalyCount, PlannerState
from descheduler.service.audit import observe_record
from descheduler.service.cures import CureTracker
from descheduler.service.observability import Metrics
from descheduler.service.records import CycleRecord, EvictionRecord, Restore
from tests.unit.builders import NOW, settings

CLASSES = {"H": ("hotspot", True), "h": ("hotspot", True), "n": ("normal", True), "N": ("normal", False),
           "L": ("low", False), "o": ("over", False), "s": ("skipped", False)}  # fmt: skip


@dataclass(frozen=True)
class Case:
    name: str
    cycles: str
    evictions: str
    cures: list[tuple[float, int]]


CASES = [
    Case(
        "a cure lasts from confirmation to the first cycle read not over", "oHhHnnnN", "01010000", [(180, 2)]
    ),
    Case("a cure read low ends at once", "HHL", "110", [(120, 2)]),
    Case("a node back over inside the normal streak is the same cure", "HnHnnnN", "1010000", [(180, 2)]),
    Case("a confirmation that lapsed while over keeps the cure open", "HoooHnnnN", "100010000", [(300, 2)]),
    Case("a skipped cycle changes nothing", "HsnnnN", "100000", [(120, 1)]),
    Case("no confirmation, no cure", "oooNL", "00000", []),
    Case("a cure still open is not observed", "HHHn", "1110", []),
    Case("two cures of one node are two observations", "HnnnNoHN", "10000010", [(60, 1), (60, 1)]),
]


def records(case: Case) -> list[CycleRecord]:
    out = []
    for i, (letter, moved) in enumerate(zip(case.cycles, case.evictions, strict=True)):
        node_class, confirmed = CLASSES[letter]
        report = NodeReport(node="hot", node_class=node_class, confirmed=confirmed)
        evictions = tuple(
            EvictionRecord(f"default/web-{i}-{k}", "hot", "cool", "hot", "evicted", "")
            for k in range(int(moved))
        )
        plan = Plan(node_reports=(report,), now=NOW + 60 * i)
        out.append(CycleRecord(cycle=i, started=NOW + 60 * i, duration=1.0, dry_run=False, plan=plan,
                               evictions=evictions))  # fmt: skip
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_cure_is_measured_from_confirmation_to_normal(case: Case) -> None:
    tracker = CureTracker()
    ended = [c for record in records(case) for c in tracker.advance(record)]
    assert [(c.seconds, c.evictions) for c in ended] == case.cures


def test_cures_reach_the_histograms_and_the_audit() -> None:
    metrics = Metrics(CollectorRegistry())
    effective = settings()
    for record in records(CASES[0]):
        observe_record(metrics, record, effective)
    sample = metrics.registry.get_sample_value
    assert sample("descheduler_hotspot_cure_seconds_count") == 1
    assert sample("descheduler_hotspot_cure_seconds_sum") == 180
    assert sample("descheduler_hotspot_cure_evictions_sum") == 2
    assert sample("descheduler_hotspot_cure_evictions_bucket", {"le": "1.0"}) == 0


def test_the_audit_has_a_line_per_ended_cure() -> None:
    metrics = Metrics(CollectorRegistry())
    with capture_logs() as logs:
        for record in records(CASES[1]):
            observe_record(metrics, record, settings())
    cures = [line for line in logs if line["event"] == "audit_cure"]
    assert cures == [
        {"event": "audit_cure", "log_level": "info", "cycle": 2, "node": "hot", "confirmed": NOW,
         "cured": NOW + 120, "seconds": 120.0, "evictions": 2}
    ]  # fmt: skip


def cycle_at(
    minute: int, letter: str, state: PlannerState | None = None, restore: bool = False
) -> CycleRecord:
    """A record of node ``hot`` (letters as above); ``restore``: the cycle rebuilt the state (takeover)."""
    node_class, confirmed = CLASSES[letter]
    report = NodeReport(node="hot", node_class=node_class, confirmed=confirmed)
    plan = Plan(node_reports=(report,), now=NOW + 60 * minute, state=state or PlannerState())
    return CycleRecord(cycle=minute, started=NOW + 60 * minute, duration=1.0, dry_run=False, plan=plan,
                       evictions=(), restore=Restore("rebuilt", "ok") if restore else None)  # fmt: skip


def test_a_replica_that_takes_the_lease_back_does_not_tell_again_a_cure_another_replica_ended() -> None:
    tracker = CureTracker()
    tracker.advance(cycle_at(0, "H"))  # leading: the cure opens; then the lease goes to the other replica,
    # which cures the node and tells it. Back to this one, whose first cycle rebuilds the state:
    assert tracker.advance(cycle_at(10, "N", restore=True)) == []


def test_a_replica_that_takes_the_lease_back_takes_the_cure_over_from_the_journal() -> None:
    tracker = CureTracker()
    tracker.advance(cycle_at(0, "H"))
    held = AnomalyCount(0, NOW + 540, confirmed=NOW + 300, cure=True, began=NOW + 120, spent=3)
    state = PlannerState(anomalies={"hot": held})
    tracker.advance(cycle_at(10, "n", state, restore=True))
    ended = [c for minute in (11, 12, 13) for c in tracker.advance(cycle_at(minute, "nnN"[minute - 11]))]
    assert [(c.confirmed, c.seconds, c.evictions) for c in ended] == [(NOW + 120, 480, 3)]
