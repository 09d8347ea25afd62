"""The ping-pong guard: a workload whose replacements keep landing on hot nodes is backed off."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from descheduler.cluster.types import Pod
from descheduler.config.load import ConfigError, EffectiveConfig
from descheduler.planner import Migration, Plan, PlannerState, commit
from descheduler.planner import journal as records
from descheduler.planner.pingpong import backoffs, mark_bounces, match_replacements
from descheduler.planner.settings import ping_pong_settings
from tests.unit.builders import NOW, World, cpu, settings, skip_codes

BASE = 600.0
CAP = 3600.0


def bounce(at: float, node: str = "hot", workload: str = "uid-web", pod: str = "") -> Migration:
    """A migration of ``workload`` whose replacement landed on ``node``, seen hot at ``at``."""
    name = pod or f"default/web-{at:g}"
    return Migration(
        pod=name,
        uid=f"uid-{name}",
        namespace="default",
        node="hot",
        workload=workload,
        started=at - 5,
        workload_kind="Deployment",
        workload_name="web",
        replacement=f"{name}-new",
        landed=node,
        bounced=at,
    )


# (case, bounce times and nodes, now, expected (level, active, until - started) or None: forgiven)
BACKOFF_CASES = [
    ("one bounce: no back-off yet", [(0, "hot")], 10, (0, False, 0.0)),
    ("two bounces: back-off for the base", [(0, "hot"), (30, "hot")], 40, (1, True, BASE)),
    ("the back-off expires", [(0, "hot"), (30, "hot")], 30 + BASE + 1, (1, False, BASE)),
    (
        "a bounce during the back-off counts for nothing",
        [(0, "hot"), (30, "hot"), (60, "hot")],
        70,
        (1, True, BASE),
    ),
    (
        "one bounce after it expired: twice as long",
        [(0, "hot"), (30, "hot"), (30 + BASE + 10, "hot")],
        30 + BASE + 20,
        (2, True, 2 * BASE),
    ),
    (
        "and twice again",
        [(0, "a"), (30, "a"), (700, "a"), (2000, "a")],
        2010,
        (3, True, 4 * BASE),
    ),
    (
        "capped",
        [(0, "a"), (30, "a"), (700, "a"), (2000, "a"), (4500, "a")],
        4510,
        (4, True, CAP),
    ),
    (
        "no bounce for the cap after a back-off: forgiven",
        [(0, "hot"), (30, "hot")],
        30 + BASE + CAP + 1,
        None,
    ),
    (
        "forgiven, then one bounce: no back-off",
        [(0, "hot"), (30, "hot"), (30 + BASE + CAP + 10, "hot")],
        30 + BASE + CAP + 20,
        (0, False, 0.0),
    ),
]


@pytest.mark.parametrize(
    ("case", "bounces", "now", "expected"), BACKOFF_CASES, ids=[c[0] for c in BACKOFF_CASES]
)
def test_backoff_rules(
    case: str, bounces: list[tuple[float, str]], now: float, expected: tuple[int, bool, float] | None
) -> None:
    found = backoffs([bounce(NOW + t, node) for t, node in bounces], NOW + now, BASE, CAP)
    if expected is None:
        assert found == {}
        return
    got = found["uid-web"]
    assert (got.level, got.active(NOW + now), got.cooldown) == expected


def test_destination_that_keeps_attracting_is_named() -> None:
    found = backoffs(
        [bounce(NOW, "cool-3"), bounce(NOW + 30, "cool-3"), bounce(NOW + 40, "hot")], NOW + 50, BASE, CAP
    )
    web = found["uid-web"]
    assert web.attractor == "cool-3"
    assert "cool-3 keeps attracting them" in web.message()
    assert "hotspotTaint" in web.message()
    alone = backoffs([bounce(NOW, "a"), bounce(NOW + 30, "b")], NOW + 50, BASE, CAP)["uid-web"]
    assert alone.attractor == ""


def pod(name: str, node: str, created: float, *, terminating: bool = False) -> Pod:
    return Pod(
        namespace="default",
        name=name,
        uid=f"uid-{name}",
        node_name=node,
        created=created,
        terminating=terminating,
    )


def migration(name: str, started: float) -> Migration:
    return Migration(
        pod=f"default/{name}",
        uid=f"uid-{name}",
        namespace="default",
        node="hot",
        workload="w",
        started=started,
    )


MATCH_CASES = [
    ("the pod created after the eviction", [pod("new", "cool", NOW + 2)], {"default/old": "cool"}),
    ("creationTimestamp in whole seconds", [pod("new", "cool", NOW - 1)], {"default/old": "cool"}),
    ("an older pod is not a replacement", [pod("other", "cool", NOW - 60)], {"default/old": ""}),
    ("an unbound pod has not landed", [pod("new", "", NOW + 2)], {"default/old": ""}),
    ("a terminating pod is not one", [pod("new", "cool", NOW + 2, terminating=True)], {"default/old": ""}),
    (
        "two evictions, two replacements: earliest to earliest",
        [pod("b", "cool-2", NOW + 40), pod("a", "hot", NOW + 3)],
        {"default/old": "hot", "default/old-2": "cool-2"},
    ),
]


@pytest.mark.parametrize(("case", "pods", "expected"), MATCH_CASES, ids=[c[0] for c in MATCH_CASES])
def test_match_replacements(case: str, pods: list[Pod], expected: dict[str, str]) -> None:
    migrations = [migration("old", NOW + 0.5)]
    if len(expected) > 1:
        migrations.append(migration("old-2", NOW + 30))
    matched = match_replacements(migrations, {"w": pods}, NOW + 60)
    assert {m.pod: m.landed for m in matched} == expected


def test_a_matched_replacement_is_kept_and_bounces_once() -> None:
    first = match_replacements([migration("old", NOW)], {"w": [pod("new", "hot", NOW + 1)]}, NOW + 30)
    again = match_replacements(
        first, {"w": [pod("new", "hot", NOW + 1), pod("newer", "cool", NOW + 2)]}, NOW + 60
    )
    assert (again[0].replacement, again[0].landed_at) == ("default/new", NOW + 30)
    marked = mark_bounces(again, {"hot"}, NOW + 60, within=600, runs=lambda key, node: True)
    assert marked[0].bounced == NOW + 60
    assert mark_bounces(marked, {"hot"}, NOW + 120, within=600, runs=lambda key, node: True)[0].bounced == (
        NOW + 60
    )


# --- through plan: the replacements of the pods moved off "hot" land back ------------------------------

GUARD = {"pingPongGuard": {"baseCooldown": "10m", "maxCooldown": "1h"}}
METRICS_SERVER = {"metricsProviders": [{"source": "KubernetesMetrics"}]}
"""Samples without a window: each node's sample below is simply what runs there now."""


