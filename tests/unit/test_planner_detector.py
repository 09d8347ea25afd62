"""The anomaly detector (``planner/anomaly.py``) played over hand-worked cycle sequences.

Each case is a sequence of cycles 60 s apart. A letter is what node ``hot`` shows that cycle:
``O`` over (90% cpu, high 50%), ``N`` normal (40%), ``L`` low (10%, low 20%), ``S`` skipped (a stale
sample), ``E`` over with the planned evictions committed as done. Evictions are otherwise never
committed (they failed), so only the detector decides. The expected classes and counts are worked out
by hand from the rules in the module's docstring, not copied from a run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from descheduler.planner import AnomalyCount, Plan, PlannerState, commit, evicted_from
from descheduler.planner.settings import compile_settings
from descheduler.report.text import render_plan_text
from descheduler.service.observability import Metrics
from tests.unit.builders import NOW, World, cpu, report, settings

USAGE = {"O": "9", "E": "9", "N": "4", "L": "1", "S": "9"}
SHORT = {"hotspot": "H", "over": "o", "normal": "n", "low": "l", "skipped": "s"}


@dataclass(frozen=True)
class Case:
    name: str
    condition: dict[str, Any]
    cycles: str
    classes: str
    """One letter a cycle: H hotspot, o over, n normal, l low, s skipped."""
    normal_counts: str = ""
    """One digit a cycle (the audit's normalCount); empty: not checked."""
    counts: str = ""
    """One digit a cycle (the audit's anomalyCount: consecutive over cycles); empty: not checked."""


CASES = [
    Case("over N times: a hotspot on the Nth", {"consecutiveAbnormalities": 3}, "OOO", "ooH"),
    Case(
        "N of 1: every over cycle, no timeout (Koordinator skips the detector)",
        {"consecutiveAbnormalities": 1},
        "OOONO",
        "HHHnH",
        counts="12301",
    ),
    Case(
        "a dip of up to consecutiveNormalities keeps it confirmed: a hotspot again at once",
        {"consecutiveAbnormalities": 3, "consecutiveNormalities": 2, "timeout": "10m"},
        "OOONNO",
        "ooHnnH",
        "000120",
    ),
    Case(
        "one normal cycle more than consecutiveNormalities: confirmed again over N cycles",
        {"consecutiveAbnormalities": 3, "consecutiveNormalities": 2, "timeout": "10m"},
        "OOONNNOOO",
        "ooHnnnooH",
        "000120000",
    ),
    Case(
        "the default consecutiveNormalities is 3 (Koordinator's)",
        {"consecutiveAbnormalities": 2, "timeout": "10m"},
        "OONNNONNNNOO",
        "oHnnnHnnnnoH",
        "001230123000",
    ),
    Case(
        "consecutiveNormalities 0 is unset: 3, as in Koordinator",
        {"consecutiveAbnormalities": 2, "consecutiveNormalities": 0, "timeout": "10m"},
        "OONNNO",
        "oHnnnH",
    ),
    Case(
        "before confirmation one normal cycle resets the count",
        {"consecutiveAbnormalities": 3, "timeout": "10m"},
        "OONOOO",
        "oonooH",
    ),
    Case(
        "a low cycle ends the confirmed state (Koordinator resets low nodes)",
        {"consecutiveAbnormalities": 2, "timeout": "10m"},
        "OOLOO",
        "oHloH",
    ),
    Case(
        "the confirmed state expires timeout after the confirming cycle, over or not",
        {"consecutiveAbnormalities": 2, "timeout": "150s"},
        "OONNOO",
        "oHnnoH",
    ),
    Case(
        "a node over all along is confirmed again after the timeout",
        {"consecutiveAbnormalities": 2, "timeout": "120s"},
        "OOOOOO",
        "oHHoHH",
        counts="123123",
    ),
    Case(
        "the default timeout (1m) ends the confirmed state by the next 60s cycle",
        {"consecutiveAbnormalities": 2},
        "OOOO",
        "oHoH",
    ),
    Case(
        "a timeout of 0 is the detector's 60s",
        {"consecutiveAbnormalities": 2, "timeout": "0s"},
        "OOOO",
        "oHoH",
    ),
    Case(
        "evicting from the node keeps it confirmed (its next round waits for the previous one)",
        {"consecutiveAbnormalities": 2, "timeout": "10m"},
        "OEOOO",
        "oHHHH",
    ),
    Case(
        "a skipped cycle leaves the detector as it was",
        {"consecutiveAbnormalities": 2, "consecutiveNormalities": 1, "timeout": "10m"},
        "OONSO",
        "oHnsH",
        "00110",
    ),
]


def hot_world() -> World:
    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1"))
    world.deployment("web", replicas=6)
    world.pod("web-1", on="hot", owner="web", usage=cpu("4"))
    return world


def play(world: World, config: Any, cycles: str, node: str = "hot") -> list[Plan]:
    state = PlannerState()
    plans = []
    for i, step in enumerate(cycles):
        now = NOW + 60 * i
        world.node_usage[node] = cpu(USAGE[step])
        world.node_age[node] = 600.0 if step == "S" else 0.0
        result = world.plan(config, state, now)
        done = [e.pod.key for e in result.evictions] if step == "E" else []
        state = commit(result.state, evicted_from(result, done), now)
        plans.append(result)
    return plans


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_detector_over_a_sequence_of_cycles(case: Case) -> None:
    config = settings(args={"anomalyCondition": case.condition})
    plans = play(hot_world(), config, case.cycles)
    classes = "".join(SHORT[report(p, "hot").node_class] for p in plans)
    assert classes == case.classes
    # A node is a source only in a cycle in which it is a hotspot (over and confirmed); while no
    # eviction is committed its one pod is proposed in every such cycle.
    sources = [bool(p.evictions) for p in plans]
    hotspots = [c == "H" for c in case.classes]
    if "E" in case.cycles:
        assert all(h for s, h in zip(sources, hotspots, strict=True) if s)
    else:
        assert sources == hotspots
    if case.normal_counts:
        assert "".join(str(report(p, "hot").normal_count) for p in plans) == case.normal_counts
    if case.counts:
        assert "".join(str(report(p, "hot").anomaly_count) for p in plans) == case.counts


def test_the_audit_shows_the_normal_cycles_and_the_confirmed_state() -> None:
    condition = {"consecutiveAbnormalities": 2, "consecutiveNormalities": 4, "timeout": "1h"}
    config = settings(args={"anomalyCondition": condition})
    last = play(hot_world(), config, "OON")[-1]
    node = report(last, "hot").to_dict()
    assert (node["anomalyCount"], node["normalCount"], node["consecutiveNormalities"]) == (0, 1, 4)
    assert node["confirmed"] is True
    assert node["class"] == "normal"


# --- the prod pass: its own detector -------------------------------------------------------------------

PROD_USAGE = {"O": "2.5", "N": "1.5", "L": "0.5"}
"""Per prod pod (two of them on a 10-core node, prod high 40%, low 20%): 50%, 30%, 10%."""


def prod_world() -> World:
    world = World().node("prod-heavy", usage=cpu("5.5")).node("idle", usage=cpu("1"))
    world.deployment("api", replicas=10)
    world.pod("api-1", on="prod-heavy", owner="api", qos="Burstable", usage=cpu("2.5"))
    world.pod("api-2", on="prod-heavy", owner="api", qos="Burstable", usage=cpu("2.5"))
    world.pod("api-idle", on="idle", owner="api", qos="Burstable", usage=cpu("0.5"))
    return world


@pytest.mark.parametrize(
    ("cycles", "classes"),
    [
        ("OOO", "oHH"),  # confirmed on the 2nd, then over: a hotspot every cycle
        ("OONNO", "oHnnH"),  # a dip of 2 <= 3 normal cycles
        ("OONNNNOO", "oHnnnnoH"),  # 4 > 3: confirmed again
        ("OOLO", "oHlo"),  # prod-low resets
    ],
)
def test_the_prod_detector_over_a_sequence_of_cycles(cycles: str, classes: str) -> None:
    world = prod_world()
    config = settings(
        low={"cpu": 20},
        high={"cpu": 60},
        args={
            "prodLowThresholds": {"cpu": 20},
            "prodHighThresholds": {"cpu": 40},
            "anomalyCondition": {"consecutiveAbnormalities": 2, "timeout": "10m"},
        },
        migration={"maxMigratingPerWorkload": 0, "maxUnavailablePerWorkload": 0},
    )
    state = PlannerState()
    seen = []
    for i, step in enumerate(cycles):
        now = NOW + 60 * i
        for pod in ("default/api-1", "default/api-2"):
            world.pod_usage[pod] = cpu(PROD_USAGE[step])
        result = world.plan(config, state, now)
        state = commit(result.state, evicted_from(result, []), now)
        hot = report(result, "prod-heavy")
        assert hot.node_class == "normal"  # overall 55% at most: only the prod detector counts
        seen.append(SHORT[hot.prod_class])
        assert bool(result.evictions) == (seen[-1] == "H")
    assert "".join(seen) == classes
    assert "prod-heavy" in state.prod_anomalies


def test_old_state_without_the_new_fields_reads_as_unconfirmed() -> None:
    # A state written before the detector (count and updated only) counts on as it always did.
    world = hot_world()
    config = settings(args={"anomalyCondition": {"consecutiveAbnormalities": 3, "timeout": "10m"}})
    state = PlannerState(anomalies={"hot": AnomalyCount(2, NOW - 60)})
    result = world.plan(config, state)
    assert report(result, "hot").node_class == "hotspot"
    assert result.state.anomalies["hot"] == AnomalyCount(3, NOW, 0, NOW)


@pytest.mark.parametrize(
    ("top", "pool", "expected"),
    [
        ({}, None, 3),  # Koordinator's default
        ({"consecutiveNormalities": 0}, None, 3),  # 0 is unset at top level: the default
        ({"consecutiveNormalities": 5}, None, 5),  # a pool without anomalyCondition inherits
        ({"consecutiveNormalities": 5}, {"consecutiveNormalities": 0}, 5),  # 0 in a pool: the top's
        ({"consecutiveNormalities": 5}, {"consecutiveNormalities": 2}, 2),
    ],
)
def test_consecutive_normalities_is_defaulted_as_koordinator_does(
    top: dict[str, int], pool: dict[str, int] | None, expected: int
) -> None:
    entry: dict[str, Any] = {"name": "p", "nodeSelector": {"matchLabels": {"pool": "p"}}}
    if pool is not None:
        entry["anomalyCondition"] = {"consecutiveAbnormalities": 2, **pool}
    config = settings(args={"anomalyCondition": {"consecutiveAbnormalities": 2, **top}, "nodePools": [entry]})
    assert compile_settings(config).pools[0].consecutive_normalities == expected
    zeros = [top, pool or {}].count({"consecutiveNormalities": 0})
    said = [n for n in config.notices if "consecutiveNormalities: 0 read as" in n]
    assert len(said) == zeros


def test_the_node_gauges_show_the_normal_cycles_and_the_confirmed_state() -> None:
    condition = {"consecutiveAbnormalities": 2, "consecutiveNormalities": 4, "timeout": "1h"}
    plans = play(hot_world(), settings(args={"anomalyCondition": condition}), "OONN")
    metrics = Metrics()
    metrics.observe_nodes(plans[-1].node_reports)
    value = metrics.registry.get_sample_value
    assert value("descheduler_node_normal_count", {"node": "hot"}) == 2
    assert value("descheduler_node_consecutive_normalities", {"node": "hot"}) == 4
    assert value("descheduler_node_anomaly_confirmed", {"node": "hot"}) == 1
    assert value("descheduler_node_anomaly_confirmed", {"node": "cool"}) == 0
    metrics.observe_nodes(
        play(hot_world(), settings(args={"anomalyCondition": condition}), "OONNL")[-1].node_reports
    )
    assert value("descheduler_node_anomaly_confirmed", {"node": "hot"}) == 0, "a low cycle resets it"


def test_the_text_report_shows_a_confirmed_nodes_normal_cycles() -> None:
    condition = {"consecutiveAbnormalities": 2, "consecutiveNormalities": 3, "timeout": "1h"}
    last = play(hot_world(), settings(args={"anomalyCondition": condition}), "OON")[-1]
    row = next(line for line in render_plan_text(last, "t") if line.lstrip().startswith("hot "))
    assert "0/2 (normal 1/3)" in row


@pytest.mark.parametrize(
    ("condition", "moot"),
    [
        ({"consecutiveNormalities": 2}, True),  # timeout 1m, interval 1m: confirmed for one cycle only
        ({"consecutiveNormalities": 2, "timeout": "0s"}, True),  # 0 is 60s
        ({"consecutiveNormalities": 2, "timeout": "10m"}, False),
        ({}, False),  # not set: nothing to warn about
    ],
)
def test_a_consecutive_normalities_the_timeout_makes_moot_is_said(
    condition: dict[str, Any], moot: bool
) -> None:
    config = settings(args={"anomalyCondition": {"consecutiveAbnormalities": 2, **condition}})
    assert config.config.descheduling_interval == 60.0
    assert any("consecutiveNormalities has no effect" in n for n in config.notices) is moot
