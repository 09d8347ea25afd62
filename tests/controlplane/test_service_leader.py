"""Leader election gates the cycles, on the real API server: two ``descheduler run`` replicas share one
Lease. Only the holder runs cycles and evicts; the other stays ready and idle. When the leader is killed
(SIGKILL: no release), the standby takes over once the Lease has expired, and cures the next hotspot. No
pod is evicted twice.

Each replica is an audited identity: its Lease writes (with their bodies) and its evictions are read from
the API server's audit log."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from descheduler.kube.api import KubeApi
from descheduler.kube.connection import connect
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.loop import fresh_namespace, lease_namespace
from tests.controlplane.move43a_fixtures import (
    AuditedIdentity,
    Request,
    add_node_objects,
    audited_identities,
    placed_replicaset,
)
from tests.controlplane.usage import ClusterUsage
from tests.support.service import (
    NAMESPACE,
    Descheduler,
    UsageBackend,
    metric_samples,
    run_descheduler,
    written_config,
)

pytestmark = pytest.mark.controlplane

LEASE_SECONDS = 2.0
POLL = 0.3
"""Seconds between looks at the audit log or the Lease (each look is a request and a file read)."""


@dataclass
class Failover:
    first: Descheduler
    second: Descheduler
    ids: tuple[AuditedIdentity, AuditedIdentity]
    standby_ready: int
    standby_leader_gauge: list[tuple[dict[str, str], float]]
    standby_cycles_before_takeover: int
    first_evictions_before_kill: list[Request]
    takeover_seconds: float
    lease_after_takeover: dict[str, Any]
    requests: tuple[list[Request], list[Request]]
    """What each replica sent, as the server's audit log has it."""


def build(plane: ControlPlane, group: str) -> dict[str, int]:
    """Two 4-core nodes with one pod each of ``front`` and ``back``, two 8-core nodes with the others."""
    hot1, hot2, cool1, cool2 = (f"{group}-{n}" for n in ("hot-1", "hot-2", "cool-1", "cool-2"))
    nodes = [objects.node(n, group) for n in (hot1, hot2)] + [
        objects.node(n, group, cpu="8") for n in (cool1, cool2)
    ]
    add_node_objects(plane, group, nodes)
    placed_replicaset(plane, group, "front", {"front-hot": hot1, "front-2": cool1, "front-3": cool2})
    placed_replicaset(plane, group, "back", {"back-hot": hot2, "back-2": cool1, "back-3": cool2})
    return {hot1: 4, hot2: 4, cool1: 8, cool2: 8}


def _holder(api: KubeApi, lease: str) -> str:
    found = api.get(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{lease}")
    return str(found["spec"].get("holderIdentity") or "")


@pytest.fixture(scope="module")
def failover(
    control_plane: ControlPlane, usage_backend: UsageBackend, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Failover]:
    workdir = tmp_path_factory.mktemp("leader")
    group = fresh_namespace(control_plane, f"leader-{time.monotonic_ns() % 100000}")
    lease_namespace(control_plane)
    lease = f"{group}-lease"
    api = connect(str(control_plane.kubeconfig), qps=1000, burst=1000)
    try:
        usage = ClusterUsage(api, group, build(control_plane, group), {"front": 0.2, "back": 0.2})
        with usage.following(), audited_identities(control_plane, workdir) as audited:
            usage_backend.install(usage.model)
            ids = (audited("replica-0"), audited("replica-1"))
            selector = {"matchLabels": {objects.GROUP_LABEL: group}}
            replicas = [
                written_config(
                    workdir / f"replica-{i}.yaml", usage_backend.url, lease_name=lease, node_selector=selector
                )
                for i in range(2)
            ]
            configs, ports = [config for config, _ in replicas], [port for _, port in replicas]
            with run_descheduler(configs[0], ids[0].kubeconfig, ports[0], workdir, "replica-0") as first:
                first.wait_ready(timeout=30)
                first.wait_for(
                    lambda: _holder(api, lease) == first.identity, timeout=15, what="the lease", interval=POLL
                )
                with run_descheduler(configs[1], ids[1].kubeconfig, ports[1], workdir, "replica-1") as second:
                    second.wait_ready(timeout=30)
                    standby_ready = second.get("/readyz")[0]
                    seen = len(first.events("cycle_summary"))
                    first.wait_for(
                        lambda: len(first.events("cycle_summary")) > seen,
                        timeout=10,
                        what="a cycle beside the standby",
                    )
                    standby_leader_gauge = metric_samples(second.get("/metrics")[1], "descheduler_leader")

                    usage.model.set_pod_cores(group, "front-hot", 2.8)
                    first.wait_for(ids[0].evictions, timeout=30, what="the leader's eviction", interval=POLL)
                    first.kill()
                    killed_at = time.monotonic()
                    first_evictions = ids[0].evictions()
                    standby_cycles = len(second.events("cycle_summary"))
                    usage.model.set_pod_cores(group, "back-hot", 2.8)  # the next hotspot, for whoever leads

                    second.wait_for(
                        lambda: _holder(api, lease) == second.identity,
                        timeout=15,
                        what="the takeover",
                        interval=0.1,
                    )
                    takeover_seconds = time.monotonic() - killed_at
                    lease_doc = api.get(f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{lease}")
                    second.wait_for(
                        ids[1].evictions, timeout=30, what="the new leader's eviction", interval=POLL
                    )
                    second.terminate()
            yield Failover(
                first=first,
                second=second,
                ids=ids,
                standby_ready=standby_ready,
                standby_leader_gauge=standby_leader_gauge,
                standby_cycles_before_takeover=standby_cycles,
                first_evictions_before_kill=first_evictions,
                takeover_seconds=takeover_seconds,
                lease_after_takeover=lease_doc,
                requests=(ids[0].flush(), ids[1].flush()),
            )
    finally:
        api.close()
        control_plane.kubectl("delete", "lease", lease, "-n", NAMESPACE, "--ignore-not-found")
        control_plane.kubectl("delete", "namespace", group, "--wait=false", check=False)
        control_plane.kubectl("delete", "nodes", "-l", f"{objects.GROUP_LABEL}={group}", "--wait=false")


def test_the_standby_stays_ready_and_idle_while_the_leader_acts(failover: Failover) -> None:
    assert failover.standby_ready == 200
    assert failover.standby_leader_gauge == [({}, 0.0)]
    assert failover.standby_cycles_before_takeover == 0
    assert [(r.name, r.code) for r in failover.first_evictions_before_kill] == [("front-hot", 201)]
    assert [r for r in failover.requests[1] if r.is_eviction and r.name == "front-hot"] == []


def _stamp(value: str) -> float:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()


def test_the_standby_takes_over_only_once_the_killed_leaders_lease_has_expired(failover: Failover) -> None:
    renewals = [
        r.body["spec"]["renewTime"]
        for r in failover.requests[0]
        if r.resource == "leases" and r.verb in ("create", "update") and r.code in (200, 201)
    ]
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
    by_replica = {
        name: [(r.name, r.code) for r in requests if r.is_eviction]
        for name, requests in zip(("first", "second"), failover.requests, strict=True)
    }
    assert by_replica == {"first": [("front-hot", 201)], "second": [("back-hot", 201)]}
    calls = [r.name for requests in failover.requests for r in requests if r.is_eviction]
    assert max(Counter(calls).values()) == 1
    assert failover.second.exit_code == 0
