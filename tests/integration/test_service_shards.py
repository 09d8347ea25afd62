"""Large clusters: two ``descheduler run`` instances, each owning a node pool (its own ``nodeSelector``
and Lease), on one cluster where each pool has a hotspot. Each must cure its own hotspot and never touch,
list or watch the other pool's nodes, although the two pools share workloads."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.apiserver import RecordedRequest
from tests.integration.service_fixtures import Cluster, kubeconfig_of, lease_holder, live_cluster
from tests.support.service import (
    Descheduler,
    Ports,
    UsageBackend,
    metric_samples,
    run_descheduler,
    service_config,
    write_config,
)

pytestmark = pytest.mark.integration

POOLS = {"a": ("a-hot", "a-cool"), "b": ("b-hot", "b-cool")}
SELECTORS: dict[str, Any] = {"a": "pool=a", "b": {"matchLabels": {"pool": "b"}}}
"""One instance takes the string form of a selector, the other the LabelSelector form."""


def build(cluster: Cluster) -> None:
    for pool, (hot, cool) in POOLS.items():
        cluster.node(hot, pool=pool)
        cluster.node(cool, cpu=8, pool=pool)
        cluster.daemon_pod(f"agent-{hot}", hot)
    # Each workload has replicas in both pools: sharding is by node, not by workload.
    cluster.deployment(
        "alpha", {"alpha-hot": ("a-hot", 2.8), "alpha-2": ("a-cool", 0.2), "alpha-3": ("b-cool", 0.2)}
    )
    cluster.deployment(
        "beta", {"beta-hot": ("b-hot", 2.8), "beta-2": ("b-cool", 0.2), "beta-3": ("a-cool", 0.2)}
    )


@dataclass
class Shard:
    pool: str
    proc: Descheduler
    holder: str
    metrics: str


@dataclass
class ShardedRun:
    shards: dict[str, Shard]
    requests: list[RecordedRequest]
    pod_nodes: dict[str, str]
    node_pools: dict[str, str]


@pytest.fixture(scope="module")
def sharded(usage_backend: UsageBackend, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ShardedRun]:
    workdir = tmp_path_factory.mktemp("shards")
    with live_cluster(workdir, usage_backend, build) as cluster:
        server = cluster.server
        pod_nodes = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in server.list("pods")}
        node_pools = {n["metadata"]["name"]: n["metadata"]["labels"]["pool"] for n in server.list("nodes")}
        procs: dict[str, Descheduler] = {}
        with (
            run_descheduler(*_instance("a", workdir, usage_backend, kubeconfig_of(server))) as procs["a"],
            run_descheduler(*_instance("b", workdir, usage_backend, kubeconfig_of(server))) as procs["b"],
        ):
            for pool, proc in procs.items():
                proc.wait_ready()
                proc.wait_for(
                    functools.partial(_cooled_after_eviction, proc),
                    timeout=30,
                    what=f"pool {pool}'s hotspot cured",
                )
            shards = {
                pool: Shard(
                    pool, proc, lease_holder(server, f"descheduler-pool-{pool}"), proc.get("/metrics")[1]
                )
                for pool, proc in procs.items()
            }
            for proc in procs.values():
                proc.terminate()
        result = ShardedRun(shards, server.requests, pod_nodes, node_pools)
    yield result


def _instance(pool: str, workdir: Any, backend: UsageBackend, kubeconfig: Any) -> tuple[Any, ...]:
    ports = Ports.free()
    doc = service_config(
        prometheus_url=backend.url,
        ports=ports,
        lease_name=f"descheduler-pool-{pool}",
        node_selector=SELECTORS[pool],
    )
    return write_config(workdir / f"pool-{pool}.yaml", doc), kubeconfig, ports, workdir, f"pool-{pool}"


def _cooled_after_eviction(proc: Descheduler) -> bool:
    evicted = [e["cycle"] for e in proc.events("eviction")]
    return bool(evicted) and any(
        s["cycle"] > evicted[0] and s["nodes"] == {"low": 2} for s in proc.events("cycle_summary")
    )


def test_each_instance_evicts_only_the_hot_pod_of_its_own_pool(sharded: ShardedRun) -> None:
    server_side = {
        pool: [
            (r.name, r.status)
            for r in sharded.requests
            if _is_eviction(r) and shard.proc.identity in r.user_agent
        ]
        for pool, shard in sharded.shards.items()
    }
    assert server_side == {"a": [("alpha-hot", 201)], "b": [("beta-hot", 201)]}
    for pool, calls in server_side.items():
        assert {sharded.node_pools[sharded.pod_nodes[name]] for name, _ in calls} == {pool}
    assert sum(1 for r in sharded.requests if _is_eviction(r)) == 2


def test_each_instance_lists_and_watches_only_its_own_pools_nodes(sharded: ShardedRun) -> None:
    """It lists and watches by its pool's selector; the only node it reads by name is one it evicts from
    (the verification before an eviction re-reads the node's pause marks and autoscaler taints)."""
    for pool, shard in sharded.shards.items():
        node_requests = [
            r for r in sharded.requests if r.resource == "nodes" and shard.proc.identity in r.user_agent
        ]
        collections = [r for r in node_requests if r.verb in ("list", "watch")]
        assert {r.verb for r in collections} == {"list", "watch"}
        assert {r.query.get("labelSelector") for r in collections} == {f"pool={pool}"}
        by_name = [r for r in node_requests if r not in collections]
        assert {r.verb for r in by_name} <= {"get"}
        assert {sharded.node_pools[r.name] for r in by_name} <= {pool}


def test_each_instance_classifies_only_its_own_pools_nodes(sharded: ShardedRun) -> None:
    for pool, shard in sharded.shards.items():
        summaries = shard.proc.events("cycle_summary")
        assert summaries and all(sum(s["nodes"].values()) == 2 for s in summaries)
        classified = {
            labels["node"] for labels, _ in metric_samples(shard.metrics, "descheduler_node_classification")
        }
        assert classified == set(POOLS[pool])


def test_each_instance_holds_its_own_lease_and_stops_cleanly(sharded: ShardedRun) -> None:
    for shard in sharded.shards.values():
        assert shard.holder == shard.proc.identity
        assert shard.proc.exit_code == 0
        assert shard.proc.non_json_lines() == []


def _is_eviction(request: RecordedRequest) -> bool:
    return request.verb == "create" and request.resource == "pods" and request.subresource == "eviction"
