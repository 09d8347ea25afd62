"""The cycle runner: only real evictions count; no eviction without leadership, time or consent."""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from descheduler.cluster.parse import build_snapshot, iter_objects
from descheduler.cluster.types import ClusterSnapshot, Node, Pod, UsageSample, UsageSnapshot
from descheduler.config.load import EffectiveConfig, load_config_document
from descheduler.service.cycle import CycleRunner
from descheduler.units import resource_amount
from tests.unit.builders import cycle_runner

SEED = Path(__file__).resolve().parents[1] / "scenarios" / "seed-stress-demo"
NOW = 1_800_000_000.0


def seed_config(**lnl: Any) -> EffectiveConfig:
    doc = yaml.safe_load((SEED / "config.yaml").read_text())
    doc["profiles"][0]["pluginConfig"][0]["args"].update(lnl)
    return load_config_document(doc)


class StaticCluster:
    def __init__(self) -> None:
        self.value: ClusterSnapshot = build_snapshot(
            iter_objects(yaml.safe_load_all((SEED / "cluster.yaml").read_text()))
        )

    def snapshot(self) -> ClusterSnapshot:
        return self.value


class SeedUsage:
    """The seed scenario's measured usage, fresh at every fetch."""

    def __init__(self, broken: bool = False) -> None:
        raw = yaml.safe_load((SEED / "usage.yaml").read_text())
        self.raw = raw
        self.broken = broken
        self.pod_requests: list[list[str] | None] = []
        """The nodes each cycle asked pod usage for."""

    def fetch_nodes(self, nodes: Sequence[Node]) -> UsageSnapshot:
        if self.broken:
            return UsageSnapshot(node_errors={n.name: "prometheus unreachable" for n in nodes})
        return UsageSnapshot(nodes={name: sample(v) for name, v in self.raw["nodes"].items()})

    def fetch_pods(
        self, wanted: Collection[str] | None, nodes: Sequence[Node], pods: Sequence[Pod]
    ) -> dict[str, UsageSample]:
        self.pod_requests.append(None if wanted is None else sorted(wanted))
        on = {p.key for p in pods if wanted is None or p.node_name in wanted}
        return {key: sample(v) for key, v in self.raw["pods"].items() if key in on}


def sample(values: dict[str, str]) -> UsageSample:
    return UsageSample({k: resource_amount(k, v) for k, v in values.items()}, NOW)


@dataclass
class Outcome:
    result: str
    message: str = ""
    retry_after: float | None = None


@dataclass
class FakeEvictor:
    results: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    on_call: Any = None

    sent: list[str] = field(default_factory=list)
    """Requests that left (``before_send`` allowed them)."""

    def evict(self, pod: Pod, node: str, reason: str, deadline: float, before_send: Any = None) -> Outcome:
        self.calls.append(pod.key)
        if before_send is not None:
            refusal = before_send()
            if refusal:
                return Outcome("failed", refusal)
        self.sent.append(pod.key)
        if self.on_call:
            self.on_call()
        return Outcome(self.results.pop(0) if self.results else "evicted")

    def report_resolved(self, pod: Pod, node: str, reason: str, result: str, message: str) -> None:
        self.calls.append(f"resolved {pod.key}: {result}")


def runner(evictor: FakeEvictor, *, config: EffectiveConfig | None = None, **kwargs: Any) -> CycleRunner:
    return cycle_runner(
        config or seed_config(anomalyCondition={"consecutiveAbnormalities": 1}),
        StaticCluster(),
        kwargs.pop("usage", SeedUsage()),
        evictor,
        wall_clock=kwargs.pop("wall_clock", lambda: NOW),
        **kwargs,
    )


def test_a_hotspot_is_relieved_by_evicting_the_pod_that_covers_its_excess() -> None:
    evictor = FakeEvictor()
    record = runner(evictor).run_cycle()
    assert record is not None
    assert evictor.calls == ["default/stress-demo-588f9646cf-s7k2p"]
    assert [e.result for e in record.evictions] == ["evicted"]


def test_pod_usage_is_fetched_only_for_the_nodes_over_a_high_threshold() -> None:
    usage = SeedUsage()
    record = runner(FakeEvictor(), usage=usage).run_cycle()
    assert record is not None
    over = sorted(r.node for r in record.plan.node_reports if r.node_class in ("over", "hotspot"))
    assert over == ["cn-beijing.10.0.0.53"]
    assert usage.pod_requests == [over]


