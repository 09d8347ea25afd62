"""Usage after a scrape gap is unknown, not low, against a real Prometheus scraping every second.

The exporter answers 503 for longer than the 10 s window, then comes back. Right after, the window holds
only the few samples since: a ``rate()`` over it under-reports (the node would read low, its anomaly
count restart, and it would look like room for pods). The source reports the node's usage unknown for
those cycles (a ``scrape gap`` reason: the planner skips it, its count unchanged) and reads it again once
the window is whole.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from descheduler.cluster.types import Node
from descheduler.config.providers import PrometheusSettings
from descheduler.planner import PlannerState, commit, evicted_from
from descheduler.usage.prometheus import PrometheusSource
from tests.support.service import GI, SimulatedNodes, _scraping_prometheus, serve_exposition
from tests.unit.builders import World, cpu, evicted, report, settings

pytestmark = pytest.mark.integration

SCRAPE_GAP = "scrape gap"
"""How the reason starts (``usage.samples.SCRAPE_GAP``), spelt out so the test runs on a build without it."""

WINDOW = 10
NODE = "gap-hot"
BUSY = 3.0
"""Cores busy on the node's 4: 75%, over the 50% high threshold every cycle it is read."""


@dataclass
class Exporter:
    """The simulated node's ``/metrics`` at ``target``; ``down`` makes every scrape fail (503)."""

    target: str
    down: threading.Event


@pytest.fixture
def exporter() -> Iterator[Exporter]:
    model = SimulatedNodes()
    model.add_node(NODE, base_cores=BUSY, cpus=4, mem_total=16 * GI)
    down = threading.Event()
    with serve_exposition(lambda: model, down) as target:
        yield Exporter(target, down)


class Cycles:
    """Reads the node through the real source and plans on it at the wall clock, about one cycle a
    second, with five over cycles to confirm."""

    def __init__(self, url: str) -> None:
        self.source = PrometheusSource(
            PrometheusSettings.model_validate({"url": url, "window": f"{WINDOW}s"})
        )
        self.config = settings(consecutive=5)
        self.state = PlannerState()
        self.node = Node(name=NODE, labels={}, allocatable={"cpu": 4000, "memory": 16 * GI})

    def run(self) -> tuple[str, int, str]:
        """The node's class, anomaly count and usage reason (or cpu sample) this cycle."""
        snapshot = self.source.fetch_nodes([self.node])
        sample = snapshot.nodes.get(NODE)
        read = cpu(f"{sample.resources['cpu']}m", f"{sample.resources['memory']}") if sample else None
        world = World().node(NODE, cpu="4", memory="16Gi", usage=read)
        world.node("cool", cpu="4", memory="16Gi", usage=cpu("1"))
        world.node_errors = dict(snapshot.node_errors)
        now = time.time()
        result = world.plan(self.config, self.state, now)
        self.state = commit(result.state, evicted_from(result, evicted(result)), now)
        hot = report(result, NODE)
        why = snapshot.node_errors.get(NODE, f"{sample.resources['cpu']}m" if sample else "")
        detector = self.state.anomalies.get(NODE)
        return hot.node_class, detector.count if detector is not None else 0, why


def wait_whole_window(cycles: Cycles, seconds: float) -> list[tuple[str, int, str]]:
    seen = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        seen.append(cycles.run())
        time.sleep(1.0)
    return seen


def test_a_node_read_after_a_scrape_gap_is_unknown_and_its_count_goes_on(
    exporter: Exporter, tmp_path: Path
) -> None:
    with _scraping_prometheus(exporter.target, tmp_path / "prometheus") as prometheus:
        cycles = Cycles(prometheus.url)
        try:
            time.sleep(WINDOW + 1)  # a whole window of samples
            before = [cycles.run() for _ in range(3)]
            assert [c[:2] for c in before] == [("over", 1), ("over", 2), ("over", 3)]
            exporter.down.set()
            time.sleep(WINDOW + 3)  # longer than the window: no sample of before is left in it
            exporter.down.clear()
            time.sleep(2.5)  # a few scrapes back: the window holds only them
            rate = prometheus.query(
                f'sum(rate(node_cpu_seconds_total{{instance="{NODE}:9100",mode="user"}}[{WINDOW}s]))'
            )
            after_gap = cycles.run()
            recovered = wait_whole_window(cycles, WINDOW + 3)
        finally:
            cycles.source.close()
    assert rate and float(rate[0]["value"][1]) < 0.6 * BUSY, "the raw rate under-reports: it would read low"
    node_class, count, why = after_gap
    assert (node_class, count) == ("skipped", 3), why
    assert why.startswith(SCRAPE_GAP)
    classes = [c[0] for c in recovered]
    counts = [count] + [c[1] for c in recovered]
    assert set(classes) <= {"skipped", "over", "hotspot"}, recovered  # never low: never reset
    assert counts == sorted(counts) and "hotspot" in classes, recovered
