"""A cure in rounds (``planner/cure.py``) played over hand-worked cycle sequences, 60 s apart.

Node ``hot`` (10 cpu, high 50%) reads 9 cpu: four pods of 2 cpu and 1 cpu of its own, so two pods must
leave (the estimate then says 5: not over). ``maxMigratingPerNode`` 1 (unless the case says otherwise),
``consecutiveAbnormalities`` 3, timeout 10m, so before the fix the second round waited three fresh over
cycles. Every planned eviction is committed as done; the evicted pods stay listed (terminating) until an
event before a cycle says otherwise. ``readings`` is the node's sample each cycle: ``O`` 9 cpu (still
holding the evicted pods: within the 5-minute metrics window after a
round it predates it), ``N`` 4 cpu. ``events``, one a cycle, before its plan:

- ``-`` nothing; ``g`` the evicted pods are gone (no replacement); ``r`` gone, replacements bound on
  ``cool`` and Ready; ``u`` gone, replacements bound but not Ready; ``R`` those replacements turn Ready.

``evictions`` is the number of evictions planned each cycle, worked out by hand from the rules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from descheduler.planner import Plan, PlannerState, commit, evicted_from, journal
from descheduler.service.cures import Cure, CureTracker
from descheduler.service.records import CycleRecord, EvictionRecord
from tests.unit.builders import NOW, World, cpu, evicted, report, settings

READING = {"O": "9", "N": "4"}


@dataclass(frozen=True)
class Case:
    name: str
    readings: str
    events: str
    evictions: str
    bare: bool = False
    per_node: int = 1


CASES = [
    Case(
        "the next round goes as soon as the previous round's replacements are ready",
        "OOOOOOOO",
        "---r----",
        "00110000",
    ),
    Case(
        "a bare pod's round is over once the pod is gone",
        "OOOOOOOO",
        "---g----",
        "00110000",
        bare=True,
    ),
    Case(
        "a replacement that is not ready holds the next round until it is",
        "OOOOOOOO",
        "---uR---",
        "00101000",
    ),
    Case(
        "a workload pod gone without a replacement holds the next round until N fresh over cycles",
        "OOOOOOOO",
        "---g----",
        "00100100",
    ),
    Case(
        "pods still leaving hold the next round (maxMigratingPerNode counts them)",
        "OOOOOOOO",
        "--------",
        "00100000",
    ),
    Case(
        "readings that predate the round add no evictions once the estimate is cured",
        "OOOOOO",
        "---r--",
        "002000",
        per_node=0,
    ),
    Case(
        "the first eviction still waits N over cycles: one spike does nothing",
        "ONOOOOOO",
        "--------",
        "00001000",
    ),
]


def world_for(case: Case) -> World:
    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1"))
    world.node("cool-2", usage=cpu("1")).node("cool-3", usage=cpu("1"))
    world.deployment("web", replicas=4)
    for i in range(4):
        world.pod(f"web-{i}", on="hot", owner=None if case.bare else "web", usage=cpu("2"))
    return world


def apply(world: World, event: str, leaving: list[str], now: float) -> None:
    """One event before a cycle: the pods of earlier rounds leave, their replacements arrive."""
    if event in "gru":
        for name in leaving:
            world.remove_pod(name)
            if event != "g":
                world.pod(
                    f"{name}-new",
                    on="cool",
                    owner="web",
                    usage=cpu("2"),
                    created=now - 30,
                    ready=event == "r",
                )
        leaving.clear()
    if event == "R":
        for obj in world.objects:
            if obj["kind"] == "Pod" and obj["metadata"]["name"].endswith("-new"):
                obj["status"]["conditions"] = [{"type": "Ready", "status": "True"}]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_cure_in_rounds_over_a_sequence_of_cycles(case: Case) -> None:
    config = settings(
        args={"anomalyCondition": {"consecutiveAbnormalities": 3, "timeout": "10m"}},
        migration={"maxMigratingPerNode": case.per_node, "evictAllBarePods": case.bare},
    )
    world, state, leaving, counts = world_for(case), PlannerState(), [], []
    for i, (reading, event) in enumerate(zip(case.readings, case.events, strict=True)):
        now = NOW + 60 * i
        apply(world, event, leaving, now)
        world.node_usage["hot"] = cpu(READING[reading])
        result = world.plan(config, state, now)
        state = commit(result.state, evicted_from(result, evicted(result)), now)
        leaving += [key.split("/")[1] for key in evicted(result)]
        counts.append(str(len(result.evictions)))
    assert "".join(counts) == case.evictions


def test_a_hotspot_waiting_for_its_previous_round_says_so() -> None:
    case = CASES[2]
    config = settings(
        args={"anomalyCondition": {"consecutiveAbnormalities": 3, "timeout": "10m"}},
        migration={"maxMigratingPerNode": 1},
    )
    world, state, leaving = world_for(case), PlannerState(), []
    result = None
    for i, event in enumerate("---u"):
        now = NOW + 60 * i
        apply(world, event, leaving, now)
        result = world.plan(config, state, now)
        state = commit(result.state, evicted_from(result, evicted(result)), now)
        leaving += [key.split("/")[1] for key in evicted(result)]
    assert result is not None
    hot = report(result, "hot")
    assert (hot.stop_code, hot.confirmed) == ("cure-in-motion", True)
    assert "not Ready" in hot.stop_message


def test_a_successor_unconfirms_a_node_whose_next_round_the_journal_may_not_hold() -> None:
    """The journal keeps the confirmed state of a cure in motion; a record newer than it (an intent the
    predecessor may have sent before dying) unconfirms the node, so a successor never goes on unconfirmed."""
    config = settings(
        args={"anomalyCondition": {"consecutiveAbnormalities": 3, "timeout": "10m"}},
        migration={"maxMigratingPerNode": 1},
    )
    world, state = world_for(CASES[0]), PlannerState()
    for i in range(3):
        result = world.plan(config, state, NOW + 60 * i)
        state = commit(result.state, evicted_from(result, evicted(result)), NOW + 60 * i)
    kept = journal.detectors_of(state)
    assert kept.nodes["hot"].confirmed == NOW + 120
    assert journal.reset_by_records(kept, [journal.intent(result.evictions[0], NOW + 120)]) == kept
    later = journal.reset_by_records(kept, [journal.intent(result.evictions[0], NOW + 150)])
    assert later.nodes["hot"].confirmed is None


# --- production settings: 60 s cycles, consecutiveAbnormalities 5, the 60 s default timeout ---------------
#
# The same node, with the product's confirmation: 5 over cycles, ``anomalyCondition.timeout`` unset (60
# s, one cycle), ``consecutiveNormalities`` 3, the 5-minute usage window. Before the cure kept its
# confirmation while its round was in motion, the timeout lapsed at the next cycle and the second round
# waited 5 fresh over cycles. Readings as above, plus ``M`` (5 cpu: normal even before the estimate
# subtracts anything) and ``W``: what Prometheus reads of a node whose load stays 9 cpu less the pods
# evicted from it, averaged over the 5-minute window, so it holds each evicted pod for 5 minutes.

WINDOW = 300.0

PRODUCTION_CASES = [
    Case(
        "with production settings the second round goes as soon as the first round's replacements are ready",
        "WWWWWWWWWWWW",
        "-----uR-----",
        "000010100000",
    ),
    Case(
        "with production settings slow replacements hold the second round, not the confirmation",
        "WWWWWWWWWWWW",
        "-----u--R---",
        "000010001000",
    ),
    Case(
        "with production settings the second round goes in the cycle after the first one if all is ready",
        "WWWWWWWWWWWW",
        "-----r------",
        "000011000000",
    ),
    Case(
        "with production settings a window still holding evicted pods adds no evictions after the cure",
        "WWWWWWWWWWWW",
        "-----r------",
        "000020000000",
        per_node=0,
    ),
    Case(
        "with production settings one spike does nothing and the first eviction waits five over cycles",
        "ONOOOOOOOOOO",
        "------------",
        "000000100000",
    ),
    Case(
        "with production settings a cure read normal for over three cycles needs five fresh over cycles",
        "OOOOOMMMMOOOOOO",
        "-----r---------",
        "000010000000010",
    ),
]


def reading(letter: str, evictions: list[float], now: float) -> str:
    """The node's sample at ``now`` (cpu), given when each 2-cpu pod was evicted from it."""
    if letter != "W":
        return {**READING, "M": "5"}[letter]
    held = sum(min(WINDOW, now - at) for at in evictions) / WINDOW
    return f"{round((9 - 2 * held) * 1000)}m"


