"""Eviction windows and the churn budget: pure rules with the clock as an input.

Windows are judged by ``window_state(windows, now)``; the budget is a limit of ``plan`` (skip code
``budget-spent``) counted over the state's migrations, and ``budget_state`` says what is left. Times are
written as local wall-clock strings of the window's zone so each row reads as the operator wrote it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from descheduler.config.load import load_config_document
from descheduler.planner import Migration, PlannerState, commit, reasons
from descheduler.planner.controls import Budget, budget_state, compile_windows, window_state
from tests.unit.builders import NOW, World, cpu, evicted, settings, skip_codes
from tests.unit.test_config import config_with

BERLIN = "Europe/Berlin"


def at(local: str, zone: str = BERLIN) -> float:
    """``2026-03-29 03:30`` in ``zone`` (its first occurrence in a repeated hour), or ``... UTC``, as
    seconds since the epoch."""
    if local.endswith(" UTC"):
        return datetime.fromisoformat(local.removesuffix(" UTC")).replace(tzinfo=UTC).timestamp()
    return datetime.fromisoformat(local).replace(tzinfo=ZoneInfo(zone)).timestamp()


def local(seconds: float | None, zone: str = BERLIN) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M %Z")


def windows(*entries: dict[str, Any]) -> Any:
    """The compiled windows of a configuration holding ``entries`` (validated by the real loader)."""
    return compile_windows(load_config_document(config_with(mc={"evictionWindows": list(entries)})).migration)


NIGHTS = {"days": ["Mon", "Tue", "Wed", "Thu", "Fri"], "start": "22:00", "end": "06:00", "timeZone": BERLIN}
"""Weeknights, crossing midnight: Friday's window ends on Saturday morning, none opens on the weekend."""


@pytest.mark.parametrize(
    ("now", "is_open", "next_open", "closes"),
    [
        # 2026-06-09 is a Tuesday.
        ("2026-06-09 12:00", False, "2026-06-09 22:00 CEST", None),
        ("2026-06-09 21:59", False, "2026-06-09 22:00 CEST", None),
        ("2026-06-09 22:00", True, "2026-06-10 22:00 CEST", "2026-06-10 06:00 CEST"),  # opening included
        ("2026-06-10 05:59", True, "2026-06-10 22:00 CEST", "2026-06-10 06:00 CEST"),
        ("2026-06-10 06:00", False, "2026-06-10 22:00 CEST", None),  # closing excluded
        ("2026-06-13 03:00", True, "2026-06-15 22:00 CEST", "2026-06-13 06:00 CEST"),  # Friday's, on Saturday
        ("2026-06-13 12:00", False, "2026-06-15 22:00 CEST", None),
        ("2026-06-15 05:00", False, "2026-06-15 22:00 CEST", None),  # Sunday opened none
    ],
)
def test_a_weekly_window_across_midnight_is_open_from_its_start_to_its_end_the_next_day(
    now: str, is_open: bool, next_open: str, closes: str | None
) -> None:
    state = window_state(windows(NIGHTS), at(now))
    assert (state.open, local(state.next_open), local(state.closes)) == (is_open, next_open, closes)


def test_without_windows_evictions_may_happen_at_any_time() -> None:
    state = window_state((), NOW)
    assert (state.open, state.configured, state.next_open, state.message()) == (True, False, None, "")


