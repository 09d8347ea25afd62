"""``descheduler once`` for live use (a CronJob), on the real API server: one cycle that evicts through the
Eviction API, writes its event before exiting, and respects leader election: it takes the Lease for its
cycle and gives it back, and does nothing while another replica holds it.

Each test's process runs as an audited identity, so the server's own record says what it evicted."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from descheduler.kube.connection import connect
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.loop import fresh_namespace, lease_namespace
from tests.controlplane.move43a_fixtures import AuditedIdentity, Request, placed_replicaset
from tests.controlplane.usage import ClusterUsage
from tests.support.service import (
    NAMESPACE,
    Ports,
    UsageBackend,
    run_command,
    service_config,
    write_config,
)

pytestmark = pytest.mark.controlplane

REPORTER = "load-aware-descheduler"


@dataclass(frozen=True)
class OnceCluster:
    plane: ControlPlane
    namespace: str
    lease: str

    @property
    def hot(self) -> str:
        return f"{self.namespace}-hot"

    def our_events(self) -> list[tuple[str, str]]:
        """The Events we reported in the namespace (the controllers and the scheduler write their own)."""
        items = self.plane.get_json("events", "-n", self.namespace)["items"]
        return [
            (e["reason"], e["involvedObject"]["name"])
            for e in items
            if REPORTER in (e.get("reportingComponent"), (e.get("source") or {}).get("component"))
        ]

    def lease_spec(self) -> dict[str, Any]:
        return dict(self.plane.get_json("lease", self.lease, "-n", NAMESPACE)["spec"])


@pytest.fixture(scope="module")
def cluster(control_plane: ControlPlane, usage_backend: UsageBackend) -> Iterator[OnceCluster]:
    """A hot node whose one pod of ``batch`` uses 2.8 cores, and a cool node with the other two."""
    namespace = fresh_namespace(control_plane, f"once-{time.monotonic_ns() % 100000}")
    lease_namespace(control_plane)
    hot, cool = f"{namespace}-hot", f"{namespace}-cool"
    control_plane.add_nodes(namespace, [hot])
    control_plane.apply([objects.node(cool, namespace, cpu="8")])
    control_plane.add_nodes(namespace, [cool])
    placed_replicaset(control_plane, namespace, "batch", {"batch-hot": hot, "batch-2": cool, "batch-3": cool})
    api = connect(str(control_plane.kubeconfig), qps=1000, burst=1000)
    usage = ClusterUsage(api, namespace, {hot: 4, cool: 8}, {"batch": 0.2})
    try:
        with usage.following():
            usage.model.set_pod_cores(namespace, "batch-hot", 2.8)
            usage_backend.install(usage.model, full_window=True, timeout=30)
            yield OnceCluster(control_plane, namespace, f"once-{namespace}")
    finally:
        api.close()
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        control_plane.kubectl("delete", "nodes", "-l", f"{objects.GROUP_LABEL}={namespace}", "--wait=false")


def _once(
    cluster: OnceCluster,
    backend: UsageBackend,
    identity: AuditedIdentity,
    workdir: Path,
    *extra: str,
    abnormalities: int = 1,
    migration: dict[str, Any] | None = None,
    lease: str = "",
    election: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """One ``once`` process over the test's nodes; consecutiveAbnormalities 1 by default, as a single cycle
    can only act on a node over its threshold at its first look. ``migration`` goes into the evictor's
    args; ``lease`` replaces the module's Lease, ``election`` updates the leader election settings."""
    doc = service_config(
        prometheus_url=backend.url,
        ports=Ports.free(),
        consecutive_abnormalities=abnormalities,
        lease_name=lease or cluster.lease,
        node_selector={"matchLabels": {objects.GROUP_LABEL: cluster.namespace}},
    )
    doc["profiles"][0]["pluginConfig"][1]["args"].update(migration or {})
    doc["leaderElection"].update(election or {})
    config = write_config(workdir / "once.yaml", doc)
    return run_command(
        "once", "--config", str(config), "--kubeconfig", str(identity.kubeconfig), "--output", "text",
        *extra, timeout=90,
    )  # fmt: skip


