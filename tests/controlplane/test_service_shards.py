"""Large clusters: two ``descheduler run`` instances, each owning a node pool (its own ``nodeSelector``
and Lease), on one real cluster where each pool has a hotspot. Each must cure its own hotspot and never
touch, list or watch the other pool's nodes, although the two pools share workloads.

Each instance is an audited identity: the API server's audit log says what each one sent."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from descheduler.kube.connection import connect
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.loop import fresh_namespace, lease_namespace
from tests.controlplane.move43a_fixtures import (
    AuditedIdentity,
    Request,
    add_node_objects,
    audited_identities,
    daemon_pods,
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

ROLES = ("hot", "cool")
"""Each pool has a hot node (4 cores) and a cool one (8 cores)."""


@dataclass
class Shard:
    pool: str
    """The pool label's value (``<namespace>-a``)."""
    nodes: list[str]
    proc: Descheduler
    identity: AuditedIdentity
    holder: str
    metrics: str
    requests: list[Request]


@dataclass
class ShardedRun:
    shards: dict[str, Shard]
    pod_nodes: dict[str, str]
    node_pools: dict[str, str]


def build(plane: ControlPlane, group: str) -> tuple[dict[str, int], dict[str, str], dict[str, str]]:
    """Two pools of a hot and a cool node; a DaemonSet's pod on each hot node; two workloads, each with a
    hot pod in one pool and replicas in both (sharding is by node, not by workload). Returns the nodes'
    cores, the pods' nodes and the nodes' pools."""
    nodes, pools = [], {}
    for pool in ("a", "b"):
        for role in ROLES:
            node = objects.node(f"{group}-{pool}-{role}", group, cpu="4" if role == "hot" else "8")
            node["metadata"]["labels"]["pool"] = pools[node["metadata"]["name"]] = f"{group}-{pool}"
            nodes.append(node)
    add_node_objects(plane, group, nodes)
    daemon_pods(plane, group, "agent", [f"{group}-a-hot", f"{group}-b-hot"])
    a_hot, a_cool, b_hot, b_cool = (f"{group}-{p}-{r}" for p in ("a", "b") for r in ROLES)
    placed = {
        "alpha": {"alpha-hot": a_hot, "alpha-2": a_cool, "alpha-3": b_cool},
        "beta": {"beta-hot": b_hot, "beta-2": b_cool, "beta-3": a_cool},
    }
    for app, pods in placed.items():
        placed_replicaset(plane, group, app, pods)
    cores = {n["metadata"]["name"]: int(n["status"]["capacity"]["cpu"]) for n in nodes}
    return cores, {pod: node for pods in placed.values() for pod, node in pods.items()}, pools


@pytest.fixture(scope="module")
def sharded(
    control_plane: ControlPlane, usage_backend: UsageBackend, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ShardedRun]:
    workdir = tmp_path_factory.mktemp("shards")
    group = fresh_namespace(control_plane, f"shards-{time.monotonic_ns() % 100000}")
    lease_namespace(control_plane)
    api = connect(str(control_plane.kubeconfig), qps=1000, burst=1000)
    try:
        cores, pod_nodes, node_pools = build(control_plane, group)
        usage = ClusterUsage(api, group, cores, {"alpha": 0.2, "beta": 0.2, "agent": 0.1})
        with usage.following(), audited_identities(control_plane, workdir) as audited:
            usage.model.set_loads({}, {(group, "alpha-hot"): 2.8, (group, "beta-hot"): 2.8})
            usage_backend.install(usage.model)
            selectors: dict[str, Any] = {
                "a": f"pool={group}-a",  # one instance takes the string form of a selector,
                "b": {"matchLabels": {"pool": f"{group}-b"}},  # the other the LabelSelector form
            }
            identities = {pool: audited(f"pool-{pool}") for pool in selectors}
            with (
                run_descheduler(*_instance(group, "a", selectors, workdir, usage_backend, identities)) as a,
                run_descheduler(*_instance(group, "b", selectors, workdir, usage_backend, identities)) as b,
            ):
                procs = {"a": a, "b": b}
                for pool, proc in procs.items():
                    proc.wait_ready(timeout=30)
                    proc.wait_for(
                        functools.partial(_cooled_after_eviction, proc),
                        timeout=45,
                        what=f"pool {pool}'s hotspot cured",
                    )
                holders = {pool: _holder(control_plane, f"{group}-pool-{pool}") for pool in procs}
                metrics = {pool: proc.get("/metrics")[1] for pool, proc in procs.items()}
                for proc in procs.values():
                    proc.terminate()
            shards = {
                pool: Shard(
                    f"{group}-{pool}",
                    sorted(n for n, p in node_pools.items() if p == f"{group}-{pool}"),
                    proc,
                    identities[pool],
                    holders[pool],
                    metrics[pool],
                    identities[pool].flush(),
                )
                for pool, proc in procs.items()
            }
            yield ShardedRun(shards, pod_nodes, node_pools)
    finally:
        api.close()
        control_plane.kubectl("delete", "namespace", group, "--wait=false", check=False)
        control_plane.kubectl("delete", "nodes", "-l", f"{objects.GROUP_LABEL}={group}", "--wait=false")


