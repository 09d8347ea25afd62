"""The cycle runner and the migration journal: a record before each eviction, a rebuild after a restart,
the quiet period only when the records cannot be read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from descheduler.planner import AnomalyCount
from descheduler.planner import journal as records
from descheduler.planner.journal import Detectors, Entry, JournalUnreadable, JournalWriteError
from descheduler.service.cycle import CycleRunner
from tests.unit.fakes import SEED_NOW as NOW
from tests.unit.fakes import FakeEvictor, FakeJournal, seed_config, seed_runner

HOT_POD = "default/stress-demo-588f9646cf-s7k2p"


def journaled(
    evictor: FakeEvictor,
    journal: FakeJournal,
    *,
    clock: list[float] | None = None,
    wall: list[float] | None = None,
    **kwargs: Any,
) -> CycleRunner:
    """A runner as the service builds it: records in ``journal``, a rebuild requested at start-up.
    ``clock`` drives the monotonic clock (quiet period), ``wall`` the wall clock (records, settling)."""
    mono = clock if clock is not None else [0.0]
    now = wall if wall is not None else [NOW]
    run = seed_runner(
        evictor,
        journal=journal,
        fallback_quiet_seconds=300.0,
        monotonic=lambda: mono[0],
        wall_clock=lambda: now[0],
        **kwargs,
    )
    run.request_restore()
    return run


def statuses(entries: Sequence[Entry]) -> list[tuple[str, str]]:
    return [(e.pod, e.status) for e in entries]


def test_each_eviction_is_recorded_before_its_request_is_sent_and_confirmed_after() -> None:
    journal = FakeJournal()
    seen_when_sent: list[list[tuple[str, str]]] = []
    evictor = FakeEvictor(on_call=lambda: seen_when_sent.append(statuses(journal.entries)))
    record = journaled(evictor, journal).run_cycle()
    assert record is not None and record.restore is not None
    assert (record.restore.result, record.restore.reason) == ("rebuilt", "ok")
    assert seen_when_sent == [[(HOT_POD, "intent")]]
    assert [statuses(s) for s in journal.saves] == [[(HOT_POD, "intent")], [(HOT_POD, "evicted")]]
    written = journal.entries[0]
    assert (written.workload_kind, written.node) == ("Deployment", "cn-beijing.10.0.0.53")
    assert written.workload, "the record carries the workload identity the limits count by"


def test_a_successor_rebuilds_the_state_and_acts_in_its_first_cycle_where_the_limits_allow() -> None:
    journal = FakeJournal()
    first = FakeEvictor()
    journaled(first, journal).run_cycle()
    assert first.sent == [HOT_POD]
    # SIGKILL: a new process with the same records. The evicted pod is still terminating (static cluster).
    second = FakeEvictor()
    record = journaled(second, journal).run_cycle()
    assert record is not None and record.restore is not None
    assert record.restore.migrations == 1
    assert not record.aborted
    assert second.sent and HOT_POD not in second.sent, "in flight: never evicted twice"
    moved = next(e for e in record.plan.evictions if e.pod.key == second.sent[0])
    assert moved.workload != journal.saves[0][0].workload, "its workload's window is still open"
    # A process without the records would simply have evicted the same pod again.
    blind = FakeEvictor()
    seed_runner(blind).run_cycle()
    assert blind.sent == [HOT_POD]


def test_an_intent_left_by_a_crash_counts_until_the_pod_is_seen_still_running_a_minute_later() -> None:
    clock = [NOW]
    crashed = FakeEvictor()
    journal = FakeJournal()
    journaled(crashed, journal, wall=clock).run_cycle()
    journal.entries = (replace(journal.entries[0], status=records.INTENT, at=NOW),)  # no confirmation
    clock[0] = NOW + 10
    successor = FakeEvictor(log_resolutions=True)
    run = journaled(successor, journal, wall=clock)
    record = run.run_cycle()
    assert record is not None
    assert HOT_POD not in successor.sent
    assert record.unconfirmed == (HOT_POD,)
    clock[0] = NOW + 61
    later = run.run_cycle()
    assert later is not None
    assert [(r.pod, r.result) for r in later.resolved] == [(HOT_POD, "failed")]
    assert f"resolved {HOT_POD}: failed" in successor.calls
    assert HOT_POD in successor.sent, "never sent, so it may be evicted now"


UNREADABLE = [
    ("RBAC forbids reading", JournalUnreadable("forbidden", "403"), "forbidden", False),
    ("the API does not answer", JournalUnreadable("unavailable", "timeout"), "unavailable", True),
    ("the records are not ours", JournalUnreadable("invalid", "records[0].at"), "invalid", True),
]  # fmt: skip


@pytest.mark.parametrize(
    ("error", "reason", "writes_later"), [c[1:] for c in UNREADABLE], ids=[c[0] for c in UNREADABLE]
)
def test_unreadable_records_fall_back_to_the_quiet_period_and_say_why(
    error: Exception, reason: str, writes_later: bool
) -> None:
    clock = [0.0]
    journal = FakeJournal(load_errors=[error])
    evictor = FakeEvictor()
    run = journaled(evictor, journal, clock=clock)
    record = run.run_cycle()
    assert record is not None and record.restore is not None
    assert (record.restore.result, record.restore.reason) == ("fallback", reason)
    assert record.quiet_seconds_left == 300.0
    assert evictor.sent == []
    assert record.aborted.startswith("start-up quiet period")
    clock[0] = 301.0
    run.run_cycle()
    assert evictor.sent == [HOT_POD]
    # Forbidden: a successor cannot read records either, so none are written (it waits too).
    assert bool(journal.saves) is writes_later


def test_no_eviction_is_sent_when_its_record_cannot_be_written() -> None:
    journal = FakeJournal(save_errors=[JournalWriteError("unavailable", "timeout")])
    evictor = FakeEvictor()
    record = journaled(evictor, journal).run_cycle()
    assert record is not None
    assert evictor.calls == [HOT_POD] and evictor.sent == []
    assert [(e.result, e.message) for e in record.evictions] == [
        ("failed", "not sent: its migration record could not be written first (unavailable)")
    ]
    assert record.journal_failures == ("unavailable",)


def test_records_written_by_another_replica_meanwhile_are_kept_and_nothing_is_sent_beside_them() -> None:
    theirs = Entry(
        "default/other", "uid-other", "cn-beijing.10.0.0.53", "w-other", "Deployment", "other", NOW, "evicted"
    )
    journal = FakeJournal(save_errors=[JournalWriteError("conflict", "409")], written_meanwhile=(theirs,))
    evictor = FakeEvictor()
    run = journaled(evictor, journal)
    record = run.run_cycle()
    assert record is not None
    assert evictor.sent == []
    assert record.journal_failures == ("conflict",)
    assert "default/other" in {m.pod for m in run.state.migrations}
    assert "default/other" in {e.pod for e in journal.entries}


def test_a_dry_run_reads_the_records_but_never_writes() -> None:
    journal = FakeJournal()
    config = seed_config(anomalyCondition={"consecutiveAbnormalities": 1}, dryRun=True)
    record = journaled(FakeEvictor(results=["would-evict"]), journal, config=config).run_cycle()
    assert record is not None and record.restore is not None
    assert journal.loads == 1 and journal.saves == []


def test_a_takeover_reads_the_previous_leaders_records_again() -> None:
    journal = FakeJournal()
    run = journaled(FakeEvictor(), journal)
    run.run_cycle()
    journal.entries = (*journal.entries, replace(journal.entries[0], pod="default/late", uid="u-late"))
    run.request_restore()
    record = run.run_cycle()
    assert record is not None and record.restore is not None
    assert "default/late" in {m.pod for m in run.state.migrations}


def test_an_eviction_of_unknown_outcome_is_recorded_as_such_and_a_successor_settles_it() -> None:
    journal = FakeJournal()
    journaled(FakeEvictor(results=["unknown"]), journal).run_cycle()
    assert statuses(journal.entries) == [(HOT_POD, "unknown")]
    assert journal.entries[0].reason, "kept for the Event that settles it"
    successor = FakeEvictor()
    record = journaled(successor, journal).run_cycle()
    assert record is not None
    assert record.unconfirmed == (HOT_POD,)
    assert HOT_POD not in successor.sent


# --- the anomaly detectors outlive the process too ---------------------------------------------------------

HOT_NODE = "cn-beijing.10.0.0.53"


def counting_runner(
    evictor: FakeEvictor, journal: FakeJournal, wall: list[float], **kwargs: Any
) -> CycleRunner:
    """Hotspots confirmed on the 3rd over cycle and for 10 minutes; samples trusted for an hour so that
    only the detector's own bounds decide."""
    config = seed_config(
        anomalyCondition={"consecutiveAbnormalities": 3, "timeout": "10m"}, nodeMetricExpirationSeconds=3600
    )
    return journaled(evictor, journal, wall=wall, config=config, **kwargs)


