"""The HTML report: built from the planner's own records (``Plan.to_dict()``), it moves each evicted pod's
usage from its source to its destination in the "after" bars, draws one arrow per eviction, groups the
pods left alone by reason, and references nothing outside the file. (The page in a real browser:
``tests/integration/test_report_browser.py``.)"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from descheduler.cli import main
from descheduler.report import cycle_view, project, render_html
from descheduler.report.html import MAX_ROWS
from tests.unit.builders import World, cpu, settings

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "config" / "examples" / "hotspot"
NO_WORKLOAD_LIMITS = {"objectLimiters": {}, "maxMigratingPerWorkload": 0, "maxUnavailablePerWorkload": 0}


def one_hotspot() -> dict[str, Any]:
    """hot: 9 of 10 cores; cool: 1 of 10; one 2-core pod of a 4-replica Deployment moves hot -> cool."""
    world = World().node("hot", usage=cpu("9")).node("cool", usage=cpu("1"))
    world.deployment("web", replicas=4).pod("web-1", on="hot", owner="web", usage=cpu("2"))
    world.pod("agent", on="hot", owner="agent", usage=cpu("1"))
    record: dict[str, Any] = world.plan(settings(low={"cpu": 20}, high={"cpu": 50})).to_dict()
    return record


def _percent(record: dict[str, Any], node: str, result: str | None = None) -> tuple[float, float]:
    if result is not None:
        for eviction in record["evictions"]:
            eviction["result"] = result
    (row,) = [r for r in cycle_view(record, "t").rows if r.name == node]
    (bar,) = [b for b in row.bars if b.resource == "cpu"]
    return bar.before, bar.after


@pytest.mark.parametrize(
    ("result", "hot", "cool"),
    [
        (None, (90.0, 70.0), (10.0, 30.0)),  # simulate: every planned eviction happens
        ("would-evict", (90.0, 70.0), (10.0, 30.0)),  # dry-run, allowed by the server-side check
        ("evicted", (90.0, 70.0), (10.0, 30.0)),
        ("dry-run-refused", (90.0, 90.0), (10.0, 10.0)),  # a budget refused it: nothing moves
        ("failed", (90.0, 90.0), (10.0, 10.0)),
    ],
)
def test_the_after_bars_move_the_pods_usage_from_source_to_destination_only_when_it_would_move(
    result: str | None, hot: tuple[float, float], cool: tuple[float, float]
) -> None:
    record = one_hotspot()
    assert [(e["pod"], e["node"], e["destination"]) for e in record["evictions"]] == [
        ("default/web-1", "hot", "cool")
    ]
    assert _percent(record, "hot", result) == pytest.approx(hot)
    assert _percent(record, "cool", result) == pytest.approx(cool)


def test_the_projection_keeps_absolute_usage_of_nodes_without_evictions() -> None:
    record = one_hotspot()
    record["nodes"].append({"node": "idle", "class": "low", "resources": [
        {"resource": "cpu", "allocatable": 10000, "usage": 500, "usagePercent": 5.0, "lowPercent": 20,
         "highPercent": 50}]})  # fmt: skip
    assert project(record)["idle"] == {"cpu": 500.0}


def test_pods_left_alone_are_grouped_by_reason_with_their_messages() -> None:
    view = cycle_view(one_hotspot(), "t")
    assert list(view.skips) == ["workload-unknown"]
    (skip,) = view.skips["workload-unknown"]
    assert skip["pod"] == "default/agent" and "agent" in skip["message"]


def test_a_large_cluster_draws_only_the_nodes_that_matter() -> None:
    record = one_hotspot()
    (template,) = [n for n in record["nodes"] if n["node"] == "cool"]
    record["nodes"] += [{**template, "node": f"other-{i}"} for i in range(MAX_ROWS)]
    view = cycle_view(record, "t")
    assert sorted(r.name for r in view.rows) == ["cool", "hot"]
    assert view.hidden_nodes == MAX_ROWS


def test_the_page_holds_everything_and_references_nothing_outside_it() -> None:
    page = render_html([one_hotspot()], ["Cycle 1"], "report")
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page), "no external resource"
    assert "@import" not in page and "url(http" not in page
    arrows = re.findall(r'class="arrow[^"]*" data-pod="([^"]+)" data-from="([^"]+)" data-to="([^"]+)"', page)
    assert arrows == [("default/web-1", "hot", "cool")]
    assert sorted(re.findall(r'data-node="([^"]+)"', page)) == ["cool", "hot"]


def test_each_cycle_has_its_own_arrowhead_so_hiding_one_cycle_keeps_the_others_arrowheads() -> None:
    page = render_html([one_hotspot(), one_hotspot()], ["Cycle 1", "Cycle 2"], "report")
    ids = re.findall(r'<marker id="([^"]+)"', page)
    assert ids == ["head-1", "head-2"]
    assert re.findall(r'marker-end="url\(#([^)]+)\)"', page) == ["head-1", "head-2"]


def test_a_refused_eviction_is_a_dashed_arrow_with_its_result_in_the_table() -> None:
    record = one_hotspot()
    record["evictions"][0].update(result="dry-run-refused", message="would violate shop-pdb")
    page = render_html([record], ["Cycle 1"], "report")
    assert re.findall(r'<g class="(arrow[^"]*)"', page) == ["arrow refused"]
    assert "<td>dry-run-refused</td><td>would violate shop-pdb</td>" in page


def test_simulated_rescheduling_is_listed_under_its_cycle() -> None:
    record = one_hotspot()
    record["rescheduled"] = [{"pod": "default/web-1", "from": "hot", "to": "cool"},
                             {"pod": "default/web-2", "from": "hot", "to": None}]  # fmt: skip
    (section,) = re.findall(r'<table class="rescheduled">.*?</table>', render_html([record], ["c"], "r"))
    assert "<td>default/web-1</td><td>hot</td><td>cool</td>" in section
    assert "<td>default/web-2</td><td>hot</td><td>(pending: no node fits)</td>" in section


def test_names_are_escaped() -> None:
    record = one_hotspot()
    record["skips"][0]["message"] = "<script>alert(1)</script>"
    page = render_html([record], ["<b>cycle</b>"], "report")
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page
    assert "<b>cycle</b>" not in page


def test_the_policy_allows_only_the_pages_own_style_and_script_by_hash() -> None:
    page = render_html([one_hotspot()], ["Cycle 1"], "report")
    (policy,) = re.findall(r'http-equiv="Content-Security-Policy" content="([^"]+)"', page)
    assert "unsafe-inline" not in policy and "unsafe-hashes" not in policy
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    styles = re.findall(r"<style>(.*?)</style>", page, re.S)
    scripts = re.findall(r"<script>(.*?)</script>", page, re.S)
    assert len(styles) == 1 and len(scripts) == 1, "one of each, both covered by the hashes below"
    for name, text in (("style-src", styles[0]), ("script-src", scripts[0])):
        digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
        assert directives[name] == f"'sha256-{digest}'"
    assert " style=" not in page and not re.search(r"\son[a-z]+=", page), "no inline style or handler"


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("evil\u202egnp.exe", "evil\\u202egnp.exe"),  # right-to-left override
        ("a\u202ab\u202cc\u202dd", "a\\u202ab\\u202cc\\u202dd"),  # embeddings, pop, left-to-right override
        ("x\u2066y\u2067z\u2068w\u2069", "x\\u2066y\\u2067z\\u2068w\\u2069"),  # isolates
        ("l\u200er\u200fa\u061c", "l\\u200er\\u200fa\\u061c"),  # marks
        ("nul\x00bell\x07esc\x1b", "nul\\u0000bell\\u0007esc\\u001b"),  # C0
        ("del\x7fcsi\x9b", "del\\u007fcsi\\u009b"),  # DEL and C1
        ("line\u2028para\u2029", "line\\u2028para\\u2029"),
        ("<b>\u202e</b>", "&lt;b&gt;\\u202e&lt;/b&gt;"),  # both escapings hold together
        ("plain-node-1.zone-a", "plain-node-1.zone-a"),
    ],
)
def test_invisible_and_reordering_characters_in_names_are_shown_escaped(name: str, shown: str) -> None:
    record = one_hotspot()
    for node in record["nodes"]:
        if node["node"] == "hot":
            node["node"] = name
    for eviction in record["evictions"]:
        eviction["node"] = name
    record["skips"][0]["pod"] = f"default/{name}"
    page = render_html([record], [name], name)
    assert f'data-node="{shown}"' in page and f'data-from="{shown}"' in page
    assert f"<td>default/{shown}</td>" in page and f"<title>{shown}</title>" in page
    assert not re.search(
        r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]", page
    )


def _simulate(tmp_path: Path, output: str, capsys: pytest.CaptureFixture[str]) -> str:
    code = main([
        "simulate", "--config", str(EXAMPLE / "config.yaml"), "--cluster", str(EXAMPLE / "cluster.yaml"),
        "--usage", str(EXAMPLE / "usage.yaml"), "--cycles", "6", "--output", output,
    ])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


def test_simulate_html_shows_exactly_the_evictions_and_nodes_of_simulate_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(_simulate(tmp_path, "json", capsys))
    page = _simulate(tmp_path, "html", capsys)
    sections = re.split(r'<section class="cycle" ', page)[1:]
    assert len(sections) == len(document["cycles"]) == 6
    for section, cycle in zip(sections, document["cycles"], strict=True):
        arrows = re.findall(r'data-pod="([^"]+)" data-from="([^"]+)" data-to="([^"]+)"', section)
        assert arrows == [(e["pod"], e["node"], e["destination"]) for e in cycle["evictions"]]
        assert re.findall(r'data-node="([^"]+)"', section) == [n["node"] for n in cycle["nodes"]]
        codes = re.findall(r'<details class="skip" data-code="([^"]+)"', section)
        assert sorted(codes) == sorted({s["code"] for s in cycle["skips"]})
    assert sum(len(c["evictions"]) for c in document["cycles"]) == 4


def test_summarised_pods_are_counted_and_shown_per_hotspot_and_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads(_simulate(tmp_path, "json", capsys))
    cycle = next(c for c in document["cycles"] if c.get("skipSummaries"))
    view = cycle_view(cycle, "t")
    counted = sum(s["count"] for s in cycle["skipSummaries"])
    assert counted > 0
    assert view.left_alone == len(cycle["skips"]) + counted
    page = render_html([cycle], ["t"], "title")
    assert f"; {view.left_alone} pod(s) left alone</p>" in page
    table = page.split('<table class="summaries">')[1].split("</table>")[0]
    rows = re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td><td>(\d+)</td>", table)
    assert rows == [(s["node"], s["stop"], s["code"], str(s["count"])) for s in cycle["skipSummaries"]]


def test_a_device_pods_row_says_which_devices_its_destination_gives() -> None:
    record = one_hotspot()
    (first, *_) = record["evictions"]
    first["devices"] = "1 device(s) on cool (gpu.example.com/cool/gpu-0) of 2 free matching"
    (section,) = re.findall(r'<table class="evictions">.*?</table>', render_html([record], ["c"], "r"))
    assert "<th>devices</th>" in section
    assert "1 device(s) on cool (gpu.example.com/cool/gpu-0) of 2 free matching" in section
    plain = render_html([one_hotspot()], ["c"], "r")
    assert "<th>devices</th>" not in plain
