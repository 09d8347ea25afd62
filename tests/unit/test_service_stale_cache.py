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


BROKEN = 400.0
"""``max_cache_age`` with long watches: older is a broken watch (``kube.cache.broken_after``)."""


class Server:
    """The refresh edge: re-opening a watch the server ``answers`` makes its age 0; records what was asked."""

    def __init__(self, ages: dict[str, float], answers: bool, on_answer: Any = None) -> None:
        self.ages, self.answers, self.on_answer = ages, answers, on_answer
        self.asked: list[list[str]] = []

    def refresh(self, names: Any) -> None:
        self.asked.append(list(names))
        if self.answers:
            self.ages.update(dict.fromkeys(names, 0.0))
            if self.on_answer is not None:
                self.on_answer()


def lazy_runner(
    server: Server, evictor: FakeEvictor, world: World, cluster: Cluster | None = None
) -> CycleRunner:
    return cycle_runner(
        settings(low={"cpu": 20}, high={"cpu": 50}),
        cluster or Cluster(world.snapshot()),
        Usage(world),
        evictor,
        wall_clock=lambda: NOW,
        cache_ages=lambda: server.ages,
        refresh=server.refresh,
        max_cache_age=BROKEN,
        act_cache_age=BOUND,
    )


@pytest.mark.parametrize(
    ("ages", "answers", "asked", "evicts", "skipped_because"),
    [
        ({"pods": 1.0, "nodes": 2.0}, True, [], True, None),
        ({"pods": 100.0, "nodes": 2.0}, True, [["pods"]], True, None),
        ({"pods": 100.0, "nodes": 50.0}, False, [["nodes", "pods"]], False, "nodes 50s ago, pods 100s ago"),
        ({"pods": 500.0, "nodes": 2.0}, True, [], False, "pods 500s ago"),
    ],
    ids=["fresh-acts-without-refresh", "quiet-refreshed-then-acts", "quiet-unanswered", "broken"],
)
def test_a_cycle_acts_only_once_every_quiet_resource_is_proven_fresh(
    ages: dict[str, float],
    answers: bool,
    asked: list[list[str]],
    evicts: bool,
    skipped_because: str | None,
) -> None:
    server, evictor = Server(dict(ages), answers), FakeEvictor()
    record = lazy_runner(server, evictor, hot_world()).run_cycle()
    assert record is not None
    assert server.asked == asked
    assert bool(evictor.calls) == evicts
    if skipped_because is None:
        assert record.skipped == ""
    else:
        assert record.skip_code == "stale-cache" and skipped_because in record.skipped


def test_an_idle_cycle_on_a_quiet_cache_runs_and_refreshes_nothing() -> None:
    world = World().node("a", cpu="10", usage=cpu("1")).node("b", cpu="10", usage=cpu("1"))
    server, evictor = Server({"pods": 200.0, "nodes": 200.0}, answers=True), FakeEvictor()
    run = lazy_runner(server, evictor, world)
    record = run.run_cycle()
    assert record is not None and record.skipped == ""
    assert server.asked == [] and evictor.calls == []


def test_a_refreshed_cache_is_planned_again_so_what_the_watch_brought_stops_the_eviction() -> None:
    """The re-opened watch brings the news that the hot node's pods are gone: nothing is evicted."""
    world = hot_world()
    cluster = Cluster(world.snapshot())

    def pods_gone() -> None:
        for i in range(1, 5):
            cluster.remove_pod(f"default/web-{i}")

    server, evictor = Server({"pods": 100.0}, answers=True, on_answer=pods_gone), FakeEvictor()
    record = lazy_runner(server, evictor, world, cluster).run_cycle()
    assert record is not None and record.skipped == ""
    assert server.asked == [["pods"]] and evictor.calls == []
