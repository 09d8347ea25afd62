"""Leader election gates the cycles: two ``descheduler run`` replicas share one Lease. Only the holder runs
cycles and evicts; the other stays ready and idle. When the leader is killed (SIGKILL: no release), the
standby takes over once the Lease has expired, and cures the next hotspot. No pod is evicted twice."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.apiserver import RecordedRequest
from tests.integration.service_fixtures import Cluster, evictions, kubeconfig_of, lease_holder, live_cluster
from tests.support.service import (
    LEASE,
    NAMESPACE,
    Descheduler,
    Ports,
    UsageBackend,
    metric_samples,
    run_descheduler,
    service_config,
    write_config,
)

pytestmark = pytest.mark.integration

LEASE_SECONDS = 2.0


def build(cluster: Cluster) -> None:
    cluster.node("lead-hot-1")
    cluster.node("lead-hot-2")
    cluster.node("lead-cool-1", cpu=8)
    cluster.node("lead-cool-2", cpu=8)
    cluster.deployment(
        "front",
        {"front-hot": ("lead-hot-1", 0.2), "front-2": ("lead-cool-1", 0.2), "front-3": ("lead-cool-2", 0.2)},
    )
    cluster.deployment(
        "back",
        {"back-hot": ("lead-hot-2", 0.2), "back-2": ("lead-cool-1", 0.2), "back-3": ("lead-cool-2", 0.2)},
    )


@dataclass
class Failover:
    first: Descheduler
    second: Descheduler
    standby_ready: int
    standby_leader_gauge: list[tuple[dict[str, str], float]]
    standby_cycles_before_takeover: int
    first_evictions_before_kill: list[RecordedRequest]
    takeover_seconds: float
    lease_after_takeover: dict[str, Any]
    requests: list[RecordedRequest]


@pytest.fixture(scope="module")
def failover(usage_backend: UsageBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Failover]:
    workdir = tmp_path_factory.mktemp("leader")
    with live_cluster(workdir, usage_backend, build) as cluster:
        server = cluster.server
        kubeconfig = kubeconfig_of(server)
        ports = [Ports.free(), Ports.free()]
        configs = [
            write_config(
                workdir / f"replica-{i}.yaml", service_config(prometheus_url=usage_backend.url, ports=p)
            )
            for i, p in enumerate(ports)
        ]
        with run_descheduler(configs[0], kubeconfig, ports[0], workdir, "replica-0") as first:
            first.wait_ready()
            first.wait_for(
                lambda: lease_holder(server, LEASE) == first.identity, timeout=10, what="the lease"
            )
            with run_descheduler(configs[1], kubeconfig, ports[1], workdir, "replica-1") as second:
                second.wait_ready()
                standby_ready = second.get("/readyz")[0]
                seen = len(first.events("cycle_summary"))
                first.wait_for(
                    lambda: len(first.events("cycle_summary")) > seen,
                    timeout=10,
                    what="a cycle beside the standby",
                )
                standby_leader_gauge = metric_samples(second.get("/metrics")[1], "descheduler_leader")

                cluster.usage.set_pod_cores("default", "front-hot", 2.8)
                first.wait_for(lambda: evictions(server), timeout=25, what="the leader's eviction")
                first.kill()
                killed_at = time.monotonic()
                first_evictions = evictions(server)
                standby_cycles = len(second.events("cycle_summary"))
                cluster.usage.set_pod_cores("default", "back-hot", 2.8)  # the next hotspot, for whoever leads

                second.wait_for(
                    lambda: lease_holder(server, LEASE) == second.identity, timeout=15, what="the takeover"
                )
                takeover_seconds = time.monotonic() - killed_at
                lease = server.get("leases", NAMESPACE, LEASE, group="coordination.k8s.io") or {}
                second.wait_for(
                    lambda: evictions(server, user_agent=second.identity),
                    timeout=25,
                    what="the new leader's eviction",
                )
                second.terminate()
                result = Failover(
                    first=first,
                    second=second,
                    standby_ready=standby_ready,
                    standby_leader_gauge=standby_leader_gauge,
                    standby_cycles_before_takeover=standby_cycles,
                    first_evictions_before_kill=first_evictions,
                    takeover_seconds=takeover_seconds,
                    lease_after_takeover=lease,
                    requests=server.requests,
                )
    yield result


def test_the_standby_stays_ready_and_idle_while_the_leader_acts(failover: Failover) -> None:
    assert failover.standby_ready == 200
    assert failover.standby_leader_gauge == [({}, 0.0)]
    assert failover.standby_cycles_before_takeover == 0
    assert [(r.name, r.status) for r in failover.first_evictions_before_kill] == [("front-hot", 201)]
    assert all(failover.first.identity in r.user_agent for r in failover.first_evictions_before_kill)


def _stamp(value: str) -> float:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def test_the_standby_takes_over_only_once_the_killed_leaders_lease_has_expired(failover: Failover) -> None:
    renewals = [
        r.body["spec"]["renewTime"]
        for r in failover.requests
        if r.resource == "leases" and r.verb in ("create", "update") and r.status in (200, 201)
        and failover.first.identity in r.user_agent
    ]  # fmt: skip
    spec = failover.lease_after_takeover["spec"]
    assert spec["holderIdentity"] == failover.second.identity
    assert spec["leaseTransitions"] == 1
    # Both stamps come from processes on this machine's clock: the new holder acquired the Lease no
    # earlier than a full leaseDuration after the dead leader's last renewal, and not much later.
    waited = _stamp(spec["acquireTime"]) - _stamp(renewals[-1])
    assert LEASE_SECONDS <= waited < LEASE_SECONDS + 3
    assert failover.takeover_seconds < LEASE_SECONDS + 4
    leader_lines = [r for r in failover.second.records() if r["event"] == "leadership_acquired"]
    assert len(leader_lines) == 1


def test_the_new_leader_cures_the_next_hotspot_and_no_pod_is_evicted_twice(failover: Failover) -> None:
    calls = [r for r in failover.requests if r.resource == "pods" and r.subresource == "eviction"]
    by_replica = {
        name: [(r.name, r.status) for r in calls if proc.identity in r.user_agent]
        for name, proc in (("first", failover.first), ("second", failover.second))
    }
    assert by_replica == {"first": [("front-hot", 201)], "second": [("back-hot", 201)]}
    assert max(Counter(r.name for r in calls).values()) == 1
    assert failover.second.exit_code == 0