def guarded(**guard: object) -> EffectiveConfig:
    return settings(args={"pingPongGuard": guard or GUARD["pingPongGuard"]}, top=METRICS_SERVER)


def world_after(landed: tuple[str, str]) -> World:
    """``web-3`` and ``web-4`` (the newest) were evicted from ``hot`` at NOW; their replacements landed on
    ``landed`` and run there (each uses 2 cpu), and the node samples say so."""
    world = World()
    world.deployment("web", replicas=6)
    load = {"hot": 4.0, "cool": 1.0, "cool-2": 1.0}
    for i in (1, 2):
        world.pod(f"web-{i}", on="hot", owner="web", usage=cpu("2"))
    for i, node in enumerate(landed, start=1):
        world.pod(f"web-r{i}", on=node, owner="web", usage=cpu("2"), created=NOW + 2 + i)
        load[node] += 2
    for node, used in load.items():
        world.node(node, cpu="10", usage=cpu(f"{used:g}"))
    return world


def first_cycle() -> tuple[Plan, PlannerState]:
    world = World()
    world.node("hot", cpu="10", usage=cpu("8")).node("cool", cpu="10", usage=cpu("1"))
    world.node("cool-2", cpu="10", usage=cpu("1"))
    world.deployment("web", replicas=6)
    for i in range(1, 5):
        world.pod(f"web-{i}", on="hot", owner="web", usage=cpu("2"))
    config = guarded()
    first = world.plan(config)
    assert sorted(e.pod.name for e in first.evictions) == ["web-3", "web-4"]
    return first, commit(first.state, first.evictions, NOW)


