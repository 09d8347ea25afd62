"""Operator signals: nodes without a usable sample are all counted, /readyz says what is wrong."""

from __future__ import annotations

import pytest

from descheduler.service.audit import nodes_without_sample, readiness, usage_unavailable
from tests.unit.builders import NOW, World, cpu, cycle_runner, settings
from tests.unit.fakes import Cluster, FakeEvictor, Usage


def record_of(world: World) -> object:
    run = cycle_runner(
        settings(),
        Cluster(world.snapshot()),
        Usage(world),
        FakeEvictor(),
        wall_clock=lambda: NOW,
    )
    record = run.run_cycle()
    assert record is not None
    return record


def test_nodes_skipped_for_a_stale_sample_count_as_without_sample() -> None:
    world = World()
    world.node("fresh", usage=cpu("1"))
    world.node("stale", usage=cpu("1"), usage_age=3600)
    world.node("broken", usage=cpu("1"))
    world.node_errors["broken"] = "prometheus: no sample"
    record = record_of(world)
    assert len(record.usage_errors) == 1  # type: ignore[attr-defined]
    assert nodes_without_sample(record) == 2  # type: ignore[arg-type]


def test_a_cycle_without_any_usable_sample_is_reported_as_usage_unavailable() -> None:
    world = World()
    world.node("a", usage=cpu("1"), usage_age=3600)
    world.node("b", usage=cpu("1"), usage_age=3600)
    record = record_of(world)
    assert usage_unavailable(record)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("synced", "stale", "usage", "ready", "says"),
    [
        (True, "", [], True, "ok"),
        (False, "", [], False, "cache not synced"),
        (True, "watch cache stale: pods 56s ago", [], False, "watch cache stale"),
        (True, "", ["prometheus unreachable"], False, "usage source unavailable in the last cycle"),
    ],
    ids=["healthy", "not-synced", "stale-cache", "usage-down"],
)
def test_readyz(synced: bool, stale: str, usage: list[str], ready: bool, says: str) -> None:
    ok, message = readiness(synced, stale, usage)
    assert ok is ready
    assert says in message
