"""The simulate loop: clock, usage per cycle, evicted pods leaving, and the optional rescheduler."""

from __future__ import annotations

from collections.abc import Mapping

from descheduler.simulate.inputs import Sample, UsageSeries
from descheduler.simulate.runner import run, start_time, usage_for_cycle
from descheduler.units import resource_amount
from tests.unit.builders import NOW, World, cpu, settings


def sample(values: Mapping[str, str], age: float = 0.0) -> Sample:
    return Sample({k: resource_amount(k, v) for k, v in values.items()}, age)


def series(
    nodes: Mapping[str, list[Mapping[str, str]]], pods: Mapping[str, Mapping[str, str]]
) -> UsageSeries:
    return UsageSeries(
        nodes={k: tuple(sample(v) for v in values) for k, values in nodes.items()},
        pods={k: (sample(v),) for k, v in pods.items()},
    )


def hot_cluster() -> World:
    world = World().node("hot").node("cool").node("cool-2", cpu="10")
    world.deployment("web", replicas=10)
    world.pod("a", on="hot", owner="web", created=NOW - 600)
    world.pod("b", on="hot", owner="web", created=NOW - 300)
    return world


PODS = {"default/a": cpu("3"), "default/b": cpu("2")}


def test_cycles_run_one_interval_apart_from_one_metrics_window_after_the_newest_pod() -> None:
    world = hot_cluster()
    config = settings(top={"deschedulingInterval": "2m"})  # the default Prometheus window is 5m
    results = run(config, world.snapshot(), series({"hot": [cpu("9")], "cool": [cpu("1")]}, PODS), cycles=3)
    assert [r.now - (NOW - 300) for r in results] == [300.0, 420.0, 540.0]


def test_the_first_cycle_is_one_interval_after_the_newest_pod_when_the_interval_is_longer() -> None:
    assert start_time(hot_cluster().snapshot(), 600.0, 300.0) == NOW - 300 + 600


def test_a_node_without_a_sample_uses_the_sum_of_its_pods_samples_and_one_with_neither_has_no_usage() -> None:
    world = hot_cluster()
    usage = usage_for_cycle(series({}, PODS), _world(world), 1, NOW)
    assert usage.nodes["hot"].resources == {"cpu": 5000, "memory": 2 * 1024**3}
    assert "cool" not in usage.nodes  # skipped as "no-usage", as the live service skips it


def _world(world: World) -> object:
    from descheduler.simulate.runner import _World

    return _World(world.snapshot())


def test_an_evicted_pod_is_gone_and_its_usage_leaves_its_node_in_later_cycles() -> None:
    world = hot_cluster()
    config = settings(top={"maxNoOfPodsToEvictPerNode": 1})
    results = run(config, world.snapshot(), series({"hot": [cpu("9")], "cool": [cpu("1")]}, PODS), cycles=2)
    assert [e.pod.key for e in results[0].plan.evictions] == ["default/a"]
    hot = next(r for r in results[1].plan.node_reports if r.node == "hot")
    assert (hot.resources[0].usage, hot.node_class) == (6000, "hotspot")
    assert [e.pod.key for e in results[1].plan.evictions] == ["default/b"]


def test_usage_lists_give_one_sample_per_cycle_and_the_last_repeats() -> None:
    world = hot_cluster()
    usage = series({"hot": [cpu("9"), cpu("4"), cpu("9")], "cool": [cpu("1")], "cool-2": [cpu("1")]}, PODS)
    results = run(settings(consecutive=2), world.snapshot(), usage, cycles=4)
    assert [next(r.anomaly_count for r in c.plan.node_reports if r.node == "hot") for c in results] == [
        1,
        0,
        1,
        2,
    ]
    assert [len(c.plan.evictions) for c in results] == [0, 0, 0, 2]


def test_with_reschedule_an_evicted_pod_is_recreated_on_the_least_loaded_node_that_fits() -> None:
    world = hot_cluster()
    world.node("tainted", taints=[{"key": "x", "value": "y", "effect": "NoSchedule"}])
    usage = series(
        {"hot": [cpu("9")], "cool": [cpu("1")], "cool-2": [cpu("1.5")], "tainted": [cpu("0")]}, PODS
    )
    results = run(settings(), world.snapshot(), usage, cycles=2, reschedule=True)
    assert [(m.pod, m.source, m.destination) for m in results[0].rescheduled] == [
        ("default/a", "hot", "cool"),  # 10% is the least loaded; tainted does not fit
        ("default/b", "hot", "cool-2"),  # cool is now at 40%, cool-2 at 15%
    ]
    usage_after = {r.node: r.resources[0].usage for r in results[1].plan.node_reports}
    assert usage_after == {"hot": 4000, "cool": 4000, "cool-2": 3500, "tainted": 0}


def test_with_reschedule_a_pod_that_fits_nowhere_stays_pending() -> None:
    world = World().node("hot").node("cool")
    world.deployment("web", replicas=10)
    world.pod("picky", on="hot", owner="web", node_selector={"disk": "ssd"})  # no node has an ssd any more
    usage = series({"hot": [cpu("9")], "cool": [cpu("1")]}, {"default/picky": cpu("4")})
    results = run(settings(args={"nodeFit": False}), world.snapshot(), usage, cycles=1, reschedule=True)
    assert [(m.pod, m.destination) for m in results[0].rescheduled] == [("default/picky", "")]
