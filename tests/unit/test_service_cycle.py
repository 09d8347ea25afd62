"""The cycle runner: only real evictions count; no eviction without leadership, time or consent."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest

from descheduler.config.load import EffectiveConfig
from tests.unit.fakes import FakeEvictor, FakeTainter, SeedUsage, seed_config, seed_runner


def test_a_hotspot_is_relieved_by_evicting_the_pod_that_covers_its_excess() -> None:
    evictor = FakeEvictor()
    record = seed_runner(evictor).run_cycle()
    assert record is not None
    assert evictor.calls == ["default/stress-demo-588f9646cf-s7k2p"]
    assert [e.result for e in record.evictions] == ["evicted"]


def test_pod_usage_is_fetched_only_for_the_nodes_over_a_high_threshold() -> None:
    usage = SeedUsage()
    record = seed_runner(FakeEvictor(), usage=usage).run_cycle()
    assert record is not None
    over = sorted(r.node for r in record.plan.node_reports if r.node_class in ("over", "hotspot"))
    assert over == ["cn-beijing.10.0.0.53"]
    assert usage.pod_requests == [over]


def test_pod_usage_is_not_fetched_at_all_while_paused() -> None:
    usage = SeedUsage()
    seed_runner(FakeEvictor(), usage=usage, config=seed_config(paused=True)).run_cycle()
    assert usage.pod_requests == [[]]


def test_a_failed_eviction_does_not_reset_the_anomaly_so_the_next_cycle_tries_again() -> None:
    evictor = FakeEvictor(results=["failed"])
    run = seed_runner(evictor)
    run.run_cycle()
    second = run.run_cycle()
    assert second is not None
    assert evictor.calls == ["default/stress-demo-588f9646cf-s7k2p"] * 2


def test_a_successful_eviction_resets_the_count_and_an_in_flight_migration_is_not_repeated() -> None:
    evictor = FakeEvictor()
    run = seed_runner(evictor, config=seed_config(anomalyCondition={"consecutiveAbnormalities": 2}))
    calls_after_each_cycle = []
    counts = []
    for _ in range(4):
        record = run.run_cycle()
        assert record is not None
        calls_after_each_cycle.append(len(evictor.calls))
        counts.append(
            next(r.anomaly_count for r in record.plan.node_reports if r.node == "cn-beijing.10.0.0.53")
        )
    # acts at the 2nd consecutive over cycle; the static cluster still holds the pod, so its migration is in
    # flight and its workload's window is open: the 4th cycle moves another workload's pod instead
    assert calls_after_each_cycle == [0, 1, 1, 2]
    assert evictor.calls[0] == "default/stress-demo-588f9646cf-s7k2p"
    assert evictor.calls[1] != evictor.calls[0]
    assert counts[:2] == [1, 2]
    assert counts[2] == 1  # the count restarted after the real eviction


@pytest.mark.parametrize(
    ("setup", "reason"),
    [
        (lambda r: r.stopping.set(), "shutdown requested"),
        (lambda r: setattr(r, "signals", replace(r.signals, is_leader=lambda: False)), "lost leadership"),
        (lambda r: setattr(r, "budget", 0.0), "cycle time budget spent"),
    ],
)
def test_no_eviction_is_attempted_when(setup: Any, reason: str) -> None:
    evictor = FakeEvictor()
    run = seed_runner(evictor)
    setup(run)
    record = run.run_cycle()
    assert record is not None
    assert evictor.calls == []
    assert record.aborted == reason
    assert all(e.result == "not-attempted" for e in record.evictions)


def test_after_a_restart_nothing_is_evicted_until_the_object_limiter_window_has_passed() -> None:
    clock = [100.0]
    evictor = FakeEvictor()
    run = seed_runner(evictor, monotonic=lambda: clock[0], startup_quiet_seconds=300.0)
    record = run.run_cycle()
    assert record is not None
    assert evictor.calls == []
    assert record.aborted.startswith("start-up quiet period")
    clock[0] += 301
    run.run_cycle()
    assert evictor.calls == ["default/stress-demo-588f9646cf-s7k2p"]


def test_a_node_whose_pods_could_not_be_read_is_never_a_source() -> None:
    evictor = FakeEvictor()
    run = seed_runner(evictor, untrusted_nodes=lambda: {"cn-beijing.10.0.0.53": "a pod could not be read"})
    record = run.run_cycle()
    assert record is not None
    assert evictor.calls == []
    hot = next(r for r in record.plan.node_reports if r.node == "cn-beijing.10.0.0.53")
    assert hot.node_class == "skipped"
    assert "a pod could not be read" in hot.skip_message


def test_untrusted_usage_means_no_eviction_and_the_nodes_are_reported() -> None:
    evictor = FakeEvictor()
    record = seed_runner(evictor, usage=SeedUsage(broken=True)).run_cycle()
    assert record is not None
    assert evictor.calls == []
    assert {r.node_class for r in record.plan.node_reports} == {"skipped"}
    assert "prometheus unreachable" in " ".join(r.skip_message for r in record.plan.node_reports)


def test_cycles_never_overlap() -> None:
    entered = threading.Event()
    release = threading.Event()

    def block() -> None:
        entered.set()
        release.wait(5)

    evictor = FakeEvictor(on_call=block)
    run = seed_runner(evictor)
    worker = threading.Thread(target=run.run_cycle)
    worker.start()
    assert entered.wait(5)
    assert run.run_cycle() is None
    release.set()
    worker.join(5)
    assert evictor.calls == ["default/stress-demo-588f9646cf-s7k2p"]


def test_the_record_is_json_ready_and_names_every_eviction_result() -> None:
    record = seed_runner(FakeEvictor(results=["refused-by-pdb"])).run_cycle()
    assert record is not None
    body = record.to_dict()
    assert body["evictions"][0]["result"] == "refused-by-pdb"
    assert {n["node"] for n in body["nodes"]} == {
        "cn-beijing.10.0.0.53",
        "cn-beijing.10.0.0.215",
        "cn-beijing.10.0.0.120",
    }


TAINTING = {"anomalyCondition": {"consecutiveAbnormalities": 1}, "hotspotTaint": {"enabled": True}}


def test_with_hotspot_taint_the_hotspot_is_tainted_before_its_pod_is_evicted() -> None:
    calls: list[str] = []
    evictor = FakeEvictor(calls=calls)
    record = seed_runner(evictor, config=seed_config(**TAINTING), tainter=FakeTainter(calls)).run_cycle()
    assert record is not None
    assert calls == ["taint cn-beijing.10.0.0.53", "default/stress-demo-588f9646cf-s7k2p"]
    assert record.to_dict()["hotspotTaints"] == {
        "changes": [{"node": "cn-beijing.10.0.0.53", "result": "added"}],
        "kept": [],
    }


@pytest.mark.parametrize(
    ("case", "config", "leader"),
    [
        ("hotspotTaint is off", seed_config(anomalyCondition={"consecutiveAbnormalities": 1}), True),
        ("not the leader", seed_config(**TAINTING), False),
    ],
)
def test_no_taint_is_touched(case: str, config: EffectiveConfig, leader: bool) -> None:
    calls: list[str] = []
    run = seed_runner(FakeEvictor(), config=config, tainter=FakeTainter(calls), is_leader=lambda: leader)
    run.run_cycle()
    assert calls == [], case
