"""``once --dry-run --output html`` against the real control plane, with usage from a real Prometheus, in
a real headless Chromium: the audit loads with no console error, no uncaught exception and no blocked or
failed load, and shows the hotspot, the would-be eviction and why the other pods stayed. The screenshot
is kept in the test's tmp dir. (The ``simulate`` report is checked in
``tests/integration/test_report_browser.py``: it needs no cluster.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from descheduler.kube.api import KubeApi
from tests.browser import chromium
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.loop import loop_config
from tests.controlplane.placed import placed_serving_usage
from tests.integration.test_report_browser import ARROWS, NODES, SKIP_GROUPS
from tests.support.service import Ports, UsageBackend, run_command, write_config

pytestmark = pytest.mark.controlplane

SUMMARY_CODES = """[...document.querySelectorAll(
  'section.cycle[data-cycle="%d"] table.summaries tbody tr')].map(r => r.cells[2].textContent)"""
"""The skip codes of a cycle's summary rows (the pods an audit stands for by one line)."""


def test_once_dry_run_writes_an_html_audit_that_shows_the_would_be_eviction(
    control_plane: ControlPlane,
    admin_api: KubeApi,
    usage_backend: UsageBackend,
    namespace: str,
    tmp_path: Path,
) -> None:
    with placed_serving_usage(
        control_plane, admin_api, namespace, usage_backend, "api", hot_pod_cores=2.8
    ) as placed:  # 0.3 + 2.8 + 0.1 of 4 cores on the hot node
        doc = loop_config(
            usage_backend.url, Ports.free(), namespace, dry_run=True, consecutive_abnormalities=1
        )
        config = write_config(tmp_path / "once.yaml", doc)
        proc = run_command(
            "once", "--config", str(config), "--kubeconfig", str(control_plane.kubeconfig), "--dry-run",
            "--output", "html", timeout=60,
        )  # fmt: skip
        pods = {p["metadata"]["name"] for p in control_plane.running_pods(namespace)}
    assert proc.returncode == 0, proc.stderr
    assert placed.hot_pod in pods, "a dry run evicts nothing"
    report = tmp_path / "once.html"
    report.write_text(proc.stdout)
    with chromium() as page:
        page.open(report.as_uri(), width=1300, height=700)
        assert page.problems.all() == []
        assert page.evaluate("document.title") == "descheduler once: dry-run audit"
        shown = sorted(page.evaluate(NODES % 1))
        assert shown == sorted([[placed.hot, "hotspot"]] + [[n, "low"] for n in placed.cool])
        ((pod, source, destination),) = page.evaluate(ARROWS % 1)
        assert (pod, source) == (f"{namespace}/{placed.hot_pod}", placed.hot) and destination in placed.cool
        results = page.evaluate(
            "[...document.querySelectorAll('table.evictions tbody tr')].map(r => r.cells[6].textContent)"
        )
        assert results == ["would-evict"]
        codes = set(page.evaluate(SKIP_GROUPS % 1))
        # A hotspot cured by its first move counts its filtered pods per reason (the summaries table).
        codes |= set(page.evaluate(SUMMARY_CODES % 1))
        assert "filtered-daemonset" in codes, codes
        page.screenshot(tmp_path / "once.png")