@pytest.mark.parametrize(
    ("restart_after", "stored_by_first", "evicts_at_once"),
    [
        (60.0, True, True),  # count 2 of 3 kept: the successor's first cycle is the 3rd over cycle
        (60.0, False, False),  # an old journal without detectors: counting starts again, as before
        (60.0 + 301.0, True, False),  # older than detectorCacheTimeout (5m): not trusted
    ],
)
def test_a_successor_takes_up_the_anomaly_counts_where_they_were(
    restart_after: float, stored_by_first: bool, evicts_at_once: bool
) -> None:
    journal = FakeJournal()
    wall = [NOW]
    first = counting_runner(FakeEvictor(), journal, wall)
    first.run_cycle()
    wall[0] = NOW + 60
    first.run_cycle()
    assert journal.stored.nodes[HOT_NODE].count == 2, "written though nothing was evicted"
    if not stored_by_first:
        journal.stored = Detectors()
    wall[0] = NOW + 60 + restart_after
    second = FakeEvictor()
    record = counting_runner(second, journal, wall).run_cycle()
    assert record is not None
    hot = next(r for r in record.plan.node_reports if r.node == HOT_NODE)
    assert (hot.anomaly_count, hot.node_class) == ((3, "hotspot") if evicts_at_once else (1, "over"))
    assert bool(second.sent) is evicts_at_once


