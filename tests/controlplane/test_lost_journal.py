"""A deleted migration journal on the real control plane: ``descheduler run`` evicts one pod (its record in
the journal ConfigMap, its ``Descheduled`` Event on the pod) and so spends its churn budget (one eviction an
hour), stops, the ConfigMap is deleted, and a new process starts. It must tell the loss from a first start
(the marker the first write put on the Lease), say so (a ``MigrationJournalLost`` Warning Event, the
``journal_lost`` log line and the state_rebuilds metric), rebuild the eviction from its Event, send nothing
during its quiet period, and after it still nothing: the rebuilt budget is spent, although the node is
still hot. Without the journal the second process would evict in its first cycle (``test_restart.py``).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import yaml

from descheduler.kube.api import KubeApi
from descheduler.kube.errors import ApiStatusError
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.test_restart import config, evicted, hot, stamp
from tests.support.service import Ports, UsageBackend, http_get, run_descheduler, write_config

pytestmark = pytest.mark.controlplane

LEASE_NAMESPACE = "load-aware-descheduler"
QUIET = 15.0
"""The objectLimiters window here, and so the quiet period after a lost journal: half of ``test_restart``'s
30 s, still several times what a restart takes, so the test waits out less."""


def lost_journal_config(backend: UsageBackend, ports: Ports, namespace: str, workdir: Path) -> Path:
    """``test_restart``'s configuration with a churn budget of one eviction an hour, without the ping-pong
    guard: the quiet period is then the objectLimiters window (``QUIET``), not the guard's longest
    back-off."""
    path = config(backend, ports, namespace, workdir, "config")
    doc = yaml.safe_load(path.read_text())
    doc["profiles"][0]["pluginConfig"][1]["args"]["objectLimiters"]["workload"]["duration"] = f"{QUIET:g}s"
    doc["profiles"][0]["pluginConfig"][0]["args"]["pingPongGuard"] = {"enabled": False}
    doc["profiles"][0]["pluginConfig"][1]["args"]["churnBudget"] = {"maxEvictions": 1, "period": "1h"}
    return write_config(path, doc)


def metric(text: str, name: str, labels: str) -> float | None:
    found = re.search(rf"^{name}\{{{labels}\}} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else None


def test_a_deleted_journal_is_reported_and_its_rebuilt_budget_holds_evictions_back(
    control_plane: ControlPlane,
    namespace: str,
    admin_api: KubeApi,
    usage_backend: UsageBackend,
    tmp_path: Path,
) -> None:
    lease = f"lease-{namespace}"
    journal = f"/api/v1/namespaces/{LEASE_NAMESPACE}/configmaps/{lease}-migrations"
    with hot(control_plane, admin_api, namespace, usage_backend):
        kubeconfig = control_plane.kubeconfig
        ports = Ports.free()
        cfg = lost_journal_config(usage_backend, ports, namespace, tmp_path)
        with run_descheduler(cfg, kubeconfig, ports, tmp_path, "first") as first:
            first.wait_ready(timeout=30)
            first.wait_for(lambda: evicted(first), timeout=60, what="the first eviction", interval=0.01)
            first.terminate()  # a clean stop: its Events are written
        assert len(evicted(first)) == 1, "the budget allowed one"
        assert admin_api.get(journal)["data"], "the first run journaled its eviction"
        admin_api.request("DELETE", journal)
        with pytest.raises(ApiStatusError):
            admin_api.get(journal)
        with run_descheduler(cfg, kubeconfig, ports, tmp_path, "second") as second:
            second.wait_ready(timeout=30)
            second.wait_for(
                lambda: second.events("journal_lost"), timeout=30, what="the lost journal reported"
            )
            warnings = second.wait_for(
                lambda: [
                    e
                    for e in admin_api.get(f"/api/v1/namespaces/{LEASE_NAMESPACE}/events")["items"]
                    if e.get("reason") == "MigrationJournalLost"
                    and e["involvedObject"]["name"] == f"{lease}-migrations"
                    and e["type"] == "Warning"
                ],
                timeout=15,
                what="the MigrationJournalLost Warning Event",
            )
            # Past the quiet period (a start and the takeover that follows may each find the journal
            # lost: the last one counts), with cycles that see the node still hot.
            time.sleep(3)
            lost = second.events("journal_lost")[-1]
            time.sleep(max(0.0, stamp(lost) + lost["quiet_seconds"] + 5 - time.time()))
            _, metrics = http_get(f"http://127.0.0.1:{ports.metrics}/metrics")
            held = [r for r in second.events("cycle_summary") if r.get("hotspots")]
            late = [r for r in held if stamp(r) > stamp(lost) + lost["quiet_seconds"]]
            second.terminate()
    print(
        f"\nlost journal on the real control plane: reported, {lost['rebuilt_from_events']} eviction(s) "
        f"rebuilt from Events, quiet {lost['quiet_seconds']:.0f}s, {len(held)} cycles with a hotspot and "
        f"no eviction ({len(late)} after the quiet period)"
    )
    assert lost["rebuilt_from_events"] >= 1, "the first run's eviction, rebuilt from its Event"
    assert lost["quiet_seconds"] >= QUIET - 2
    assert warnings
    assert (metric(metrics, "descheduler_state_rebuilds_total", 'reason="lost",result="fallback"') or 0) >= 1
    assert evicted(second) == [], "nothing during the quiet period, nor after: the rebuilt budget is spent"
    assert late, "the node stayed hot after the quiet period: only the rebuilt budget held evictions back"
    assert metric(metrics, "descheduler_churn_budget_remaining", 'namespace=""') == 0.0
