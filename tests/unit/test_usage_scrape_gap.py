"""Usage after a scrape gap is unknown, not low (``usage/samples.ScrapeGaps``, ``usage/prometheus.py``).

A ``rate()`` over a window that overlaps a gap (a Prometheus restart, a target down) under-reports: the
node would read low, reset a hot node's anomaly count and look like room for pods. The window's sample
count, against the node's own recent counts, tells such a window apart; that cycle the node's usage is
unknown (a skip: its count unchanged).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pytest

from descheduler.cluster.types import Node
from descheduler.config.providers import PrometheusSettings
from descheduler.planner import PlannerState, commit, evicted_from
from descheduler.planner.state import AnomalyCount
from descheduler.usage.prometheus import PrometheusSource
from descheduler.usage.samples import SCRAPE_GAP, ScrapeGaps
from tests.unit.builders import NOW, World, cpu, evicted, report, settings


@dataclass(frozen=True)
class GapCase:
    name: str
    counts: tuple[float | None, ...]
    unknown: str
    """Per cycle: ``u`` the reading is unknown (a gap), ``.`` it stands."""


GAP_CASES = [
    GapCase("a whole window every cycle is never a gap", (20, 20, 21, 20, 19), "....."),
    GapCase("a window holding far fewer samples than lately is a gap", (20, 20, 6, 11, 20), "..uu."),
    GapCase("the first window has nothing to compare with and stands", (6, 20, 20), "..."),
    GapCase("a quarter fewer is jitter, not a gap", (20, 15, 16), "..."),
    GapCase("no count (an overridden query without the series) leaves the reading", (20, None, 20), "..."),
    GapCase(
        "a lasting slower scrape interval is learned within ten cycles",
        (20,) + (10,) * 11,
        "." + "u" * 10 + ".",
    ),
]


@pytest.mark.parametrize("case", GAP_CASES, ids=[c.name for c in GAP_CASES])
def test_a_scrape_gap_is_told_from_the_windows_sample_count(case: GapCase) -> None:
    gaps = ScrapeGaps()
    seen = "".join("u" if gaps.check("node-a", count, 300) else "." for count in case.counts)
    assert seen == case.unknown


def test_the_gap_reason_says_what_was_counted() -> None:
    gaps = ScrapeGaps()
    gaps.check("node-a", 20, 300)
    assert gaps.check("node-a", 5, 300).startswith(f"{SCRAPE_GAP}: 5 samples in the 300s window, 20 lately")


class Scripted(PrometheusSource):
    """A source whose queries answer from a script instead of a server: node -> value per query name."""

    def __init__(self) -> None:
        super().__init__(PrometheusSettings.model_validate({"url": "http://127.0.0.1:9"}), clock=lambda: NOW)
        self.answers: dict[str, dict[str, float]] = {}

    def _run_query(self, name: str, matcher: str, now: float) -> Mapping[str, list[float]] | str:  # type: ignore[override]
        return {node: [value] for node, value in self.answers.get(name, {}).items()}


def cycle(source: Scripted, counts: dict[str, float]) -> tuple[set[str], dict[str, str]]:
    names = ("node-a", "node-b")
    source.answers = {
        "nodeCpu": dict.fromkeys(names, 0.2),  # an under-reporting rate: it would read low
        "nodeMemory": dict.fromkeys(names, 2.0**30),
        "nodeSampleTime": dict.fromkeys(names, NOW - 10),
        "nodeSampleCount": counts,
    }
    nodes = [Node(name=n, labels={}, allocatable={"cpu": 4000, "memory": 8 * 2**30}) for n in names]
    snapshot = source.fetch_nodes(nodes)
    return set(snapshot.nodes), dict(snapshot.node_errors)


def test_a_node_whose_window_has_a_gap_reads_unknown_not_low() -> None:
    source = Scripted()
    assert cycle(source, {"node-a": 20, "node-b": 20}) == ({"node-a", "node-b"}, {})
    sampled, errors = cycle(source, {"node-a": 4, "node-b": 20})
    source.close()
    assert sampled == {"node-b"}
    assert set(errors) == {"node-a"} and errors["node-a"].startswith(SCRAPE_GAP)


def test_a_hot_nodes_confirmation_is_not_restarted_by_a_scrape_gap() -> None:
    """Five over cycles confirm; a gap cycle between them neither resets nor advances the count."""
    config = settings(consecutive=3, migration={"maxMigratingPerNode": 1})
    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1"))
    world.deployment("web", replicas=4)
    for i in range(4):
        world.pod(f"web-{i}", on="hot", owner="web", usage=cpu("2"))
    state, counts = PlannerState(), []
    for i, gap in enumerate([False, False, True, False]):
        world.node_errors = {"hot": f"{SCRAPE_GAP}: 4 samples in the 300s window, 20 lately"} if gap else {}
        result = world.plan(config, state, NOW + 60 * i)
        state = commit(result.state, evicted_from(result, evicted(result)), NOW + 60 * i)
        counts.append((report(result, "hot").node_class, len(result.evictions)))
    assert counts == [("over", 0), ("over", 0), ("skipped", 0), ("hotspot", 1)]
    cured = AnomalyCount(0, NOW + 180, 0, NOW + 180, cure=True, began=NOW + 180, spent=1)
    assert state.anomalies["hot"] == cured
