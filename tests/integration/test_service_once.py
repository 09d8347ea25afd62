"""``descheduler once`` for live use (a CronJob): one cycle that evicts, writes its events before exiting,
and respects leader election: it takes the Lease for its cycle and gives it back, and does nothing while
another replica holds it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.integration.service_fixtures import Cluster, evictions, is_dry_run, kubeconfig_of, live_cluster
from tests.support.service import (
    LEASE,
    NAMESPACE,
    REPO,
    Ports,
    UsageBackend,
    descheduler_command,
    service_config,
    subprocess_env,
    write_config,
)

pytestmark = pytest.mark.integration


def build(cluster: Cluster) -> None:
    cluster.node("once-hot")
    cluster.node("once-cool", cpu=8)
    cluster.deployment(
        "batch",
        {"batch-hot": ("once-hot", 2.8), "batch-2": ("once-cool", 0.2), "batch-3": ("once-cool", 0.2)},
    )


@pytest.fixture(scope="module")
def cluster(usage_backend: UsageBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with live_cluster(tmp_path_factory.mktemp("once"), usage_backend, build, full_window=True) as made:
        yield made


def _once(
    cluster: Cluster,
    backend: UsageBackend,
    workdir: Path,
    *extra: str,
    abnormalities: int = 1,
    migration: dict[str, Any] | None = None,
) -> subprocess.CompletedProcess[str]:
    """One ``once`` process; consecutiveAbnormalities 1 by default, as a single cycle can only act on a
    node over its threshold at its first look. ``migration`` goes into the evictor's args."""
    doc = service_config(
        prometheus_url=backend.url, ports=Ports.free(), consecutive_abnormalities=abnormalities
    )
    doc["profiles"][0]["pluginConfig"][1]["args"].update(migration or {})
    config = write_config(workdir / "once.yaml", doc)
    kubeconfig = str(kubeconfig_of(cluster.server))
    return subprocess.run(
        descheduler_command(
            "once", "--config", str(config), "--kubeconfig", kubeconfig, "--output", "text", *extra
        ),
        cwd=REPO,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_once_does_nothing_while_another_replica_holds_the_lease(
    cluster: Cluster, usage_backend: UsageBackend, tmp_path: Path
) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    cluster.server.create(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": LEASE, "namespace": NAMESPACE},
            "spec": {"holderIdentity": "replica-elsewhere", "leaseDurationSeconds": 30, "renewTime": now},
        }
    )
    before = len(evictions(cluster.server))
    try:
        result = _once(cluster, usage_backend, tmp_path)
    finally:
        cluster.server.delete("leases", NAMESPACE, LEASE, group="coordination.k8s.io")
    assert result.returncode == 1, result.stderr
    assert "the Lease is held by replica-elsewhere" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(evictions(cluster.server)) == before


def test_once_outside_every_eviction_window_plans_reports_and_evicts_nothing(
    cluster: Cluster, usage_backend: UsageBackend, tmp_path: Path
) -> None:
    """A window that opened an hour ago and closed a minute later (UTC): the cycle is planned in full,
    the planned eviction is reported outside-window with the next opening, and nothing is sent."""
    opened = datetime.now(UTC) - timedelta(hours=1)
    window = {
        "days": [opened.strftime("%a")],
        "start": opened.strftime("%H:%M"),
        "end": (opened + timedelta(minutes=1)).strftime("%H:%M"),
    }
    next_open = (opened.replace(second=0, microsecond=0) + timedelta(days=7)).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = _once(cluster, usage_backend, tmp_path, migration={"evictionWindows": [window]})
    assert result.returncode == 0, result.stderr
    assert (
        f"default/batch-hot on once-hot: outside-window (outside evictionWindows: the next window "
        f"({window['days'][0]} {window['start']}-{window['end']} UTC) opens at {next_open})"
    ) in result.stdout
    assert evictions(cluster.server) == []
    assert cluster.server.list("events", "default") == []


def test_once_takes_the_lease_evicts_writes_the_event_and_gives_the_lease_back(
    cluster: Cluster, usage_backend: UsageBackend, tmp_path: Path
) -> None:
    result = _once(cluster, usage_backend, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "default/batch-hot on once-hot: evicted" in result.stdout
    assert [(r.name, r.status, is_dry_run(r)) for r in evictions(cluster.server)] == [
        ("batch-hot", 201, False)
    ]
    events = [(e["reason"], e["involvedObject"]["name"]) for e in cluster.server.list("events", "default")]
    assert events == [("Descheduled", "batch-hot")], "the event is written before the process exits"
    lease = cluster.server.get("leases", NAMESPACE, LEASE, group="coordination.k8s.io")
    assert lease is not None and lease["spec"]["holderIdentity"] == ""


def test_once_warns_that_it_cannot_confirm_a_hotspot_needing_several_cycles(
    cluster: Cluster, usage_backend: UsageBackend, tmp_path: Path
) -> None:
    before = len(evictions(cluster.server))
    result = _once(cluster, usage_backend, tmp_path, "--dry-run", abnormalities=3)
    assert result.returncode == 0, result.stderr
    assert '"event": "once_cannot_confirm_hotspots"' in result.stderr
    assert '"consecutive_abnormalities": 3' in result.stderr
    assert "Eviction calls:" not in result.stdout
    assert len(evictions(cluster.server)) == before
