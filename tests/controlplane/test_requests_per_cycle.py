"""What a cycle costs the API server, counted by the server itself: the audit log of the shipped
ServiceAccount's requests (``conftest.AUDITED``), on a real control plane with 40 kwok nodes.

An idle cycle (nothing hot: nothing to evict, taint or record) may send at most ``IDLE_BOUND`` request
besides the Lease's renewals (those follow ``retryPeriod``, not the cycles), watch re-opens included: the
watches run ``watchTimeout`` (10 min) and are refreshed only before a cycle acts. (With 10 s watches, 8
resources re-opened 1.6 times per 2 s cycle.) An evicting cycle sends one eviction per pod moved; its
other requests (the journal, the Event, the reads the eviction rests on) are printed.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from benchmarks.audit import AuditEvent, parse_audit, request_kind
from descheduler.kube.api import KubeApi
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.conftest import AUDITED
from tests.controlplane.loop import install_manifests, lease_namespace, loop_config
from tests.controlplane.usage import ClusterUsage
from tests.support import service
from tests.support.service import NAMESPACE

pytestmark = pytest.mark.controlplane

NODES = 40
PODS = 20
CYCLES = 10
IDLE_BOUND = 1.0
VERIFY_READS = (
    "get replicasets",
    "get deployments",
    "list replicasets",
    "list pods",
    "get nodes",
    "list namespaces",
)
"""Every kind of request the reads right before an eviction may make (``kube/verify.py``)."""
USER = AUDITED["rules"][0]["users"][0]  # type: ignore[index]


def _ours(plane: ControlPlane, since: float, until: float) -> list[AuditEvent]:
    assert plane.audit_log is not None, "the session's control plane keeps an audit log"
    with plane.audit_log.open() as lines:
        return [e for e in parse_audit(lines) if e.user == USER and since <= e.received < until]


def test_an_idle_cycle_sends_at_most_one_request_besides_lease_renewals(
    control_plane: ControlPlane,
    admin_api: KubeApi,
    usage_backend: service.UsageBackend,
    namespace: str,
    tmp_path: Path,
) -> None:
    plane = control_plane
    lease_namespace(plane)
    install_manifests(plane)
    identity = plane.token_kubeconfig(NAMESPACE, "load-aware-descheduler", tmp_path / "identity")
    nodes = [f"{namespace}-n{i:02d}" for i in range(NODES)]
    plane.add_nodes(namespace, nodes)
    plane.apply(
        [
            objects.deployment("calm", namespace, replicas=PODS, cpu="100m"),
            objects.pdb("calm", "calm", max_unavailable=1),
        ],
        namespace=namespace,
    )
    plane.wait_for(
        "every calm pod Running",
        lambda: len(plane.running_pods(namespace, "app=calm")) == PODS,
        timeout_s=90,
    )
    usage = ClusterUsage(admin_api, namespace, dict.fromkeys(nodes, 4), {"calm": 0.1})
    ports = service.Ports.free()
    doc = loop_config(usage_backend.url, ports, namespace, dry_run=False, interval="2s")
    config = service.write_config(tmp_path / "config.yaml", doc)
    with usage.following():
        usage_backend.install(usage.model, full_window=True, timeout=30)
        with service.run_descheduler(config, identity, ports, tmp_path) as proc:
            proc.wait_ready(timeout=60)
            cycles = lambda: len(proc.events("cycle_summary"))  # noqa: E731
            proc.wait_for(lambda: cycles() >= 3, timeout=60, what="three cycles")
            first, since = cycles(), time.time()
            proc.wait_for(lambda: cycles() >= first + CYCLES, timeout=120, what=f"{CYCLES} more cycles")
            last, until = cycles(), time.time()
            summaries = proc.events("cycle_summary")[first:last]
            proc.terminate()
    time.sleep(1)  # the audit log's buffered writer
    ran = last - first
    audited = _ours(plane, since, until)
    by_kind = Counter(request_kind(e) for e in audited)
    per_cycle = {k: round(v / ran, 2) for k, v in sorted(by_kind.items())}
    print(f"\nrequests per idle cycle at {NODES} nodes over {ran} cycles: {per_cycle}")
    assert all(not s.get("evictions") for s in summaries), "the cycles were idle"
    rest = sum(v for k, v in by_kind.items() if k != "lease")
    assert rest / ran <= IDLE_BOUND, per_cycle


def _evicting_run(
    plane: ControlPlane,
    admin_api: KubeApi,
    usage_backend: service.UsageBackend,
    namespace: str,
    tmp_path: Path,
    **settings: Any,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[AuditEvent]]:
    """One hot node among 40 (6 pods of 0.6 cores on 4) until an eviction and a few cycles more: the cycle
    summaries, every log record, and our requests during the cycles that evicted."""
    lease_namespace(plane)
    install_manifests(plane)
    identity = plane.token_kubeconfig(NAMESPACE, "load-aware-descheduler", tmp_path / "identity")
    hot, cool = f"{namespace}-hot", [f"{namespace}-c{i:02d}" for i in range(NODES - 1)]
    plane.add_nodes(namespace, [hot])
    plane.add_nodes(namespace, cool, unschedulable=True)
    plane.apply(
        [
            objects.deployment("busy", namespace, replicas=6, cpu="250m"),
            objects.pdb("busy", "busy", max_unavailable=1),
        ],
        namespace=namespace,
    )
    plane.wait_for(
        "every busy pod Running on the hot node",
        lambda: (
            len([p for p in plane.running_pods(namespace, "app=busy") if p["spec"]["nodeName"] == hot]) == 6
        ),
        timeout_s=90,
    )
    for name in cool:  # one PATCH each through our client: a kubectl process a node took ~5.7 s for 39
        admin_api.request(
            "PATCH", f"/api/v1/nodes/{name}", body={"spec": {"unschedulable": False}},
            content_type="application/merge-patch+json",
        )  # fmt: skip
    usage = ClusterUsage(admin_api, namespace, dict.fromkeys([hot, *cool], 4), {"busy": 0.6})
    ports = service.Ports.free()
    doc = loop_config(usage_backend.url, ports, namespace, dry_run=False, interval="2s")
    doc.update(settings)
    config = service.write_config(tmp_path / "config.yaml", doc)
    with usage.following():
        usage_backend.install(usage.model, full_window=True, timeout=30)
        with service.run_descheduler(config, identity, ports, tmp_path) as proc:
            proc.wait_for(lambda: proc.events("eviction"), timeout=90, what="an eviction")
            proc.wait_for(
                lambda: len(proc.events("cycle_summary")) >= 6,
                timeout=60,
                what="cycles",
            )
            time.sleep(6)
            summaries = proc.events("cycle_summary")
            records = proc.records()
            proc.terminate()
    time.sleep(1)
    spans = [
        (
            datetime.fromisoformat(s["timestamp"]).timestamp() - s["duration_seconds"] - 0.05,
            datetime.fromisoformat(s["timestamp"]).timestamp() + 0.05,
        )
        for s in summaries
        if s.get("evictions")
    ]
    return summaries, records, [e for since, until in spans for e in _ours(plane, since, until)]


def test_an_evicting_cycle_sends_one_eviction_and_its_reads_per_pod_moved(
    control_plane: ControlPlane,
    admin_api: KubeApi,
    usage_backend: service.UsageBackend,
    namespace: str,
    tmp_path: Path,
) -> None:
    """The cycles that evict, request by request (watches fresher than ``maxStaleness``: no refresh)."""
    summaries, _, events = _evicting_run(control_plane, admin_api, usage_backend, namespace, tmp_path)
    evicting = [s for s in summaries if s.get("evictions")]
    by_kind = Counter(request_kind(e) for e in events if request_kind(e) not in ("lease", "watch"))
    moved = sum(sum(s["evictions"].values()) for s in evicting)
    per_cycle = {k: round(v / len(evicting), 2) for k, v in sorted(by_kind.items())}
    print(
        f"\nrequests per evicting cycle at {NODES} nodes ({len(evicting)} cycles, {moved} moved): {per_cycle}"
    )
    assert moved and by_kind["create pods/eviction"] == moved, by_kind
    reads = sum(by_kind[k] for k in VERIFY_READS)
    assert by_kind["get replicasets"] == 0 and reads == 5 * moved, (
        "a Deployment's pod: Deployment, its ReplicaSets, its pods, node, namespace (the cache's chain "
        f"chooses the reads): {by_kind}"
    )


def test_a_cycle_about_to_evict_on_a_quiet_cache_reopens_its_watches_first_and_only_then(
    control_plane: ControlPlane,
    admin_api: KubeApi,
    usage_backend: service.UsageBackend,
    namespace: str,
    tmp_path: Path,
) -> None:
    """``maxStaleness`` 1 s against watches of 10 min: every resource is quiet by the time the hotspot is
    confirmed, so the evicting cycles re-open the quiet watches (the real server answers) before they
    evict; the cycles that only count the anomaly refresh nothing."""
    summaries, records, events = _evicting_run(
        control_plane, admin_api, usage_backend, namespace, tmp_path, watchCache={"maxStaleness": "1s"}
    )
    refreshed = {r["cycle"] for r in records if r.get("event") == "cache_refresh"}
    evicted = {r["cycle"] for r in records if r.get("event") == "eviction"}
    acting = evicted | {r["cycle"] for r in records if r.get("event") == "eviction_not_verified"}
    reopened = Counter(e.resource for e in events if e.verb == "watch")
    print(
        f"\nwatches re-opened in the evicting cycles: {dict(reopened)}; refreshed cycles {sorted(refreshed)}"
    )
    assert evicted and evicted <= refreshed, (evicted, refreshed)
    assert refreshed <= acting, "a cycle that did not act refreshed the cache"
    assert reopened["pods"] >= 1 and len(summaries) >= 6
    assert not [r for r in records if r.get("event") == "cycle_skipped"], "the server answered every refresh"
