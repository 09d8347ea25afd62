"""Every query of the shipped Grafana dashboard, run against a real Prometheus that scraped a running
``descheduler run``, returns series.

Once per module: the service runs against the real control plane (a cluster the real kube-scheduler
placed, usage from the session's Prometheus), a second real Prometheus scrapes the service's
``/metrics`` every second, then one pod's CPU use rises so a node goes over, is confirmed a hotspot
(three cycles), and the pod is evicted through the real Eviction API. Every panel target
of ``dashboards/descheduler.json`` (the file that ships) is then run as Grafana would run it: a range
query over the scraped window (an instant query for instant targets), with the dashboard's variables
set to "All". The panels are also rendered without Grafana (``dashboards/preview.py``) in a real headless
Chromium, and the screenshot is kept (``UPDATE_DOCS=1`` also writes it to ``docs/dashboard.png``).
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dashboards import generate, preview
from descheduler.kube.api import KubeApi
from descheduler.kube.connection import connect
from tests.browser import chromium
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.loop import lease_namespace, loop_config
from tests.controlplane.placed import Placed, module_namespace, placed_serving_usage
from tests.support.service import (
    NAMESPACE,
    Ports,
    Prometheus,
    UsageBackend,
    _scraping_prometheus,
    run_descheduler,
    write_config,
)

pytestmark = pytest.mark.controlplane

REPO = Path(__file__).resolve().parents[2]
RATE_INTERVAL = "4s"
"""What Grafana's ``$__rate_interval`` becomes for a 1 s scrape interval (at least four scrapes)."""


def lease_holder(plane: ControlPlane, name: str) -> str:
    found = plane.kubectl("get", "lease", name, "-n", NAMESPACE, "-o", "json", check=False)
    return str(json.loads(found.stdout)["spec"].get("holderIdentity", "")) if found.returncode == 0 else ""


def _query(prometheus: Prometheus, path: str, params: dict[str, str]) -> list[dict[str, Any]]:
    url = f"{prometheus.url}/api/v1/{path}?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def substitute(expr: str, range_seconds: int) -> str:
    """The dashboard's variables as Grafana sends them with "All" selected and a scrape every second."""
    for name, value in (
        ("$__rate_interval", RATE_INTERVAL),
        ("$__range", f"{range_seconds}s"),
        ("$job", ".+"),
        ("$node", ".+"),
    ):
        expr = expr.replace(name, value)
    assert "$" not in expr, f"unsubstituted variable in {expr}"
    return expr


@dataclass
class Target:
    panel_id: int
    panel: str
    expr: str
    legend: str
    instant: bool
    result: list[dict[str, Any]]


EVERY_DAY = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]
CONTROLS = {
    "evictionWindows": [
        {"days": EVERY_DAY, "start": "00:00", "end": "12:00"},
        {"days": EVERY_DAY, "start": "12:00", "end": "00:00"},
    ],
    "churnBudget": {"maxEvictions": 10, "maxEvictionsPerNamespace": 5, "period": "1h"},
}
"""Windows that together are always open, and a budget: so the control panels have series to show."""


@dataclass
class Scraped:
    targets: list[Target]
    window: tuple[float, float]
    scrapes_of_service: int
    placed: Placed


@pytest.fixture(scope="module")
def scraped(
    control_plane: ControlPlane, usage_backend: UsageBackend, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Scraped]:
    workdir = tmp_path_factory.mktemp("dashboard")
    lease_namespace(control_plane)
    api = connect(str(control_plane.kubeconfig), qps=1000, burst=1000)
    try:
        with module_namespace(control_plane, "dashboard") as ns:
            yield _scrape(control_plane, api, ns, usage_backend, workdir)
    finally:
        api.close()


