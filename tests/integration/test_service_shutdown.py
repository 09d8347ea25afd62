"""SIGTERM while an eviction call is in flight: the call is let finish (the pod is evicted and its event
written), no further eviction or cycle starts, the Lease is released and the process exits 0."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.apiserver import Fault, RecordedRequest
from tests.integration.service_fixtures import Cluster, evictions, kubeconfig_of, live_cluster
from tests.support.service import (
    LEASE,
    NAMESPACE,
    Descheduler,
    Ports,
    UsageBackend,
    run_descheduler,
    service_config,
    write_config,
)

pytestmark = pytest.mark.integration

LATENCY = 1.2
"""How long the API server takes to answer the eviction: the window in which SIGTERM arrives."""


HOT_PODS = {"a-hot", "b-hot", "c-hot"}


def build(cluster: Cluster) -> None:
    cluster.node("stop-hot")
    cluster.node("stop-cool", cpu=8)
    # 0.3 + 1.0 + 3 x 0.8 = 3.7 of 4 cores: curing the node takes two evictions, so SIGTERM during the
    # first call leaves a second one planned that must not be attempted.
    cluster.daemon_pod("agent-stop", "stop-hot", 1.0)
    for app in ("a", "b", "c"):
        cluster.deployment(app, {f"{app}-hot": ("stop-hot", 0.8), f"{app}-2": ("stop-cool", 0.1)})


@dataclass
class Stopped:
    proc: Descheduler
    in_flight_at_sigterm: bool
    evictions: list[RecordedRequest]
    pods: set[str]
    events: list[dict[str, Any]]
    lease: dict[str, Any]


@pytest.fixture(scope="module")
def stopped(usage_backend: UsageBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stopped]:
    workdir = tmp_path_factory.mktemp("shutdown")
    with live_cluster(workdir, usage_backend, build, full_window=True) as cluster:
        server = cluster.server
        server.inject(Fault(verb="create", resource="pods", subresource="eviction", latency=LATENCY))
        ports = Ports.free()
        # A 2 s cycle leaves the eviction call (bounded by the cycle's time budget) room for the latency.
        doc = service_config(
            prometheus_url=usage_backend.url, ports=ports, consecutive_abnormalities=1, interval="2s"
        )
        with run_descheduler(
            write_config(workdir / "config.yaml", doc), kubeconfig_of(server), ports, workdir
        ) as proc:
            proc.wait_for(lambda: evictions(server), timeout=20, what="an eviction call", interval=0.01)
            proc.process.send_signal(signal.SIGTERM)
            in_flight = evictions(server)[0].status == 0
            proc.wait_exit()
            result = Stopped(
                proc=proc,
                in_flight_at_sigterm=in_flight,
                evictions=evictions(server),
                pods={p["metadata"]["name"] for p in server.list("pods")},
                events=server.list("events", "default"),
                lease=server.get("leases", NAMESPACE, LEASE, group="coordination.k8s.io") or {},
            )
    yield result


def test_the_in_flight_eviction_finishes_and_nothing_else_starts(stopped: Stopped) -> None:
    assert stopped.in_flight_at_sigterm, "SIGTERM was meant to arrive while the eviction call was pending"
    ((evicted, status),) = [(r.name, r.status) for r in stopped.evictions]
    assert status == 201 and evicted in HOT_PODS
    assert HOT_PODS - stopped.pods == {evicted}
    (line,) = stopped.proc.events("eviction")
    assert (line["pod"], line["result"]) == (f"default/{evicted}", "evicted")
    events = [e["event"] for e in stopped.proc.records()]
    assert events.index("shutdown_requested") < events.index("eviction")
    summary = stopped.proc.events("cycle_summary")[-1]
    assert summary["cycle"] == line["cycle"], "no cycle starts after SIGTERM"
    assert summary["evictions"] == {"evicted": 1, "not-attempted": 1}
    assert summary["aborted"] == "shutdown requested"


def test_the_event_of_the_finished_eviction_is_written_before_exit(stopped: Stopped) -> None:
    (evicted,) = [r.name for r in stopped.evictions]
    assert [(e["reason"], e["involvedObject"]["name"]) for e in stopped.events] == [("Descheduled", evicted)]


def test_the_process_exits_0_promptly_and_releases_the_lease(stopped: Stopped) -> None:
    assert stopped.proc.exit_code == 0
    assert stopped.proc.exit_seconds is not None and stopped.proc.exit_seconds < 5
    assert stopped.lease["spec"]["holderIdentity"] == ""


def test_sigterm_ends_a_retry_after_wait_at_once(usage_backend: UsageBackend, tmp_path: Path) -> None:
    """The API server throttles the eviction with Retry-After 6 s inside an 8 s cycle: the evictor waits.
    SIGTERM must end that wait at once, not after it (the old shutdown took the whole wait)."""
    with live_cluster(tmp_path, usage_backend, build, full_window=True) as cluster:
        server = cluster.server
        server.inject(
            Fault(verb="create", resource="pods", subresource="eviction", status=429, retry_after=6)
        )
        ports = Ports.free()
        doc = service_config(
            prometheus_url=usage_backend.url, ports=ports, consecutive_abnormalities=1, interval="8s"
        )
        doc["leaderElection"] = {"leaderElect": False}
        doc["profiles"][0]["pluginConfig"][1]["args"]["objectLimiters"] = {}
        with run_descheduler(
            write_config(tmp_path / "config.yaml", doc), kubeconfig_of(server), ports, tmp_path
        ) as proc:
            proc.wait_for(lambda: evictions(server), timeout=30, what="a throttled eviction call")
            proc.wait_for(lambda: proc.events("eviction_throttled_retrying"), timeout=5, what="the wait")
            proc.process.send_signal(signal.SIGTERM)
            proc.wait_exit(timeout=15)
    print(f"\nFAULT sigterm-during-retry-after: exit_seconds={proc.exit_seconds:.2f}")
    assert proc.exit_code == 0
    assert proc.exit_seconds is not None and proc.exit_seconds < 3
    assert len(evictions(server)) == 1, "no retry after SIGTERM"
    (line,) = proc.events("eviction")
    assert line["result"] == "failed" and line["message"].startswith("shutdown requested")
    assert not any("leader" in str(r.get("message", "")) for r in proc.events("eviction"))
