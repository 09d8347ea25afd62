"""Evictions of unknown outcome: counted as evictions until the cache shows what happened."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest

from descheduler.cluster.types import Pod
from descheduler.service.cycle import CycleRunner
from descheduler.service.unknown import Unconfirmed, resolve
from tests.unit.builders import NOW, World, cpu, cycle_runner, settings
from tests.unit.fakes import Cluster, FakeEvictor, Usage, hot_world

SENT = NOW
SETTLE = 60.0


@dataclass
class Rig:
    cluster: Cluster
    evictor: FakeEvictor
    runner: CycleRunner
    clock: list[float]

    def cycle(self, after: float = 1.0) -> Any:
        self.clock[0] += after
        record = self.runner.run_cycle()
        assert record is not None
        return record


def rig(
    results: list[str],
    *,
    consecutive: int = 1,
    cache_age: float = 0.0,
    world: World | None = None,
    clock: list[float] | None = None,
    on_call: Callable[[], object] | None = None,
    args: dict[str, Any] | None = None,
    **migration: Any,
) -> Rig:
    """A hot world's cycle runner whose evictor answers ``results`` in turn; ``clock`` is its wall clock."""
    world = world if world is not None else hot_world()
    cluster = Cluster(world.snapshot())
    evictor = FakeEvictor(results=list(results), on_call=on_call)
    clock = clock if clock is not None else [NOW]
    config = settings(
        low={"cpu": 20},
        high={"cpu": 50},
        consecutive=consecutive,
        args=args,
        migration={"objectLimiters": {"workload": {"duration": "5m", "maxMigrating": 1}}, **migration},
        top={"maxNoOfPodsToEvictPerNode": 1},
    )
    runner = cycle_runner(
        config,
        cluster,
        Usage(world),
        evictor,
        wall_clock=lambda: clock[0],
        cache_ages=lambda: {"pods": cache_age, "nodes": 0.0},
        unknown_settle_seconds=SETTLE,
    )
    return Rig(cluster, evictor, runner, clock)


def test_an_eviction_of_unknown_outcome_counts_against_the_workload_window() -> None:
    run = rig(["unknown"])
    first = run.cycle()
    second = run.cycle()
    assert [e.result for e in first.evictions] == ["unknown"]
    assert len(run.evictor.calls) == 1, "the workload's one eviction per 5m is taken by the unknown one"
    assert "object-limiter" in {s.code for s in second.plan.pod_skips}


def test_an_eviction_of_unknown_outcome_resets_the_node_anomaly_count() -> None:
    run = rig(["unknown"], consecutive=2, objectLimiters={})
    counts = []
    for _ in range(3):
        record = run.cycle()
        counts.append(next(r.anomaly_count for r in record.plan.node_reports if r.node == "hot"))
    assert counts == [1, 2, 1], "the count restarts after the possible eviction"
    assert len(run.evictor.calls) == 1


@pytest.mark.parametrize(
    ("change", "result"),
    [
        ("gone", "evicted"),
        ("terminating", "evicted"),
        ("new-uid", "evicted"),
    ],
)
def test_the_cache_confirms_an_unknown_eviction_as_evicted_when_the_pod(change: str, result: str) -> None:
    run = rig(["unknown"])
    first = run.cycle()
    key = first.evictions[0].pod
    assert first.unconfirmed == (key,)
    if change == "gone":
        run.cluster.remove_pod(key)
    elif change == "terminating":
        run.cluster.change_pod(key, terminating=True)
    else:
        run.cluster.change_pod(key, uid="a-successor")
    second = run.cycle()
    assert [(e.pod, e.result) for e in second.resolved] == [(key, result)]
    assert run.evictor.reported == [(key, result)]
    assert second.unconfirmed == ()
    assert second.to_dict()["resolvedEvictions"][0]["result"] == result


def test_an_unknown_eviction_stays_unknown_while_the_server_may_still_apply_it() -> None:
    run = rig(["unknown"])
    key = run.cycle().evictions[0].pod
    second = run.cycle(after=SETTLE / 2)
    assert second.resolved == ()
    assert second.unconfirmed == (key,)
    assert run.evictor.reported == []


def test_a_pod_still_running_unchanged_after_the_settle_time_is_confirmed_failed_and_stops_counting() -> None:
    run = rig(["unknown", "evicted"], objectLimiters={})
    key = run.cycle().evictions[0].pod
    later = run.cycle(after=SETTLE + 1)
    assert [(e.pod, e.result) for e in later.resolved] == [(key, "failed")]
    assert run.evictor.reported == [(key, "failed")]
    assert run.evictor.calls == [key, key], "no longer in flight: the pod is a candidate again"
    migrations = [m.pod for m in run.runner.state.migrations]
    assert migrations == [key], "only the real eviction is a migration, the failed one was dropped"


def test_a_stale_cache_cannot_confirm_a_failure() -> None:
    run = rig(["unknown"], cache_age=SETTLE * 2)
    key = run.cycle().evictions[0].pod
    later = run.cycle(after=SETTLE + 1)
    assert later.resolved == ()
    assert later.unconfirmed == (key,)


def _pod(uid: str = "uid-1", terminating: bool = False) -> Pod:
    snapshot = World().node("n", usage=cpu("1")).pod("p", on="n").snapshot()
    return replace(snapshot.pods[0], uid=uid, terminating=terminating)