@pytest.mark.parametrize(
    ("case", "landed", "backed_off"),
    [
        ("both elsewhere: nothing", ("cool", "cool-2"), False),
        ("once on a hot node: no back-off yet", ("hot", "cool"), False),
        ("twice: back-off", ("hot", "hot"), True),
    ],
)
def test_plan_backs_off_a_workload_whose_replacements_land_hot(
    case: str, landed: tuple[str, str], backed_off: bool
) -> None:
    _, state = first_cycle()
    world = world_after(landed)
    later = world.plan(guarded(), state, NOW + 60)
    bounced = [m for m in later.state.migrations if m.bounced]
    assert len(bounced) == landed.count("hot")
    assert bool(later.backoffs) is backed_off
    codes = skip_codes(later)
    if backed_off:
        assert codes["default/web-1"] == "ping-pong-backoff"
        assert later.new_backoffs() == later.backoffs
        (backoff,) = later.backoffs
        assert backoff.until == NOW + 60 + BASE
        assert backoff.attractor == "hot"
    else:
        assert "ping-pong-backoff" not in codes.values()


def test_guard_off_changes_nothing() -> None:
    _, state = first_cycle()
    off = guarded(enabled=False)
    later = world_after(("hot", "hot")).plan(off, state, NOW + 60)
    assert later.backoffs == ()
    assert not any(m.bounced or m.landed for m in later.state.migrations)


def test_back_off_survives_a_restart_through_the_journal() -> None:
    _, state = first_cycle()
    world = world_after(("hot", "hot"))
    config = guarded()
    before = world.plan(config, state, NOW + 60)
    kept = records.project(before.state.migrations, {}, before.state.departures)
    text = records.encode(kept, writer="a")
    rebuilt = records.rebuild(records.decode(text, "test")).state
    # Long after the objectLimiters window: the evicted pods' records are kept for the guard alone.
    after = world.plan(config, rebuilt, NOW + 400)
    assert [b.until for b in after.backoffs] == [NOW + 60 + BASE]
    assert after.new_backoffs() == ()  # announced once, not again after the restart
    assert skip_codes(after)["default/web-1"] == "ping-pong-backoff"
    expired = world.plan(config, rebuilt, NOW + 60 + BASE + 1)
    assert expired.backoffs == ()
    assert "ping-pong-backoff" not in skip_codes(expired).values()


def test_a_journal_without_the_guard_fields_loads() -> None:
    old = (
        '{"version":1,"writer":"a","records":[\n'
        '{"pod":"default/web-1","uid":"u1","node":"hot","workload":{"kind":"Deployment","name":"web",'
        '"identity":"w"},"at":1767268800.0,"status":"evicted"}\n]}\n'
    )
    (entry,) = records.decode(old, "test")
    assert (entry.replacement, entry.landed, entry.bounced) == ("", "", 0.0)
    (m,) = records.rebuild([entry]).state.migrations
    assert (m.landed, m.bounced) == ("", 0.0)


def test_journal_keeps_the_guard_fields() -> None:
    m = replace(bounce(NOW), pod="default/web-1", landed_at=NOW - 2, sent=NOW - 65.25)
    (entry,) = records.project([m], {})
    (back,) = records.decode(records.encode([entry], writer="a"), "test")
    assert (back.replacement, back.landed, back.bounced) == (m.replacement, "hot", NOW)
    (rebuilt,) = records.rebuild([back]).state.migrations
    assert (rebuilt.landed_at, rebuilt.sent) == (NOW - 2, NOW - 65.25)
    # A send less than a second before the start is not stored: the creation slack covers it, and a pod
    # created right after the send (its creationTimestamp in whole seconds) is still matched.
    quick = replace(m, sent=m.started - 0.25, replacement="", landed="")
    text = records.encode(records.project([quick], {}), writer="a")
    assert "sentBefore" not in text
    (again,) = records.rebuild(records.decode(text, "test")).state.migrations
    right_after = pod("new", "cool", math.floor(quick.sent + 0.01))
    (matched,) = match_replacements([again], {"uid-web": [right_after]}, NOW)
    assert matched.replacement == "default/new"
    with pytest.raises(records.JournalUnreadable, match="bounced"):
        records.decode(records.encode([entry], writer="a").replace(f"{NOW:.1f}", '"soon"'), "test")


