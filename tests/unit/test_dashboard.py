"""The Grafana dashboard: the committed JSON and ConfigMap are exactly what the code generates, every panel
queries only metrics the service exports, and the optional kustomize component renders a ConfigMap the
Grafana sidecar picks up. (That every query returns series from a real Prometheus scraping a running
service is checked in ``tests/controlplane/test_dashboard.py``.)"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import generate, preview
from descheduler.service.observability import Metrics
from tests.unit.test_manifests import _render, write_overlay

REPO = Path(__file__).resolve().parents[2]


def _committed() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(generate.DASHBOARD_JSON.read_text())
    return loaded


def _queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]


@pytest.mark.parametrize("path", sorted(generate.generated_files()), ids=lambda p: str(p.relative_to(REPO)))
def test_the_committed_file_is_what_the_generator_writes(path: Path) -> None:
    assert path.exists(), f"{path} is missing: run python -m dashboards.generate"
    assert path.read_text() == generate.generated_files()[path], "stale: run python -m dashboards.generate"


def test_the_check_mode_reports_a_stale_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "descheduler.json"
    stale.write_text("{}\n")
    monkeypatch.setattr(generate, "generated_files", lambda: {stale: generate.dashboard_json()})
    monkeypatch.setattr(generate, "REPO", tmp_path)
    assert generate.main(["--check"]) == 1
    assert stale.read_text() == "{}\n", "--check never writes"
    assert generate.main([]) == 0 and generate.main(["--check"]) == 0


def test_every_panel_but_the_rows_has_a_query_on_the_datasource_variable() -> None:
    dashboard = _committed()
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 18
    for panel in panels:
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for target in panel["targets"]:
            assert target["expr"].strip(), panel["title"]
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(set(ids)) == len(ids), "panel ids must be unique"


def test_every_query_reads_only_metrics_the_service_exports_and_filters_by_job() -> None:
    exported = {sample.name for family in Metrics().registry.collect() for sample in family.samples} | {
        family.name for family in Metrics().registry.collect()
    }
    metric = re.compile(r"\b(descheduler_[a-z_]+)\b")
    for title, expr in _queries(_committed()):
        names = set(metric.findall(expr))
        assert names, f"{title!r} reads no descheduler metric: {expr}"
        unknown = {n for n in names if n not in exported and n.removesuffix("_total") not in exported}
        assert not unknown, f"{title!r} reads metrics the service does not export: {unknown}"
        for name in names:
            assert re.search(rf'{name}\{{[^}}]*job=~"\$job"', expr), f"{title!r}: {name} without job filter"


def test_the_eviction_counter_carries_bounded_workload_labels() -> None:
    metrics = Metrics()
    labels = metrics.pods_evicted._labelnames
    assert {"node", "namespace", "workload_kind", "workload", "reason", "result"} <= set(labels)
    assert "pod" not in labels, "pod names are unbounded: never a label"


def test_the_panels_cover_what_operators_asked_for() -> None:
    titles = {title for title, _ in _queries(_committed())}
    for wanted in (
        "CPU usage against thresholds",
        "Memory usage against thresholds",
        "Node classes over time",
        "Anomaly counts",
        "Evictions by node",
        "Evictions by namespace",
        "Evictions by workload",
        "Evictions by reason",
        "Skipped pods by reason",
        "Cycle duration",
        "Cache age and usage-sample age",
        "Leader",
        "Mode",
        "Cure time",
        "Evictions per cure",
    ):
        assert wanted in titles


def test_the_optional_component_adds_a_sidecar_configmap_holding_the_dashboard(tmp_path: Path) -> None:
    overlay = write_overlay(
        tmp_path / "overlay", [REPO / "manifests"], [generate.COMPONENT], namespace="load-aware-descheduler"
    )
    objs, _ = _render(overlay)
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == generate.CONFIGMAP_NAME]
    assert cm["metadata"]["namespace"] == "load-aware-descheduler"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"][generate.CONFIGMAP_KEY]) == _committed()
    base, _ = _render(REPO / "manifests")
    assert generate.CONFIGMAP_NAME not in yaml.safe_dump_all(base), (
        "the dashboard is optional: not in the base"
    )


@pytest.mark.parametrize("draw", ["line", "bars"])
def test_a_nan_a_query_returns_is_a_gap_in_the_preview_as_in_grafana(draw: str) -> None:
    """Prometheus answers 0/0 (a ratio over an interval with no observations) with NaN: Grafana leaves a
    gap there; an SVG path with ``nan`` in it is an error the browser reports."""
    panel = {"id": 1, "type": "timeseries", "title": "t", "gridPos": {"x": 0, "y": 0, "w": 12, "h": 8}}
    panel["fieldConfig"] = {"defaults": {"custom": {"drawStyle": draw}}}
    points = [(0.0, float("nan")), (1.0, 2.0), (2.0, 3.0), (3.0, float("nan")), (4.0, 1.0)]
    page = preview.render({"panels": [panel]}, {1: [("s", preview.Series({}, points))]}, (0.0, 4.0))
    drawn = re.findall(r'<path d="([^"]*)"', page) if draw == "line" else re.findall(r"<rect [^>]*>", page)
    assert "nan" not in page.lower()
    if draw == "line":
        assert [segment.count("L") for segment in drawn[0].split("M")[1:]] == [1, 0], drawn
    else:
        assert len(drawn) == 3
