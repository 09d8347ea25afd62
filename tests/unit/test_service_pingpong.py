"""The ping-pong guard in the running service: each back-off is told once (log, Event, metric, audit)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import generate_latest
from structlog.testing import capture_logs

from descheduler.kube.events import Regarding
from descheduler.planner import journal as records
from descheduler.service.audit import observe_record
from descheduler.service.cycle import CycleRunner
from descheduler.service.observability import Metrics
from descheduler.service.records import CycleRecord
from tests.unit.builders import NOW, cycle_runner
from tests.unit.fakes import Cluster, FakeEvictor, Usage
from tests.unit.test_planner_pingpong import first_cycle, guarded, world_after
from tests.unit.test_service_restart import FakeJournal


@dataclass
class FakeEvents:
    written: list[tuple[str, str, str, str, str, str]] = field(default_factory=list)

    def record_object(
        self, regarding: Regarding, type_: str, reason: str, message: str, *, action: str
    ) -> None:
        r = regarding
        self.written.append((r.kind, f"{r.namespace}/{r.name}", r.uid, type_, reason, message))


def metric(metrics: Metrics, line_start: str) -> list[str]:
    text = generate_latest(metrics.registry).decode()
    return [line for line in text.splitlines() if line.startswith(line_start)]


def test_a_back_off_is_announced_once_per_episode() -> None:
    _, state = first_cycle()
    world = world_after(("hot", "hot"))
    config = guarded()
    events = FakeEvents()
    evictor = FakeEvictor()
    metrics = Metrics()
    records: list[CycleRecord] = []
    clock = [NOW + 60]

    def observe(record: CycleRecord) -> None:
        records.append(record)
        observe_record(metrics, record, config)

    runner = cycle_runner(
        config,
        Cluster(world.snapshot()),
        Usage(world),
        evictor,
        events=events,
        on_record=observe,
        wall_clock=lambda: clock[0],
    )
    runner.state = state
    with capture_logs() as logs:
        for _ in range(3):
            runner.run_cycle()
            clock[0] += 2
    announced = [entry for entry in logs if entry["event"] == "ping_pong_backoff"]
    assert len(announced) == 1
    assert announced[0]["workload"] == "Deployment default/web"
    assert announced[0]["attractor"] == "hot"
    assert announced[0]["backoff_number"] == 1
    assert "hotspotTaint" in announced[0]["message"]
    ((kind, workload, uid, type_, reason, message),) = events.written
    assert (kind, workload, type_, reason) == ("Deployment", "default/web", "Warning", "PingPongBackoff")
    assert uid == "uid-deployment-default-web"
    assert "not moved until" in message
    assert metric(metrics, "descheduler_ping_pong_backoffs_total") == [
        'descheduler_ping_pong_backoffs_total{workload="web",workload_kind="Deployment"} 1.0'
    ]
    assert metric(metrics, "descheduler_ping_pong_backing_off_workloads") == [
        "descheduler_ping_pong_backing_off_workloads 1.0"
    ]
    # Every cycle's audit says why the workload's pods stay, and until when.
    for record in records:
        skips = {s["pod"]: s for s in record.to_dict()["skips"]}
        assert skips["default/web-1"]["code"] == "ping-pong-backoff"
        assert record.to_dict()["backoffs"][0]["until"] == "2026-01-01T12:11:00Z"
    assert not evictor.sent


def test_a_restart_keeps_the_back_off_and_does_not_announce_it_again() -> None:
    _, state = first_cycle()
    journal = FakeJournal(entries=records.project(state.migrations, {}, state.departures))
    world = world_after(("hot", "hot"))
    config = guarded()
    clock = [NOW + 60]

    def replica(events: FakeEvents) -> CycleRunner:
        runner = cycle_runner(
            config,
            Cluster(world.snapshot()),
            Usage(world, clock),
            FakeEvictor(),
            events=events,
            journal=journal,
            wall_clock=lambda: clock[0],
        )
        runner.request_restore()
        return runner

    first, second = FakeEvents(), FakeEvents()
    replica(first).run_cycle()
    assert [e[4] for e in first.written] == ["PingPongBackoff"]
    assert sum(1 for e in journal.entries if e.bounced) == 2
    clock[0] = NOW + 400  # a new process, after the objectLimiters window: only the guard keeps the records
    record = replica(second).run_cycle()
    assert record is not None
    assert second.written == []
    assert {s.pod: s.code for s in record.plan.pod_skips}["default/web-1"] == "ping-pong-backoff"
    assert [b.until for b in record.plan.backoffs] == [NOW + 60 + 600]