@pytest.mark.parametrize(
    ("guard", "message"),
    [
        ({"baseCooldown": "2h", "maxCooldown": "1h"}, "longer than maxCooldown"),
        ({"baseCooldown": "0s"}, "positive"),
        ({"maxCooldown": "-5s"}, "maxCooldown"),
    ],
)
def test_guard_settings_are_checked(guard: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        settings(args={"pingPongGuard": guard})


def test_a_node_that_becomes_hot_later_counts_as_a_bounce_then() -> None:
    _, state = first_cycle()
    world = world_after(("cool", "cool-2"))
    config = guarded()
    calm = world.plan(config, state, NOW + 60)
    assert [m.landed for m in calm.state.migrations if m.landed] == ["cool-2", "cool"]
    assert not any(m.bounced for m in calm.state.migrations)
    world.set_node_usage("cool-2", cpu("6"))  # the replacement grew, or others joined it
    later = world.plan(config, calm.state, NOW + 90)
    assert {m.landed: m.bounced for m in later.state.migrations} == {"cool-2": NOW + 90, "cool": 0.0}


# --- a bounce is evidence only shortly after the landing, and while the replacement is still there -------

DAY_BUDGET = {"churnBudget": {"maxEvictions": 100, "period": "24h"}}
"""A churn budget keeps the migrations (and so the guard's evidence) for its whole 24 h period."""


def day_guarded() -> EffectiveConfig:
    return settings(args=GUARD, migration=DAY_BUDGET, top=METRICS_SERVER)


WITHIN = 3 * 60.0
"""The bounce window of ``day_guarded``: metrics-server samples have no window, plus 3 x the 60 s interval."""

# (case, seconds after the landing that both destinations are over, replacements deleted by then,
#  destinations whose migration bounces, backed off)
LATE_CASES = [
    ("over right after the landing: two bounces", 30.0, (), ("cool", "cool-2"), True),
    ("over at the end of the bounce window", WITHIN, (), ("cool", "cool-2"), True),
    ("over just past the bounce window: hot for other reasons", WITHIN + 1, (), (), False),
    ("over 20 hours later: hot for other reasons", 20 * 3600.0, (), (), False),
    ("over soon after, the replacements deleted", 30.0, ("web-r1", "web-r2"), (), False),
    ("over soon after, one replacement deleted", 30.0, ("web-r1",), ("cool-2",), False),
]


@pytest.mark.parametrize(
    ("case", "after", "deleted", "bounced", "backed_off"), LATE_CASES, ids=[c[0] for c in LATE_CASES]
)
def test_a_bounce_counts_only_soon_after_the_landing_and_while_the_replacement_runs_there(
    case: str, after: float, deleted: tuple[str, ...], bounced: tuple[str, ...], backed_off: bool
) -> None:
    config = day_guarded()
    _, state = first_cycle()
    world = world_after(("cool", "cool-2"))
    landed = NOW + 60
    calm = world.plan(config, state, landed)
    assert sorted(m.landed for m in calm.state.migrations) == ["cool", "cool-2"]
    for name in deleted:
        world.remove_pod(name)
    world.set_node_usage("cool", cpu("6")).set_node_usage("cool-2", cpu("6"))
    later = world.plan(config, calm.state, landed + after)
    assert {"cool", "cool-2"} <= {r.node for r in later.node_reports if r.node_class in ("over", "hotspot")}
    assert len(later.state.migrations) == 2, "the churn budget keeps both records all day"
    assert sorted(m.landed for m in later.state.migrations if m.bounced) == sorted(bounced)
    assert bool(later.backoffs) is backed_off


@pytest.mark.parametrize(
    ("top", "within"),
    [
        (METRICS_SERVER, WITHIN),
        ({"deschedulingInterval": "2m"}, 5 * 60 + 3 * 120.0),
    ],
    ids=["metrics-server, 60s interval", "Prometheus 5m window, 2m interval"],
)
def test_the_bounce_window_is_the_usage_window_plus_three_intervals(
    top: dict[str, object], within: float
) -> None:
    guard = ping_pong_settings(settings(args=GUARD, top=top))
    assert guard is not None
    assert guard.within == within