def _scrape(plane: ControlPlane, api: KubeApi, ns: str, backend: UsageBackend, workdir: Path) -> Scraped:
    """Run the service and a Prometheus scraping it through one hotspot and its eviction; run every
    dashboard target over that window."""
    dashboard = json.loads(generate.DASHBOARD_JSON.read_text())
    ports = Ports.free()
    # Started first, this Prometheus is past its 5 s target tick by the time the cluster is placed and
    # its usage served. Scrapes before the service is up count as failed (up=0).
    with (
        _scraping_prometheus(f"127.0.0.1:{ports.metrics}", workdir / "prometheus", scrapes=0) as prometheus,
        placed_serving_usage(plane, api, ns, backend, "checkout") as placed,
    ):
        lease = f"dashboard-{ns}"
        doc = loop_config(
            backend.url, ports, ns, dry_run=False, lease_name=lease, consecutive_abnormalities=3
        )
        doc["profiles"][0]["pluginConfig"][1]["args"].update(CONTROLS)
        config = write_config(workdir / "config.yaml", doc)
        with run_descheduler(config, plane.kubeconfig, ports, workdir) as proc:
            proc.wait_ready(timeout=30)
            start = time.time()
            proc.wait_for(lambda: lease_holder(plane, lease) == proc.identity, timeout=15, what="the lease")
            proc.wait_for(
                lambda: prometheus.query("count(descheduler_node_usage_ratio)"), timeout=20,
                what="Prometheus to scrape the per-node gauges",
            )  # fmt: skip
            placed.set_hot_pod_cores(2.8)  # 0.6 -> 3.2 of 4 cores
            proc.wait_for(
                lambda: [e for e in proc.events("eviction") if e["result"] == "evicted"],
                timeout=40, what="an eviction",
            )  # fmt: skip
            proc.wait_for(
                lambda: prometheus.query("count_over_time(descheduler_pods_evicted_total[30s]) >= 6"),
                timeout=15, what="Prometheus to scrape the eviction counter six times",
            )  # fmt: skip
            end = time.time()
            targets = _run_targets(dashboard, prometheus, start, end)
            up = prometheus.query('sum_over_time(up{job="simulated"}[5m])')  # successful scrapes
            scrapes = int(float(up[0]["value"][1])) if up else 0
            proc.terminate()
    return Scraped(targets, (start, end), scrapes, placed)


def _run_targets(dashboard: dict[str, Any], prometheus: Prometheus, start: float, end: float) -> list[Target]:
    """Every panel target as Grafana runs it over ``start``..``end``."""
    range_seconds = int(end - start) + 1
    targets: list[Target] = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            expr = substitute(target["expr"], range_seconds)
            if target.get("instant"):
                result = _query(prometheus, "query", {"query": expr, "time": f"{end:.3f}"})
            else:
                # Bars show the increase over one rate interval: one bar per interval, as Grafana draws
                # them when the step is the interval.
                bars = panel.get("fieldConfig", {}).get("defaults", {}).get("custom", {})
                step = RATE_INTERVAL[:-1] if bars.get("drawStyle") == "bars" else "1"
                window = {"start": f"{start:.3f}", "end": f"{end:.3f}", "step": step}
                result = _query(prometheus, "query_range", {"query": expr, **window})
            targets.append(
                Target(panel["id"], panel["title"], expr, target.get("legendFormat", ""),
                       bool(target.get("instant")), result)
            )  # fmt: skip
    return targets


def test_prometheus_scraped_the_running_service(scraped: Scraped) -> None:
    assert scraped.scrapes_of_service >= 5
    assert len(scraped.targets) >= 20


def test_every_panel_query_returns_series(scraped: Scraped) -> None:
    empty = [f"{t.panel}: {t.expr}" for t in scraped.targets if not t.result]
    assert empty == []


def _values(target: Target) -> list[float]:
    if target.instant:
        return [float(s["value"][1]) for s in target.result]
    return [float(v) for s in target.result for _, v in s["values"]]


def _by_title(scraped: Scraped, title: str) -> list[Target]:
    found = [t for t in scraped.targets if t.panel == title]
    assert found, f"no panel titled {title!r}"
    return found


def test_the_usage_panel_shows_the_hot_node_above_its_high_threshold(scraped: Scraped) -> None:
    usage, low, high = _by_title(scraped, "CPU usage against thresholds")
    hot = [s for s in usage.result if s["metric"]["node"] == scraped.placed.hot]
    assert hot and max(float(v) for _, v in hot[0]["values"]) > 0.7
    assert set(_values(low)) == {0.4} and set(_values(high)) == {0.7}


def test_the_state_panels_show_a_leader_running_live(scraped: Scraped) -> None:
    (leader,) = _by_title(scraped, "Leader")
    (mode,) = _by_title(scraped, "Mode")
    assert _values(leader)[-1] == 1.0 and set(_values(mode)) == {0.0}