@pytest.mark.parametrize(
    ("window", "opens_local", "opens_utc", "closes_utc"),
    [
        # Spring: on 2026-03-29 Berlin's clocks go from 02:00 CET to 03:00 CEST.
        ({"days": ["Sun"], "start": "01:00", "end": "05:00"}, "2026-03-29 01:00", "00:00", "03:00"),  # 3 h
        ({"days": ["Sat"], "start": "22:00", "end": "06:00"}, "2026-03-28 22:00", "21:00", "04:00"),  # 7 h
        # A start in the skipped hour opens at the jump, 03:00 on the new clock.
        ({"days": ["Sun"], "start": "02:30", "end": "04:00"}, "2026-03-29 03:00", "01:00", "02:00"),
        # Autumn: on 2026-10-25 Berlin's clocks go from 03:00 CEST back to 02:00 CET.
        ({"days": ["Sun"], "start": "01:00", "end": "05:00"}, "2026-10-25 01:00", "23:00", "04:00"),  # 5 h
        ({"days": ["Sat"], "start": "22:00", "end": "06:00"}, "2026-10-24 22:00", "20:00", "05:00"),  # 9 h
        # A start in the repeated hour is its second occurrence (CET): the window is not open longer.
        ({"days": ["Sun"], "start": "02:30", "end": "04:00"}, "2026-10-25 01:30 UTC", "01:30", "03:00"),
    ],
)
def test_a_window_across_a_dst_change_lasts_what_the_wall_clock_says(
    window: dict[str, Any], opens_local: str, opens_utc: str, closes_utc: str
) -> None:
    compiled = windows({**window, "timeZone": BERLIN})
    opens = at(opens_local)
    before = window_state(compiled, opens - 1)
    during = window_state(compiled, opens)
    utc = {k: datetime.fromtimestamp(v, UTC).strftime("%H:%M") for k, v in (("o", opens),)}
    assert utc["o"] == opens_utc
    assert (before.open, before.next_open) == (False, opens)
    assert during.open and during.closes is not None
    assert datetime.fromtimestamp(during.closes, UTC).strftime("%H:%M") == closes_utc
    assert not window_state(compiled, during.closes).open


# Berlin's clock jumps from 02:00 CET to 03:00 CEST at 01:00 UTC on 2026-03-29 (02:00-02:59 never read)
# and falls back from 03:00 CEST to 02:00 CET at 01:00 UTC on 2026-10-25 (02:00-02:59 read twice).
@pytest.mark.parametrize(
    ("case", "window", "utc", "is_open"),
    [
        ("an end in the gap closes at the jump", "Sat 22:00-02:30", "2026-03-29 00:59", True),
        ("an end in the gap closes at the jump", "Sat 22:00-02:30", "2026-03-29 01:00", False),
        ("an end in the gap is not read as 03:30 CEST", "Sat 22:00-02:30", "2026-03-29 01:29", False),
        ("a start in the gap opens at the jump", "Sun 02:30-04:00", "2026-03-29 00:59", False),
        ("a start in the gap opens at the jump", "Sun 02:30-04:00", "2026-03-29 01:00", True),
        ("a start in the gap opens at the jump", "Sun 02:30-04:00", "2026-03-29 01:59", True),
        ("a start in the gap opens at the jump", "Sun 02:30-04:00", "2026-03-29 02:00", False),
        ("a window inside the gap never opens", "Sun 02:00-02:45", "2026-03-29 01:00", False),
        ("a window inside the gap never opens", "Sun 02:00-02:45", "2026-03-29 01:30", False),
        ("an end in the repeated hour closes at its first", "Sat 22:00-02:30", "2026-10-25 00:29", True),
        ("an end in the repeated hour closes at its first", "Sat 22:00-02:30", "2026-10-25 00:30", False),
        ("an end in the repeated hour closes at its first", "Sat 22:00-02:30", "2026-10-25 01:15", False),
        ("a start in the repeated hour opens at its second", "Sun 02:30-04:00", "2026-10-25 00:45", False),
        ("a start in the repeated hour opens at its second", "Sun 02:30-04:00", "2026-10-25 01:29", False),
        ("a start in the repeated hour opens at its second", "Sun 02:30-04:00", "2026-10-25 01:30", True),
        ("a start in the repeated hour opens at its second", "Sun 02:30-04:00", "2026-10-25 02:59", True),
        ("a start in the repeated hour opens at its second", "Sun 02:30-04:00", "2026-10-25 03:00", False),
        ("a window inside the repeated hour opens once", "Sun 02:10-02:40", "2026-10-25 00:10", True),
        ("a window inside the repeated hour opens once", "Sun 02:10-02:40", "2026-10-25 00:40", False),
        ("a window inside the repeated hour opens once", "Sun 02:10-02:40", "2026-10-25 01:10", False),
    ],
)
def test_a_window_is_never_open_longer_than_its_wall_clock_times_across_a_dst_change(
    case: str, window: str, utc: str, is_open: bool
) -> None:
    day, times = window.split()
    start, end = times.split("-")
    compiled = windows({"days": [day], "start": start, "end": end, "timeZone": BERLIN})
    assert window_state(compiled, at(utc + " UTC")).open is is_open, case