def test_once_does_nothing_while_another_replica_holds_the_lease(
    cluster: OnceCluster,
    usage_backend: UsageBackend,
    audited: Callable[[str], AuditedIdentity],
    tmp_path: Path,
) -> None:
    identity = audited("once-held")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": cluster.lease, "namespace": NAMESPACE},
        "spec": {"holderIdentity": "replica-elsewhere", "leaseDurationSeconds": 30, "renewTime": now},
    }
    cluster.plane.kubectl("create", "-f", "-", stdin=json.dumps(lease))
    try:
        result = _once(cluster, usage_backend, identity, tmp_path)
    finally:
        cluster.plane.kubectl("delete", "lease", cluster.lease, "-n", NAMESPACE)
    assert result.returncode == 1, result.stderr
    assert "the Lease is held by replica-elsewhere" in result.stderr
    assert "Traceback" not in result.stderr
    assert identity.evictions() == []


def test_once_outside_every_eviction_window_plans_reports_and_evicts_nothing(
    cluster: OnceCluster,
    usage_backend: UsageBackend,
    audited: Callable[[str], AuditedIdentity],
    tmp_path: Path,
) -> None:
    """A window that opened an hour ago and closed a minute later (UTC): the cycle is planned in full,
    the planned eviction is reported outside-window with the next opening, and nothing is sent."""
    identity = audited("once-window")
    opened = datetime.now(UTC) - timedelta(hours=1)
    window = {
        "days": [opened.strftime("%a")],
        "start": opened.strftime("%H:%M"),
        "end": (opened + timedelta(minutes=1)).strftime("%H:%M"),
    }
    next_open = (opened.replace(second=0, microsecond=0) + timedelta(days=7)).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = _once(cluster, usage_backend, identity, tmp_path, migration={"evictionWindows": [window]})
    assert result.returncode == 0, result.stderr
    assert (
        f"{cluster.namespace}/batch-hot on {cluster.hot}: outside-window (outside evictionWindows: the next "
        f"window ({window['days'][0]} {window['start']}-{window['end']} UTC) opens at {next_open})"
    ) in result.stdout
    assert identity.evictions() == []
    assert cluster.our_events() == []


def test_once_takes_the_lease_evicts_writes_the_event_and_gives_the_lease_back(
    cluster: OnceCluster,
    usage_backend: UsageBackend,
    audited: Callable[[str], AuditedIdentity],
    tmp_path: Path,
) -> None:
    """A first run on its Lease (no migration journal yet): creating the journal marks the Lease, a write
    the elector did not make. Giving the Lease back must survive that: it was sent with the elector's
    stale resourceVersion, refused (409 Conflict), and the Lease stayed held until it expired. Renewals
    10 s apart leave no renewal between the marking and the release, as in a short cycle."""
    identity = audited("once-live")
    lease = f"{cluster.lease}-first"
    slow_renewals = {"leaseDuration": "20s", "renewDeadline": "15s", "retryPeriod": "10s"}
    try:
        result = _once(cluster, usage_backend, identity, tmp_path, lease=lease, election=slow_renewals)
        spec = cluster.plane.get_json("lease", lease, "-n", NAMESPACE)["spec"]
    finally:
        cluster.plane.kubectl("delete", "lease", lease, "-n", NAMESPACE, "--ignore-not-found")
        cluster.plane.kubectl(
            "delete", "configmap", f"{lease}-migrations", "-n", NAMESPACE, "--ignore-not-found"
        )
    assert result.returncode == 0, result.stderr
    assert f"{cluster.namespace}/batch-hot on {cluster.hot}: evicted" in result.stdout
    requests = identity.flush()
    assert [(r.name, r.code, r.dry_run) for r in requests if r.is_eviction] == [("batch-hot", 201, False)]
    assert cluster.our_events() == [("Descheduled", "batch-hot")], "the event is written before the exit"
    assert spec.get("holderIdentity") == "", "the Lease is given back"
    assert "lease_release_failed" not in result.stderr
    releases = [r.code for r in requests if r.resource == "leases" and _releases(r)]
    assert releases and releases[-1] == 200, releases


def _releases(request: Request) -> bool:
    body = request.body if isinstance(request.body, dict) else {}
    return request.verb == "update" and (body.get("spec") or {}).get("holderIdentity") == ""


def test_once_warns_that_it_cannot_confirm_a_hotspot_needing_several_cycles(
    cluster: OnceCluster,
    usage_backend: UsageBackend,
    audited: Callable[[str], AuditedIdentity],
    tmp_path: Path,
) -> None:
    identity = audited("once-confirm")
    result = _once(cluster, usage_backend, identity, tmp_path, "--dry-run", abnormalities=3)
    assert result.returncode == 0, result.stderr
    assert '"event": "once_cannot_confirm_hotspots"' in result.stderr
    assert '"consecutive_abnormalities": 3' in result.stderr
    assert "Eviction calls:" not in result.stdout
    assert identity.evictions() == []