def test_a_confirmed_node_survives_a_restart_and_its_timeout_still_runs() -> None:
    journal = FakeJournal(
        stored=Detectors(nodes={HOT_NODE: AnomalyCount(0, NOW - 60, 2, NOW - 240)}),
    )
    wall = [NOW]
    evictor = FakeEvictor()
    record = counting_runner(evictor, journal, wall).run_cycle()
    assert record is not None
    hot = next(r for r in record.plan.node_reports if r.node == HOT_NODE)
    assert (hot.node_class, hot.confirmed) == ("hotspot", True), "confirmed 4 minutes ago, timeout 10m"
    assert evictor.sent
    late = FakeJournal(stored=Detectors(nodes={HOT_NODE: AnomalyCount(0, NOW - 60, 2, NOW - 600)}))
    record = counting_runner(FakeEvictor(), late, wall).run_cycle()
    assert record is not None
    assert next(r for r in record.plan.node_reports if r.node == HOT_NODE).node_class == "over"


def test_a_standby_never_writes_its_own_counts_over_the_leaders() -> None:
    journal = FakeJournal()
    wall = [NOW]
    standby = counting_runner(FakeEvictor(), journal, wall, is_leader=lambda: False)
    standby.run_cycle()
    assert journal.detector_saves == [] and not journal.stored


def crashed_intent(at: float) -> Entry:
    """The record a process wrote before evicting from the hot node, then died before confirming it."""
    return Entry(
        pod="default/stress-demo-588f9646cf-aaaaa",
        uid="uid-of-a-pod-already-gone",
        node=HOT_NODE,
        workload="uid-stress-demo",
        workload_kind="Deployment",
        workload_name="stress-demo",
        at=at,
        status=records.INTENT,
    )


CRASHED = [
    ("count 2 of 3 kept, intent after it", AnomalyCount(2, NOW - 60), NOW - 30, (1, "over"), False),
    ("confirmed, intent after it", AnomalyCount(0, NOW - 60, 1, NOW - 120), NOW - 30, (1, "over"), False),
    ("count 2 of 3 written after the intent", AnomalyCount(2, NOW - 60), NOW - 90, (3, "hotspot"), True),
]  # fmt: skip


@pytest.mark.parametrize(
    ("detector", "intent_at", "hot", "evicts_at_once"), [c[1:] for c in CRASHED], ids=[c[0] for c in CRASHED]
)
def test_a_record_of_a_node_newer_than_its_detector_makes_the_successor_count_again(
    detector: AnomalyCount, intent_at: float, hot: tuple[int, str], evicts_at_once: bool
) -> None:
    journal = FakeJournal(entries=(crashed_intent(intent_at),), stored=Detectors(nodes={HOT_NODE: detector}))
    evictor = FakeEvictor()
    record = counting_runner(evictor, journal, [NOW]).run_cycle()
    assert record is not None
    report = next(r for r in record.plan.node_reports if r.node == HOT_NODE)
    assert (report.anomaly_count, report.node_class) == hot
    assert bool(evictor.sent) is evicts_at_once