@pytest.mark.parametrize(
    ("current", "heard", "expected"),
    [
        (None, SENT + 1, "evicted"),
        (_pod(uid="uid-2"), SENT + 1, "evicted"),
        (_pod(terminating=True), SENT + 1, "evicted"),
        (_pod(), SENT + SETTLE, "failed"),
        (_pod(), SENT + SETTLE - 1, "unknown"),
    ],
    ids=["gone", "new-uid", "terminating", "unchanged-after-settle", "unchanged-before-settle"],
)
def test_resolve_reads_the_cache_as(current: Pod | None, heard: float, expected: str) -> None:
    item = Unconfirmed(_pod(), "n", "m", "hot", SENT)
    pods = {} if current is None else {current.key: current}
    settled, still = resolve([item], pods, heard=heard, settle=SETTLE)
    results = [r.result for r in settled] + ["unknown" for _ in still]
    assert results == [expected]


# --- windows count an unknown eviction from the latest moment the server may have applied it -------------


def window_rig(results: list[str], window: float) -> Rig:
    run = rig(results, objectLimiters={"workload": {"duration": f"{window:g}s", "maxMigrating": 1}})
    return run


def test_an_unknown_eviction_holds_its_workload_window_for_as_long_as_it_stays_unknown() -> None:
    """A 10 s window, an outcome still unknown 40 s later: the server may apply it at any moment."""
    run = window_rig(["unknown", "evicted"], window=10.0)
    key = run.cycle().evictions[0].pod
    later = run.cycle(after=40.0)
    assert later.unconfirmed == (key,)
    assert run.evictor.calls == [key], "no second eviction of the workload while the first may still land"
    assert "object-limiter" in {s.code for s in later.plan.pod_skips}


def test_a_resolved_unknown_eviction_counts_from_when_it_was_resolved_not_when_it_was_sent() -> None:
    """Sent at 0, seen gone at 25 s: a 30 s window still holds it at 40 s (it may have landed at 25 s)."""
    run = window_rig(["unknown", "evicted"], window=30.0)
    key = run.cycle().evictions[0].pod
    run.cluster.remove_pod(key)
    resolved = run.cycle(after=25.0)
    assert [(e.pod, e.result) for e in resolved.resolved] == [(key, "evicted")]
    held = run.cycle(after=15.0)
    assert len(run.evictor.calls) == 1, "40 s after sending, 15 s after it may have landed: still in window"
    assert "object-limiter" in {s.code for s in held.plan.pod_skips}
    run.cycle(after=16.0)
    assert len(run.evictor.calls) == 2, "31 s after the latest moment it may have landed: the window is over"


def test_a_late_resolution_counts_from_the_servers_own_deadline_at_the_latest() -> None:
    """Seen gone only 200 s after sending (a stalled cache): the server gave up on it after 60 s, so the
    window runs from there."""
    run = window_rig(["unknown", "evicted"], window=300.0)
    key = run.cycle().evictions[0].pod
    run.cluster.remove_pod(key)
    run.cycle(after=200.0)
    migration = next(m for m in run.runner.state.migrations if m.pod == key)
    assert not migration.unresolved
    assert migration.started == NOW + 1.0 + SETTLE


# --- the ping-pong guard matches a replacement from the send time, whenever the outcome became known -----

GUARD_CONFIG = {"pingPongGuard": {"baseCooldown": "10m", "maxCooldown": "1h"}}

# (case, the answer, seconds the answer takes, seconds later the cache shows the pod gone,
#  when the windows count the eviction from: seconds after sending)
LATE_OUTCOME_CASES = [
    ("an eviction answered 10 s late", "evicted", 10.0, 30.0, 10.0),
    ("an unknown outcome, the pod seen gone 90 s later", "unknown", 0.0, 90.0, SETTLE),
]


@pytest.mark.parametrize(
    ("case", "answer", "delay", "seen_gone", "counted_from"),
    LATE_OUTCOME_CASES,
    ids=[c[0] for c in LATE_OUTCOME_CASES],
)
def test_a_replacement_created_right_after_the_request_is_matched_however_late_the_outcome_is_known(
    case: str, answer: str, delay: float, seen_gone: float, counted_from: float
) -> None:
    """The replacement is created 2 s after the request was sent: the guard must see it as the
    replacement although the windows count the eviction from later (the worst case)."""
    world = hot_world()
    clock = [NOW]

    def advance() -> None:  # each answer comes ``delay`` seconds after its request
        clock[0] += delay

    run = rig([answer], world=world, clock=clock, on_call=advance, args=GUARD_CONFIG)
    sent = NOW + 1
    key = run.cycle().evictions[0].pod
    world.remove_pod(key.split("/")[1])
    world.pod("web-new", on="cool", owner="web", created=sent + 2)
    run.cluster.value = world.snapshot()
    run.clock[0] = sent + seen_gone - 1
    run.cycle()
    (migration,) = [m for m in run.runner.state.migrations if m.pod == key]
    assert not migration.unresolved
    assert migration.started == sent + counted_from, "windows and limits keep the worst case"
    assert (migration.replacement, migration.landed) == ("default/web-new", "cool")