def _instance(
    group: str,
    pool: str,
    selectors: dict[str, Any],
    workdir: Path,
    backend: UsageBackend,
    identities: dict[str, AuditedIdentity],
) -> tuple[Any, ...]:
    config, ports = written_config(
        workdir / f"pool-{pool}.yaml",
        backend.url,
        lease_name=f"{group}-pool-{pool}",
        node_selector=selectors[pool],
    )
    return config, identities[pool].kubeconfig, ports, workdir, f"pool-{pool}"


def _holder(plane: ControlPlane, lease: str) -> str:
    spec = plane.get_json("lease", lease, "-n", NAMESPACE)["spec"]
    return str(spec.get("holderIdentity") or "")


def _cooled_after_eviction(proc: Descheduler) -> bool:
    evicted = [e["cycle"] for e in proc.events("eviction")]
    return bool(evicted) and any(
        s["cycle"] > evicted[0] and s["nodes"] == {"low": 2} for s in proc.events("cycle_summary")
    )


def test_each_instance_evicts_only_the_hot_pod_of_its_own_pool(sharded: ShardedRun) -> None:
    server_side = {
        pool: [(r.name, r.code) for r in shard.requests if r.is_eviction]
        for pool, shard in sharded.shards.items()
    }
    assert server_side == {"a": [("alpha-hot", 201)], "b": [("beta-hot", 201)]}
    for pool, calls in server_side.items():
        pools = {sharded.node_pools[sharded.pod_nodes[name]] for name, _ in calls}
        assert pools == {sharded.shards[pool].pool}


def test_each_instance_lists_and_watches_only_its_own_pools_nodes(sharded: ShardedRun) -> None:
    """It lists and watches by its pool's selector; the only node it reads by name is one it evicts from
    (the verification before an eviction re-reads the node's pause marks and autoscaler taints)."""
    for shard in sharded.shards.values():
        node_requests = [r for r in shard.requests if r.resource == "nodes"]
        collections = [r for r in node_requests if r.verb in ("list", "watch")]
        # Synced by WatchList (a watch with sendInitialEvents) on 1.35, by LIST where refused.
        verbs = {r.verb for r in collections}
        assert "watch" in verbs and verbs <= {"list", "watch"}
        assert {r.query.get("labelSelector") for r in collections} == {f"pool={shard.pool}"}
        by_name = [r for r in node_requests if r not in collections]
        assert {r.verb for r in by_name} <= {"get"}
        assert {sharded.node_pools[r.name] for r in by_name} <= {shard.pool}


def test_each_instance_classifies_only_its_own_pools_nodes(sharded: ShardedRun) -> None:
    for shard in sharded.shards.values():
        summaries = shard.proc.events("cycle_summary")
        assert summaries and all(sum(s["nodes"].values()) == 2 for s in summaries)
        classified = {
            labels["node"] for labels, _ in metric_samples(shard.metrics, "descheduler_node_classification")
        }
        assert classified == set(shard.nodes)


def test_each_instance_holds_its_own_lease_and_stops_cleanly(sharded: ShardedRun) -> None:
    for shard in sharded.shards.values():
        assert shard.holder == shard.proc.identity
        assert shard.proc.exit_code == 0
        assert shard.proc.non_json_lines() == []