# --- a deleted journal: rebuilt from Events, then a quiet period -------------------------------------------


class ObjectEvents:
    """Events on objects (``record_object``), as (kind, namespace/name, type, reason)."""

    def __init__(self) -> None:
        self.said: list[tuple[str, str, str, str]] = []

    def record_object(self, regarding: Any, type_: str, reason: str, message: str, *, action: str) -> None:
        self.said.append((regarding.kind, f"{regarding.namespace}/{regarding.name}", type_, reason))


LOST = [
    ("its Events read: the longest back-off", (crashed_intent(NOW - 60),), 3600.0, 1),
    ("not even its Events: the fallback", None, 300.0, 0),
]  # fmt: skip


@pytest.mark.parametrize(("rebuilt", "quiet", "migrations"), [c[1:] for c in LOST], ids=[c[0] for c in LOST])
def test_a_deleted_journal_is_said_loudly_and_holds_evictions_for_a_quiet_period(
    rebuilt: tuple[Entry, ...] | None, quiet: float, migrations: int
) -> None:
    lost = records.JournalLost("ConfigMap test/records is gone", rebuilt, "test", "records")
    journal = FakeJournal(load_errors=[lost])
    events, clock, evictor = ObjectEvents(), [0.0], FakeEvictor()
    run = journaled(evictor, journal, clock=clock, events=events)
    record = run.run_cycle()
    assert record is not None and record.restore is not None
    assert (record.restore.result, record.restore.reason, record.restore.migrations) == (
        "fallback", "lost", migrations,
    )  # fmt: skip
    assert record.quiet_seconds_left == quiet, "objectLimiters 5m, pingPongGuard.maxCooldown 1h"
    assert events.said == [("ConfigMap", "test/records", "Warning", "MigrationJournalLost")]
    assert evictor.sent == [] and journal.saves == [], "not written during the quiet period either"
    clock[0] = quiet + 1
    run.run_cycle()
    assert evictor.sent == [HOT_POD]
    assert len({e.pod for e in journal.entries}) == migrations + 1, "written again, rebuilt records too"


# --- a journal near its size limit is compacted, not stalled ---------------------------------------------


class SizedJournal(FakeJournal):
    """The ConfigMap with its size limit: a save larger than ``MAX_BYTES`` is refused, as the API would."""

    def save(self, entries: Sequence[Entry], detectors: Detectors | None = None) -> None:
        text = records.encode(
            entries, writer="me", detectors=detectors if detectors is not None else self.stored
        )
        if len(text.encode()) > records.MAX_BYTES:
            raise JournalWriteError("too-large", f"{len(text)} bytes")
        super().save(entries, detectors)


def many_detectors(nodes: int, confirmed: bool) -> Detectors:
    """Counts on ``nodes`` other nodes (long EKS names, ~80 bytes each), written just now."""
    return Detectors(
        nodes={
            f"ip-10-{i // 65536 % 256}-{i // 256 % 256}-{i % 256}.eu-west-1.compute.internal": AnomalyCount(
                1, NOW, 0, NOW if confirmed else None
            )
            for i in range(nodes)
        }
    )


@pytest.mark.parametrize("confirmed", [False, True], ids=["counting", "confirmed"])
def test_a_journal_nearing_its_limit_drops_detectors_and_the_eviction_is_still_sent(confirmed: bool) -> None:
    journal = SizedJournal(stored=many_detectors(12_000, confirmed))
    evictor = FakeEvictor()
    run = journaled(evictor, journal)
    record = run.run_cycle()
    assert record is not None
    assert evictor.sent == [HOT_POD], "not stalled by a journal that no longer fits"
    assert record.journal_failures == ()
    assert "unconfirmed-detectors" in record.journal_compactions
    assert ("confirmed-detectors" in record.journal_compactions) is confirmed
    assert [(e.pod, e.status) for e in journal.entries] == [(HOT_POD, "evicted")], "every record kept"
    assert len(records.encode(journal.entries, writer="me", detectors=journal.stored)) <= records.COMPACT_AT