def test_windows_in_different_zones_each_open_on_their_own_clock() -> None:
    compiled = windows(
        {"days": ["Mon"], "start": "09:00", "end": "10:00", "timeZone": "America/New_York"},
        {"days": ["Mon"], "start": "09:00", "end": "10:00", "timeZone": "Asia/Tokyo"},
    )
    # 2026-06-08 is a Monday: 09:00 in Tokyo is 00:00 UTC, 09:00 in New York (EDT) is 13:00 UTC.
    monday = datetime(2026, 6, 8, tzinfo=UTC).timestamp()
    assert [window_state(compiled, monday + h * 3600).open for h in (0, 1, 12, 13, 14)] == [
        True,
        False,
        False,
        True,
        False,
    ]


def test_the_closed_message_names_the_window_and_when_it_opens() -> None:
    state = window_state(windows(NIGHTS), at("2026-06-09 12:00"))
    assert state.message() == (
        "outside evictionWindows: the next window (Mon,Tue,Wed,Thu,Fri 22:00-06:00 Europe/Berlin) opens at "
        "2026-06-09T20:00:00Z"
    )


# --- the churn budget in the plan -------------------------------------------------------------------------

NO_WORKLOAD_LIMITS: dict[str, Any] = {
    "objectLimiters": {},
    "maxMigratingPerWorkload": 0,
    "maxUnavailablePerWorkload": 0,
}


def crowded(namespaces: tuple[str, ...] = ("default",), pods: int = 8) -> World:
    """A 100-core node at 90% (high 50%) full of 5-core pods, and an idle node: 8 evictions cure it."""
    world = World().node("hot", cpu="100", usage=cpu("90")).node("cool", cpu="100", usage=cpu("0"))
    for ns in namespaces:
        world.deployment("web", replicas=20, namespace=ns)
    for i in range(pods):
        world.pod(
            f"web-{i}", on="hot", owner="web", namespace=namespaces[i % len(namespaces)], usage=cpu("5")
        )
    return world


def earlier(*ages: float, namespace: str = "default", unresolved: bool = False) -> tuple[Migration, ...]:
    """Migrations ``ages`` seconds before NOW of pods long gone (any kind of migration counts)."""
    return tuple(
        Migration(f"{namespace}/old-{i}", f"uid-{namespace}-{i}", namespace, "elsewhere", "", NOW - age,
                  unresolved=unresolved)
        for i, age in enumerate(ages)
    )  # fmt: skip


def utc_iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def budget(**fields: Any) -> dict[str, Any]:
    return {**NO_WORKLOAD_LIMITS, "churnBudget": {"period": "1h", **fields}}


@pytest.mark.parametrize(
    ("limits", "recorded", "expected"),
    [
        ({"maxEvictions": 3}, (), 3),
        ({"maxEvictions": 0}, (), 0),
        ({"maxEvictions": 3}, earlier(100, 200), 1),
        ({"maxEvictions": 3}, earlier(100, 200, 300), 0),
        ({"maxEvictions": 3}, earlier(3599, 3600, 7200), 2),  # one inside the hour, two just out of it
        ({"maxEvictions": 3}, earlier(7200, unresolved=True), 2),  # unknown outcome: counted as now
        ({"maxEvictions": 20}, (), 8),  # the node is cured first
        ({"maxEvictionsPerNamespace": 2}, earlier(10, namespace="other"), 2),
        ({"maxEvictionsPerNamespace": 2}, earlier(10), 1),
        ({"maxEvictions": 5, "maxEvictionsPerNamespace": 2}, earlier(10, 20, 30, namespace="other"), 2),
    ],
)
def test_the_budget_caps_evictions_over_the_rolling_period(
    limits: dict[str, Any], recorded: tuple[Migration, ...], expected: int
) -> None:
    result = crowded().plan(settings(migration=budget(**limits)), PlannerState(migrations=recorded))
    assert len(result.evictions) == expected
    if expected < 8:
        assert reasons.BUDGET_SPENT in skip_codes(result).values()