def test_the_class_and_anomaly_panels_saw_the_hotspot_being_confirmed(scraped: Scraped) -> None:
    (classes,) = _by_title(scraped, "Node classes over time")
    hot = [s for s in classes.result if s["metric"]["node"] == scraped.placed.hot]
    seen = {float(v) for _, v in hot[0]["values"]}
    assert {1.0, 3.0} <= seen, f"low and over expected among {seen}"
    counts, needed = _by_title(scraped, "Anomaly counts")
    assert max(_values(counts)) >= 2 and set(_values(needed)) == {3.0}


def test_the_workload_panel_names_the_evicted_pods_deployment(scraped: Scraped) -> None:
    (workloads,) = _by_title(scraped, "Evictions by workload")
    labels = [{k: s["metric"].get(k) for k in ("namespace", "workload_kind", "workload", "result")}
              for s in workloads.result]  # fmt: skip
    assert labels == [
        {"namespace": scraped.placed.namespace, "workload_kind": "Deployment", "workload": "checkout",
         "result": "evicted"}
    ]  # fmt: skip
    assert _values(workloads) == [1.0], "the first eviction of a workload counts (a counter born at 1)"


def test_the_eviction_panels_count_the_one_eviction(scraped: Scraped) -> None:
    (in_range,) = _by_title(scraped, "Evictions in range")
    assert [(s["metric"]["result"], float(s["value"][1])) for s in in_range.result] == [("evicted", 1.0)]
    (by_node,) = _by_title(scraped, "Evictions by node")
    assert {s["metric"]["node"] for s in by_node.result} == {scraped.placed.hot}
    assert sum(_values(by_node)) == 1.0, "the bars add up to the one eviction"


def test_the_skips_panel_gives_the_reasons_pods_on_the_hotspot_stayed(scraped: Scraped) -> None:
    (skips,) = _by_title(scraped, "Skipped pods by reason")
    reasons = {s["metric"]["reason"] for s in skips.result}
    assert "filtered-daemonset" in reasons, reasons


def test_the_panels_render_without_grafana_in_a_real_browser(
    scraped: Scraped, tmp_path_factory: pytest.TempPathFactory
) -> None:
    dashboard = json.loads(generate.DASHBOARD_JSON.read_text())
    results: dict[int, list[tuple[str, preview.Series]]] = {}
    for target in scraped.targets:
        for series in target.result:
            points = (
                [(float(series["value"][0]), float(series["value"][1]))]
                if target.instant
                else [(float(t), float(v)) for t, v in series["values"]]
            )
            name = preview.legend(target.legend, series["metric"])
            results.setdefault(target.panel_id, []).append((name, preview.Series(series["metric"], points)))
    page = tmp_path_factory.mktemp("dashboard-preview") / "dashboard.html"
    page.write_text(preview.render(dashboard, results, scraped.window))
    with chromium() as browser:
        browser.open(page.as_uri(), width=1260, height=900)
        assert browser.problems.all() == []
        drawn = browser.evaluate("document.querySelectorAll('.panel[data-panel] svg path').length")
        titles = browser.evaluate("[...document.querySelectorAll('.panel h2')].map(h => h.textContent)")
        shot = browser.screenshot(page.with_suffix(".png"))
    assert drawn >= 15
    assert "Evictions by workload" in titles and "Node classes over time" in titles
    assert shot.stat().st_size > 20_000
    if os.environ.get("UPDATE_DOCS") == "1":
        (REPO / "docs").mkdir(exist_ok=True)
        (REPO / "docs" / "dashboard.png").write_bytes(shot.read_bytes())


def test_the_control_panels_show_the_window_open_and_the_budget_the_eviction_spent(scraped: Scraped) -> None:
    (window,) = _by_title(scraped, "Eviction window")
    assert set(_values(window)) == {1.0}
    (opens,) = _by_title(scraped, "Next window opens")
    start, end = scraped.window
    assert all(start * 1000 < v <= (end + 12 * 3600) * 1000 for v in _values(opens))
    cluster, namespaces = _by_title(scraped, "Churn budget left")
    assert _values(cluster)[0] == 10.0 and _values(cluster)[-1] == 9.0
    assert [(s["metric"]["namespace"], float(s["values"][-1][1])) for s in namespaces.result] == [
        (scraped.placed.namespace, 4.0)
    ]
