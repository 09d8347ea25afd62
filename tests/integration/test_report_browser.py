"""The HTML report in a real headless Chromium: it loads from a file with no console error, no uncaught
exception and no blocked or failed load (the page's Content-Security-Policy turns any network use into an
error), and shows the nodes and evictions the planner decided.

``simulate --output html`` on the bundled example (six cycles; evictions in cycles 3 and 6, known from the
README's demo). The screenshot is kept in the test's tmp dir (``UPDATE_DOCS=1`` also writes
``docs/report.png``). ``once --dry-run --output html`` against a cluster is checked on the real control
plane (``tests/controlplane/test_report_browser.py``), with the page queries defined here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser import Page, chromium
from tests.support.service import (
    REPO,
    run_command,
)

pytestmark = pytest.mark.integration

EXAMPLE = REPO / "config" / "examples" / "hotspot"
ARROWS = """[...document.querySelectorAll('section.cycle[data-cycle="%d"] g.arrow')].map(
  g => [g.dataset.pod, g.dataset.from, g.dataset.to])"""
NODES = """[...document.querySelectorAll('section.cycle[data-cycle="%d"] g.node')].map(
  g => [g.dataset.node, g.dataset.class])"""
SKIP_GROUPS = """Object.fromEntries(
  [...document.querySelectorAll('section.cycle[data-cycle="%d"] details.skip')].map(d => [
    d.dataset.code, [...d.querySelectorAll('tbody tr')].map(r => r.cells[2].textContent)]))"""


def _simulate(output: str) -> str:
    proc = run_command(
        "simulate", "--config", str(EXAMPLE / "config.yaml"), "--cluster", str(EXAMPLE / "cluster.yaml"),
        "--usage", str(EXAMPLE / "usage.yaml"), "--cycles", "6", "--output", output, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _visible(page: Page, selector: str) -> Any:
    """Whether each match is rendered with a size (hidden sections have none)."""
    return page.evaluate(
        f"[...document.querySelectorAll({json.dumps(selector)})]"
        ".map(e => e.getBoundingClientRect().height > 0)"
    )


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Page, dict[str, Any], Path]]:
    workdir = tmp_path_factory.mktemp("report")
    report = workdir / "simulate.html"
    report.write_text(_simulate("html"))
    document = json.loads(_simulate("json"))
    with chromium() as page:
        page.open(report.as_uri(), width=1400, height=1000)
        yield page, document, workdir


def test_the_simulate_report_loads_offline_without_any_error(
    simulated: tuple[Page, dict[str, Any], Path],
) -> None:
    page, _, _ = simulated
    assert page.problems.all() == []
    assert page.evaluate("document.title") == "descheduler simulate"
    assert page.evaluate("performance.getEntriesByType('resource').length") == 0, "it loaded something"


def test_every_cycle_shows_every_node_with_its_class(simulated: tuple[Page, dict[str, Any], Path]) -> None:
    page, document, _ = simulated
    assert page.evaluate("document.querySelectorAll('section.cycle').length") == 6
    for cycle in document["cycles"]:
        shown = page.evaluate(NODES % cycle["cycle"])
        assert shown == [[n["node"], n["class"]] for n in cycle["nodes"]]
    hot = dict(page.evaluate(NODES % 3))
    assert hot["worker-03"] == "hotspot" and hot["worker-05"] == "hotspot" and hot["worker-12"] == "skipped"


def test_the_evictions_are_arrows_from_source_to_destination(
    simulated: tuple[Page, dict[str, Any], Path],
) -> None:
    page, _, _ = simulated
    assert page.evaluate(ARROWS % 3) == [
        ["data/kafka-0", "worker-05", "worker-02"],
        ["shop/search-5d8f7c-drml5", "worker-03", "worker-01"],
        ["shop/search-5d8f7c-6kdbv", "worker-03", "worker-02"],
    ]
    assert page.evaluate(ARROWS % 6) == [["shop/recommendations-5d8f7c-k972v", "worker-03", "worker-02"]]
    assert [page.evaluate(ARROWS % n) for n in (1, 2, 4, 5)] == [[], [], [], []]
    drawn = page.evaluate(
        "[...document.querySelectorAll('section.cycle[data-cycle=\"3\"] g.arrow path')]"
        ".map(p => p.getTotalLength() > 20)"
    )
    assert drawn == [True, True, True]


def test_skipped_pods_are_grouped_by_reason_with_their_messages(
    simulated: tuple[Page, dict[str, Any], Path],
) -> None:
    page, document, _ = simulated
    groups = page.evaluate(SKIP_GROUPS % 6)
    expected: dict[str, list[str]] = {}
    for skip in document["cycles"][5]["skips"]:
        expected.setdefault(skip["code"], []).append(skip["message"])
    assert groups == expected
    limited = (
        "Deployment shop/search already had 2 evictions in the last 300s (objectLimiters.workload allows 2)"
    )
    assert groups["object-limiter"] == [limited, limited]


def test_the_after_bars_show_the_hotspot_cooling_and_the_destination_warming(
    simulated: tuple[Page, dict[str, Any], Path],
) -> None:
    page, _, _ = simulated
    titles = page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('section.cycle[data-cycle=\"6\"] g.node')]"
        ".filter(g => g.querySelector('rect.after'))"
        ".map(g => [g.dataset.node, g.querySelector('rect.after title').textContent]))"
    )
    assert all(t.startswith("cpu after: ") for t in titles.values())
    cpu_after = {name: float(t.split(": ")[1].rstrip("%")) for name, t in titles.items()}
    # worker-03 at 68.46% cpu sheds the recommendations pod; worker-02 (13.97%) receives it.
    assert cpu_after["worker-03"] < 68.46 and cpu_after["worker-02"] > 13.97
    assert cpu_after["worker-01"] == pytest.approx(17.94, abs=0.01), "uninvolved nodes keep their usage"


def test_the_filter_hides_cycles_without_evictions_and_a_screenshot_is_kept(
    simulated: tuple[Page, dict[str, Any], Path],
) -> None:
    page, _, workdir = simulated
    assert _visible(page, "section.cycle") == [True] * 6
    page.evaluate("document.getElementById('only-evictions').click()")
    assert _visible(page, "section.cycle") == [False, False, True, False, False, True]
    assert page.evaluate("document.getElementById('shown').textContent") == "2 of 6 cycle(s) shown"
    shot = page.screenshot(workdir / "simulate.png")
    assert shot.stat().st_size > 50_000
    assert page.problems.all() == []
    if os.environ.get("UPDATE_DOCS") == "1":  # the README's picture: the header and the first cycle that acts
        page.screenshot(REPO / "docs" / "report.png", max_height=1000)