def test_a_per_namespace_budget_lets_every_namespace_spend_its_own() -> None:
    result = crowded(("a", "b")).plan(settings(migration=budget(maxEvictionsPerNamespace=2)))
    namespaces = [key.split("/")[0] for key in evicted(result)]
    assert (namespaces.count("a"), namespaces.count("b")) == (2, 2)
    assert set(skip_codes(result).values()) == {reasons.BUDGET_SPENT}


@pytest.mark.parametrize(
    ("limits", "recorded", "message"),
    [
        (
            {"maxEvictions": 2},
            earlier(3000, 1000),
            "2 eviction(s) in the last 1h0m0s cluster-wide, churnBudget.maxEvictions is 2; budget returns at "
            + utc_iso(NOW + 600),
        ),
        (
            {"maxEvictionsPerNamespace": 1},
            earlier(1800),
            "1 eviction(s) in namespace default in the last 1h0m0s, "
            "churnBudget.maxEvictionsPerNamespace is 1; budget returns at " + utc_iso(NOW + 1800),
        ),
        ({"maxEvictions": 0}, (), "budget returns never (the limit is 0)"),
    ],
)
def test_a_spent_budget_says_when_it_returns(
    limits: dict[str, Any], recorded: tuple[Migration, ...], message: str
) -> None:
    result = crowded().plan(settings(migration=budget(**limits)), PlannerState(migrations=recorded))
    skips = [s for s in result.pod_skips if s.code == reasons.BUDGET_SPENT]
    assert skips and message in skips[0].message


def test_the_budget_holds_across_cycles_and_returns_as_evictions_age_out() -> None:
    """Cycle after cycle on a node kept hot, 3 evictions per 10 minutes: the state carries the spending."""
    world = crowded(pods=20)
    config = settings(migration=budget(maxEvictions=3, period="10m"))
    state, per_cycle = PlannerState(), []
    for minute in range(0, 25, 1):
        now = NOW + minute * 60
        result = world.plan(config, state, now)
        state = commit(result.state, result.evictions, now)
        per_cycle.append(len(result.evictions))
        for pod in evicted(result):  # gone; the node stays as hot (its load is replaced)
            world.remove_pod(pod.split("/")[1])
    assert per_cycle[0] == 3 and per_cycle[10] == 3 and per_cycle[20] == 3
    assert sum(per_cycle) == 9
    assert sum(per_cycle[:10]) == 3


def test_migrations_are_kept_as_long_as_the_budget_period_so_a_restart_still_counts_them() -> None:
    """Past the object limiter's window a migration would be dropped (and leave the journal): not while
    it is inside the budget's period."""
    recorded = earlier(600, 5000)
    config = settings(migration={"objectLimiters": {"workload": {"duration": "5m"}}, "churnBudget": {
        "maxEvictions": 10, "period": "1h"}})  # fmt: skip
    kept = World().node("n", cpu="10", usage=cpu("1")).plan(config, PlannerState(migrations=recorded)).state
    assert [m.pod for m in kept.migrations] == ["default/old-0"]


@pytest.mark.parametrize(
    ("limits", "recorded", "left", "returns", "namespaces"),
    [
        (Budget(3600, 3, None), earlier(100), 2, None, {}),
        (Budget(3600, 1, None), earlier(100), 0, NOW + 3500, {}),
        (Budget(3600, None, 2), earlier(100, 200) + earlier(50, namespace="b"), None, None,
         {"default": (0, NOW + 3400), "b": (1, None)}),
        (Budget(3600, 5, None), earlier(4000), 5, None, {}),
    ],
)  # fmt: skip
def test_budget_state_reports_what_is_left_and_when_it_returns(
    limits: Budget,
    recorded: tuple[Migration, ...],
    left: int | None,
    returns: float | None,
    namespaces: dict[str, tuple[int, float | None]],
) -> None:
    state = budget_state(limits, recorded, NOW)
    assert (state.left, state.returns, dict(state.namespaces)) == (left, returns, namespaces)