def test_pod_usage_is_not_fetched_at_all_while_paused() -> None:
    usage = SeedUsage()
    runner(FakeEvictor(), usage=usage, config=seed_config(paused=True)).run_cycle()
    assert usage.pod_requests == [[]]


def test_a_failed_eviction_does_not_reset_the_anomaly_so_the_next_cycle_tries_again() -> None:
    evictor = FakeEvictor(results=["failed"])
    run = runner(evictor)
    run.run_cycle()
    second = run.run_cycle()
    assert second is not None
    assert evictor.calls == ["default/stress-demo-588f9646cf-s7k2p"] * 2


def test_a_successful_eviction_resets_the_count_and_an_in_flight_migration_is_not_repeated() -> None:
    evictor = FakeEvictor()
    run = runner(evictor, config=seed_config(anomalyCondition={"consecutiveAbnormalities": 2}))
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
    run = runner(evictor)
    setup(run)
    record = run.run_cycle()
    assert record is not None
    assert evictor.calls == []
    assert record.aborted == reason
    assert all(e.result == "not-attempted" for e in record.evictions)


def test_after_a_restart_nothing_is_evicted_until_the_object_limiter_window_has_passed() -> None:
    clock = [100.0]
    evictor = FakeEvictor()
    run = runner(evictor, monotonic=lambda: clock[0], startup_quiet_seconds=300.0)
    record = run.run_cycle()
    assert record is not None
    assert evictor.calls == []
    assert record.aborted.startswith("start-up quiet period")
    clock[0] += 301
    run.run_cycle()
    assert evictor.calls == ["default/stress-demo-588f9646cf-s7k2p"]


def test_a_node_whose_pods_could_not_be_read_is_never_a_source() -> None:
    evictor = FakeEvictor()
    run = runner(evictor, untrusted_nodes=lambda: {"cn-beijing.10.0.0.53": "a pod could not be read"})
    record = run.run_cycle()
    assert record is not None
    assert evictor.calls == []
    hot = next(r for r in record.plan.node_reports if r.node == "cn-beijing.10.0.0.53")
    assert hot.node_class == "skipped"
    assert "a pod could not be read" in hot.skip_message


def test_untrusted_usage_means_no_eviction_and_the_nodes_are_reported() -> None:
    evictor = FakeEvictor()
    record = runner(evictor, usage=SeedUsage(broken=True)).run_cycle()
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
    run = runner(evictor)
    worker = threading.Thread(target=run.run_cycle)
    worker.start()
    assert entered.wait(5)
    assert run.run_cycle() is None
    release.set()
    worker.join(5)
    assert evictor.calls == ["default/stress-demo-588f9646cf-s7k2p"]


def test_the_record_is_json_ready_and_names_every_eviction_result() -> None:
    record = runner(FakeEvictor(results=["refused-by-pdb"])).run_cycle()
    assert record is not None
    body = record.to_dict()
    assert body["evictions"][0]["result"] == "refused-by-pdb"
    assert {n["node"] for n in body["nodes"]} == {
        "cn-beijing.10.0.0.53",
        "cn-beijing.10.0.0.215",
        "cn-beijing.10.0.0.120",
    }


@dataclass
class FakeTainter:
    calls: list[str]

    def add(self, node: str, message: str) -> Any:
        self.calls.append(f"taint {node}")
        return _TaintOutcome(node, "added")

    def remove(self, node: str, message: str) -> Any:
        self.calls.append(f"untaint {node}")
        return _TaintOutcome(node, "removed")


@dataclass
class _TaintOutcome:
    node: str
    result: str

    def to_dict(self) -> dict[str, str]:
        return {"node": self.node, "result": self.result}


TAINTING = {"anomalyCondition": {"consecutiveAbnormalities": 1}, "hotspotTaint": {"enabled": True}}


def test_with_hotspot_taint_the_hotspot_is_tainted_before_its_pod_is_evicted() -> None:
    calls: list[str] = []
    evictor = FakeEvictor(calls=calls)
    record = runner(evictor, config=seed_config(**TAINTING), tainter=FakeTainter(calls)).run_cycle()
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
    runner(FakeEvictor(), config=config, tainter=FakeTainter(calls), is_leader=lambda: leader).run_cycle()
    assert calls == [], case
