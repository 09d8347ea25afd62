"""The figures of the kwok-scale benchmark (``benchmarks/kwok_scale.py``) rest on small pure helpers; each is
checked here without a control plane: the planned cluster, the API objects the loader sends, the lean
exporter's series, and the reading of the descheduler's log, the audit log and Prometheus' answers."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.kwok_scale import (
    BASE_CORES,
    GIB,
    HIGH,
    NODE_CPUS,
    NODE_MEMORY_GIB,
    LeanExporter,
    LogTail,
    cpu_between,
    cycle_ends,
    deployment_object,
    log_records,
    parse_audit,
    plan_cluster,
    pod_objects,
    query_stat,
    replicaset_object,
    request_mix,
    sync_figures,
)


@pytest.mark.parametrize(("nodes", "pods"), [(20, 300), (50, 1501), (7, 7)])
def test_every_pod_is_placed_and_every_node_holds_the_same_number_give_or_take_one(
    nodes: int, pods: int
) -> None:
    plan = plan_cluster(nodes, pods, seed=3)
    per_node = Counter(node for w in plan.workloads for node in w.nodes)
    assert plan.pods == pods
    assert set(per_node) == set(plan.nodes)
    assert max(per_node.values()) - min(per_node.values()) <= 1
    assert len({(w.namespace, name) for w in plan.workloads for name in w.pod_names()}) == pods


def test_hot_nodes_are_over_the_cpu_threshold_and_the_others_under_it() -> None:
    plan = plan_cluster(200, 6000, hot_fraction=0.05, seed=1)
    cores = plan.node_cores()
    percent = {n: 100 * c / NODE_CPUS for n, c in cores.items()}
    assert len(plan.hot) == 10
    assert all(percent[n] > HIGH["cpu"] for n in plan.hot)
    assert all(percent[n] < HIGH["cpu"] for n in plan.nodes if n not in plan.hot)
    assert all(100 * m / (NODE_MEMORY_GIB * GIB) < HIGH["memory"] for m in plan.node_memory().values())


def test_a_nodes_usage_is_its_base_load_plus_its_pods_usage() -> None:
    plan = plan_cluster(10, 100, seed=2)
    node = plan.nodes[4]
    pods = [
        plan.pod_cores[(w.namespace, name)]
        for w in plan.workloads
        for name, where in zip(w.pod_names(), w.nodes, strict=True)
        if where == node
    ]
    assert plan.node_cores()[node] == pytest.approx(BASE_CORES + sum(pods))


def test_budgets_go_only_to_workloads_of_two_or_more_replicas_and_the_plan_is_reproducible() -> None:
    plan = plan_cluster(100, 3000, seed=5)
    assert any(w.pdb for w in plan.workloads)
    assert all(w.replicas >= 2 for w in plan.workloads if w.pdb)
    assert plan_cluster(100, 3000, seed=5) == plan
    assert plan_cluster(100, 3000, seed=6) != plan


def test_too_few_pods_for_the_nodes_is_refused() -> None:
    with pytest.raises(ValueError, match="one pod per node"):
        plan_cluster(10, 5)


def _without_hash(template: dict[str, object]) -> str:
    text = json.dumps(template, sort_keys=True)
    return re.sub(r', "pod-template-hash": "[^"]*"', "", text)


def test_the_replicaset_carries_the_deployments_template_and_its_pods_are_bound_and_owned() -> None:
    plan = plan_cluster(10, 100, seed=1)
    w = max(plan.workloads, key=lambda x: x.replicas)
    deployment = deployment_object(w)
    rs = replicaset_object(w, "dep-uid")
    # The Deployment controller adopts a ReplicaSet whose template equals its own but for the hash label.
    assert _without_hash(rs["spec"]["template"]) == _without_hash(deployment["spec"]["template"])
    assert rs["metadata"]["ownerReferences"][0] | {"uid": "dep-uid"} == rs["metadata"]["ownerReferences"][0]
    pods = pod_objects(w, "rs-uid")
    assert [p["spec"]["nodeName"] for p in pods] == list(w.nodes)
    for pod in pods:
        owner = pod["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
            "ReplicaSet",
            rs["metadata"]["name"],
            "rs-uid",
            True,
        )
        assert rs["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()


def _parse(body: bytes) -> dict[str, float]:
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            out[series] = float(value)
    return out


def test_the_exporters_counters_grow_at_each_pods_and_nodes_planned_rate() -> None:
    plan = plan_cluster(5, 40, seed=1)
    exporter = LeanExporter(plan, start=1000.0)
    before, after = _parse(exporter.render(1100.0)), _parse(exporter.render(1110.0))
    assert len(after) == exporter.series == 3 * 5 + 2 * 40
    w = plan.workloads[0]
    pod = w.pod_names()[0]
    cpu = next(k for k in after if k.startswith("container_cpu_usage") and f'pod="{pod}"' in k)
    assert (after[cpu] - before[cpu]) / 10 == pytest.approx(plan.pod_cores[(w.namespace, pod)], abs=1e-4)
    node = plan.nodes[0]
    busy = next(k for k in after if k.startswith("node_cpu_seconds_total") and f'"{node}:9100"' in k)
    assert (after[busy] - before[busy]) / 10 == pytest.approx(plan.node_cores()[node], abs=1e-4)
    available = next(k for k in after if k.startswith("node_memory_MemAvailable") and f'"{node}:9100"' in k)
    assert after[available] == pytest.approx(NODE_MEMORY_GIB * GIB - plan.node_memory()[node], abs=1)


def _record(event: str, second: float, **fields: object) -> str:
    stamp = f"2026-11-23T18:00:{second:06.3f}Z"
    return json.dumps({"event": event, "timestamp": stamp, **fields})


LOG = "\n".join(
    [
        _record("config_notice", 0.0),
        _record("starting", 1.0),
        _record("listed", 3.0, resource="nodes", objects=1000, pages=2),
        "not json at all",
        _record("listed", 9.5, resource="pods", objects=30000, pages=60),
        _record("audit_node", 10.0, node="n1"),
        _record("cycle_summary", 12.0, duration_seconds=1.5),
        _record("listed", 20.0, resource="pods", objects=30000, pages=60),  # a relist later: not the sync
        _record("cycle_summary", 32.0, duration_seconds=0.5),
    ]
)


def test_the_sync_runs_from_starting_to_the_first_list_of_the_last_resource() -> None:
    records = log_records(LOG)
    assert sync_figures(records, resources=3) is None  # a resource has not listed yet
    sync = sync_figures(records, resources=2)
    assert sync is not None
    assert sync.seconds == pytest.approx(8.5)
    assert sync.objects == {"nodes": 1000, "pods": 30000}
    assert [round(d, 1) for _, d in cycle_ends(records)] == [1.5, 0.5]


def test_the_log_tail_reads_only_new_bytes_and_waits_for_a_whole_line(tmp_path: Path) -> None:
    path = tmp_path / "log"
    lines = LOG.splitlines()
    path.write_text("\n".join(lines[:3]) + "\n" + lines[3][:5])
    tail = LogTail(path)
    assert [r["event"] for r in tail.poll()] == ["starting", "listed"]
    with path.open("a") as handle:
        handle.write(lines[3][5:] + "\n" + "\n".join(lines[4:]) + "\n")
    assert [r["event"] for r in tail.poll()] == [
        "starting",
        "listed",
        "listed",
        "cycle_summary",
        "listed",
        "cycle_summary",
    ]


def test_cpu_between_two_times_reads_the_last_sample_before_each() -> None:
    samples = [(0.0, 1.0), (1.0, 1.5), (2.0, 3.0), (3.0, 3.25)]
    assert cpu_between(samples, 1.2, 3.0) == pytest.approx(1.75)
    with pytest.raises(ValueError, match="no CPU sample"):
        cpu_between(samples, -1.0, 2.0)


def test_a_prometheus_answer_says_what_its_query_cost() -> None:
    body = json.dumps(
        {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [],
                "stats": {"timings": {"evalTotalTime": 0.25}, "samples": {"totalQueryableSamples": 1234}},
            },
        }
    ).encode()
    stat = query_stat(
        5.0, 'sum by (namespace, pod) (rate(container_cpu_usage_seconds_total{node=~"a"}[1m]))', body
    )
    assert (stat.kind, stat.samples, stat.eval_seconds, stat.bytes) == ("pod", 1234, 0.25, len(body))
    assert query_stat(5.0, "sum(rate(node_cpu_seconds_total[1m]))", b"not json").samples == 0


def test_the_audit_log_is_read_by_user_with_dry_run_evictions_apart() -> None:
    def event(
        verb: str, resource: str, uri: str, sub: str | None = None, stage: str = "ResponseComplete"
    ) -> str:
        ref = {"resource": resource, **({"subresource": sub} if sub else {})}
        return json.dumps(
            {
                "stage": stage,
                "verb": verb,
                "requestURI": uri,
                "user": {"username": "system:serviceaccount:kwok-scale:load-aware-descheduler"},
                "userAgent": "load-aware-descheduler/0.1.0",
                "objectRef": ref,
                "responseStatus": {"code": 201},
                "requestReceivedTimestamp": "2026-11-23T18:00:00.000000Z",
                "stageTimestamp": "2026-11-23T18:00:00.250000Z",
            }
        )

    lines = [
        event("create", "pods", "/api/v1/namespaces/a/pods/p/eviction?dryRun=All", "eviction"),
        event("create", "pods", "/api/v1/namespaces/a/pods/q/eviction", "eviction"),
        event("list", "pods", "/api/v1/pods?limit=500"),
        event("list", "pods", "/api/v1/pods?limit=500", stage="ResponseStarted"),
        "garbage",
    ]
    events = parse_audit(lines)
    assert len(events) == 3
    assert events[2].completed - events[2].received == pytest.approx(0.25)
    assert request_mix(events) == Counter(
        {"create pods/eviction (dry run)": 1, "create pods/eviction": 1, "list pods": 1}
    )
