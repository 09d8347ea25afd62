"""No cycle on a stale watch cache: a silent watch must not let the planner act on a cluster long gone."""

from __future__ import annotations

from typing import Any

import pytest

from descheduler.service.cycle import CycleRunner
from tests.unit.builders import NOW, World, cpu, cycle_runner, settings
from tests.unit.fakes import Cluster, FakeEvictor, Usage, hot_world

BOUND = 30.0


def runner(
    ages: dict[str, float], evictor: FakeEvictor, world: World | None = None, **kw: Any
) -> CycleRunner:
    world = world or hot_world()
    return cycle_runner(
        settings(low={"cpu": 20}, high={"cpu": 50}, **kw),
        Cluster(world.snapshot()),
        Usage(world),
        evictor,
        wall_clock=lambda: NOW,
        cache_ages=lambda: ages,
        max_cache_age=BOUND,
    )


@pytest.mark.parametrize(
    ("ages", "skipped_because"),
    [
        ({"pods": 1.0, "nodes": 2.0}, None),
        ({"pods": BOUND, "nodes": 2.0}, None),
        ({"pods": 56.0, "nodes": 2.0}, "pods 56s ago"),
        ({"pods": 1.0, "deployments": float("inf")}, "deployments never"),
    ],
    ids=["fresh", "at-the-bound", "pods-stalled", "never-listed"],
)
def test_a_cycle_runs_only_on_a_fresh_cache(ages: dict[str, float], skipped_because: str | None) -> None:
    evictor = FakeEvictor()
    record = runner(ages, evictor).run_cycle()
    assert record is not None
    if skipped_because is None:
        assert record.skipped == "" and len(evictor.calls) >= 1
    else:
        assert evictor.calls == []
        assert record.skip_code == "stale-cache"
        assert skipped_because in record.skipped
        assert record.to_dict()["skipped"]["code"] == "stale-cache"


def test_a_skipped_cycle_leaves_the_anomaly_counts_as_they_were() -> None:
    ages = {"pods": 1.0}
    evictor = FakeEvictor()
    run = runner(ages, evictor, consecutive=3)
    run.run_cycle()
    ages["pods"] = 100.0
    run.run_cycle()
    run.run_cycle()
    assert dict((k, v.count) for k, v in run.state.anomalies.items())["hot"] == 1
    ages["pods"] = 1.0
    run.run_cycle()
    assert run.state.anomalies["hot"].count == 2
    assert evictor.calls == []


def test_without_a_bound_the_age_is_not_checked() -> None:
    world = World().node("a", usage=cpu("1"))
    run = cycle_runner(
        settings(),
        Cluster(world.snapshot()),
        Usage(world),
        FakeEvictor(),
        cache_ages=lambda: {"pods": 1e9},
    )
    record = run.run_cycle()
    assert record is not None and record.skipped == ""