def run_cycles(
    case: Case, config: object, takeover: int = -1, seen: Callable[[Plan, bool], None] | None = None
) -> str:
    """The evictions planned each cycle; at cycle ``takeover`` a successor takes over from the journal
    (records and detectors through their stored form, as ``service`` keeps them). ``seen`` is shown each
    cycle's plan, and whether a successor made it."""
    world, state, leaving, counts, times = world_for(case), PlannerState(), [], [], []
    for i, (letter, event) in enumerate(zip(case.readings, case.events, strict=True)):
        now = NOW + 60 * i
        apply(world, event, leaving, now)
        world.node_usage["hot"] = cpu(reading(letter, times, now))
        if i == takeover:
            state = successor_of(state)
        result = world.plan(config, state, now)  # type: ignore[arg-type]
        if seen is not None:
            seen(result, i == takeover)
        state = commit(result.state, evicted_from(result, evicted(result)), now)
        leaving += [key.split("/")[1] for key in evicted(result)]
        times += [now] * len(result.evictions)
        counts.append(str(len(result.evictions)))
    return "".join(counts)


def successor_of(state: PlannerState) -> PlannerState:
    text = journal.encode(
        journal.project(state.migrations, {}, state.departures),
        writer="predecessor",
        detectors=journal.detectors_of(state),
    )
    entries = journal.decode(text, "journal")
    detectors = journal.reset_by_records(journal.decode_detectors(text, "journal"), entries)
    return journal.rebuild(entries, detectors).state


def production(case: Case) -> object:
    return settings(
        args={"anomalyCondition": {"consecutiveAbnormalities": 5}},
        migration={"maxMigratingPerNode": case.per_node, "evictAllBarePods": case.bare},
    )


@pytest.mark.parametrize("case", PRODUCTION_CASES, ids=[c.name for c in PRODUCTION_CASES])
def test_a_cure_in_rounds_with_production_settings(case: Case) -> None:
    assert run_cycles(case, production(case)) == case.evictions


@pytest.mark.parametrize("takeover", range(4, 9))
def test_a_successor_neither_loses_nor_invents_a_cure_in_motion(takeover: int) -> None:
    """A takeover at any cycle of the cure, first round to second, plans what one process would."""
    case = PRODUCTION_CASES[1]
    assert run_cycles(case, production(case), takeover) == case.evictions


def test_an_old_journal_without_the_cure_mark_keeps_the_timeout() -> None:
    """A detector stored before cures were marked lapses ``timeout`` after its round: never invented."""
    text = (
        '{"version": 1, "records": [], "detectors": {"nodes": '
        f'{{"hot": {{"count": 0, "updated": {NOW}, "confirmed": {NOW}}}}}}}}}'
    )
    stored = journal.decode_detectors(text, "journal").nodes["hot"]
    assert (stored.confirmed, stored.cure, stored.settled) == (NOW, False, 0.0)


def measured_cures(case: Case, takeover: int = -1) -> list[Cure]:
    """The cures ``service/cures.py`` observes over ``case``; at ``takeover`` a new process, with a tracker
    of its own, goes on from the journal."""
    tracker, ended = CureTracker(), []

    def seen(plan: Plan, successor: bool) -> None:
        nonlocal tracker
        tracker = CureTracker() if successor else tracker
        moved = tuple(EvictionRecord.of(e, "evicted", "") for e in plan.evictions)
        record = CycleRecord(
            cycle=0, started=plan.now, duration=1.0, dry_run=False, plan=plan, evictions=moved
        )
        ended.extend(tracker.advance(record))

    assert run_cycles(case, production(case), takeover, seen) == case.evictions
    return ended


LONG_CURE = Case("two rounds, then normal", "W" * 20, "-----uR" + "-" * 13, "00001010000000000000")


@pytest.mark.parametrize("takeover", range(5, 13))
def test_a_successor_measures_a_cure_it_took_over_from_its_first_confirmation(takeover: int) -> None:
    """A restart between confirmation and cure neither shortens the cure nor drops its evictions: the
    successor reads when the cure began and what it evicted from the journal."""
    alone = measured_cures(LONG_CURE)  # confirmed in cycle 4, first read 5 cpu (not over) in cycle 11
    assert [(c.seconds, c.evictions) for c in alone] == [(420.0, 2)]
    assert measured_cures(LONG_CURE, takeover) == alone
