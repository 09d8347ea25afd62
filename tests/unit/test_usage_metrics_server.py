"""metrics-server usage from metrics.k8s.io/v1beta1 lists as the API returns them, through a fake client."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from descheduler.cluster.types import Node, Pod, UsageSample
from descheduler.config.providers import MetricsProvider
from descheduler.usage.metrics_server import MetricsServerSource
from descheduler.usage.prometheus import PrometheusSource
from descheduler.usage.source import build_source

Ki = 1024
Gi = 2**30
NOW = 1714557630.0  # 2024-05-01T10:00:30Z
SCRAPED = "2024-05-01T10:00:00Z"
SCRAPED_EPOCH = 1714557600.0


def node_metrics(name: str, cpu: Any, memory: Any, timestamp: Any = SCRAPED) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "creationTimestamp": "2024-05-01T10:00:12Z", "labels": {"role": "worker"}},
        "timestamp": timestamp,
        "window": "20.028s",
        "usage": {"cpu": cpu, "memory": memory},
    }


def pod_metrics(namespace: str, name: str, containers: Mapping[str, tuple[str, str]]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": "2024-05-01T10:00:12Z"},
        "timestamp": "2024-05-01T09:59:58Z",
        "window": "15.116s",
        "containers": [
            {"name": c, "usage": {"cpu": cpu, "memory": mem}} for c, (cpu, mem) in containers.items()
        ],
    }


NODE_LIST = {
    "kind": "NodeMetricsList",
    "apiVersion": "metrics.k8s.io/v1beta1",
    "metadata": {},
    "items": [
        node_metrics("node-a", "1523456789n", "6291456Ki"),
        node_metrics("node-b", "250m", "1Gi"),
        node_metrics("node-bad-quantity", "lots", "1Gi"),
        node_metrics("node-negative", "-1", "1Gi"),
        node_metrics("node-absurd", "17", "1Gi"),
        node_metrics("node-future", "1", "1Gi", timestamp="2024-05-01T10:30:00Z"),
        node_metrics("node-no-time", "1", "1Gi", timestamp=None),
        {"metadata": {"name": "node-no-usage"}, "timestamp": SCRAPED, "window": "20s"},
    ],
}
POD_LIST = {
    "kind": "PodMetricsList",
    "apiVersion": "metrics.k8s.io/v1beta1",
    "metadata": {},
    "items": [
        pod_metrics("default", "web-1", {"app": ("250123456n", "307200Ki"), "sidecar": ("4876544n", "20Mi")}),
        pod_metrics("default", "broken", {"app": ("1m", "many")}),
        pod_metrics("other", "not-asked-for", {"x": ("1m", "1Mi")}),
    ],
}
NODES = [
    Node(name=name, labels={}, allocatable={"cpu": 4000, "memory": 16 * Gi})
    for name in ("node-a", "node-b", "node-bad-quantity", "node-negative", "node-absurd", "node-future",
                 "node-no-time", "node-no-usage", "node-missing")
]  # fmt: skip
PODS = [Pod(namespace="default", name=n, uid=n, node_name="node-a") for n in ("web-1", "broken", "ghost")]


@dataclass
class FakeMetricsApi:
    nodes: Any = None
    pods: Any = None
    node_error: Exception | None = None
    pod_error: Exception | None = None

    def list_node_metrics(self) -> Mapping[str, Any] | Sequence[Mapping[str, Any]]:
        if self.node_error is not None:
            raise self.node_error
        return self.nodes if self.nodes is not None else NODE_LIST

    def list_pod_metrics(self) -> Mapping[str, Any] | Sequence[Mapping[str, Any]]:
        if self.pod_error is not None:
            raise self.pod_error
        return self.pods if self.pods is not None else POD_LIST


def fetch(api: FakeMetricsApi) -> Any:
    return MetricsServerSource(api, clock=lambda: NOW).fetch(NODES, PODS)


def test_node_usage_is_read_in_millicores_and_bytes_with_the_scrape_time() -> None:
    snapshot = fetch(FakeMetricsApi())
    assert snapshot.nodes["node-a"] == UsageSample({"cpu": 1523, "memory": 6291456 * Ki}, SCRAPED_EPOCH)
    assert snapshot.nodes["node-b"] == UsageSample({"cpu": 250, "memory": 1 * Gi}, SCRAPED_EPOCH)


def test_a_bare_items_list_reads_the_same_as_the_list_object() -> None:
    snapshot = fetch(FakeMetricsApi(nodes=NODE_LIST["items"], pods=POD_LIST["items"]))
    assert snapshot == fetch(FakeMetricsApi())


@pytest.mark.parametrize(
    ("node", "reason"),
    [
        ("node-missing", "no sample for node"),
        ("node-bad-quantity", "bad metrics: node usage: 'lots' is not a Kubernetes quantity"),
        ("node-negative", "negative cpu (-1000m)"),
        ("node-absurd", "absurd cpu: 17000m is more than 4x allocatable 4000m"),
        ("node-future", "sample time is 1770s in the future"),
        ("node-no-time", "bad metrics: missing timestamp (got None)"),
        ("node-no-usage", "bad metrics: node has no usage"),
    ],
)
def test_a_node_without_trustworthy_metrics_is_skipped_with_a_reason(node: str, reason: str) -> None:
    snapshot = fetch(FakeMetricsApi())
    assert node not in snapshot.nodes
    assert snapshot.node_errors[node].startswith(reason)


def test_pod_usage_sums_its_containers_and_leaves_out_untrustworthy_or_unknown_pods() -> None:
    snapshot = fetch(FakeMetricsApi())
    # 250.123456m + 4.876544m; 300Mi + 20Mi
    assert snapshot.pods == {"default/web-1": UsageSample({"cpu": 255, "memory": 320 * 2**20}, 1714557598.0)}


@pytest.mark.parametrize(
    ("api", "reason"),
    [
        (FakeMetricsApi(node_error=RuntimeError("503 the server is currently unable to handle the request")),
         "metrics-server unavailable: 503 the server is currently unable to handle the request"),
        (FakeMetricsApi(nodes={"kind": "Status", "message": "nope"}),
         "bad metrics-server response: NodeMetrics list has no items list"),
    ],
)  # fmt: skip
def test_an_unavailable_or_odd_metrics_api_skips_every_node(api: FakeMetricsApi, reason: str) -> None:
    snapshot = fetch(api)
    assert snapshot.nodes == {}
    assert snapshot.pods == {}
    assert snapshot.node_errors == {node.name: reason for node in NODES}


def test_nodes_are_still_judged_when_pod_metrics_fail() -> None:
    snapshot = fetch(FakeMetricsApi(pod_error=TimeoutError("timed out")))
    assert snapshot.pods == {}
    assert snapshot.nodes["node-a"].resources["cpu"] == 1523


def test_build_source_picks_the_configured_source() -> None:
    api = FakeMetricsApi()
    kubernetes_metrics = [MetricsProvider(source="KubernetesMetrics")]
    assert isinstance(build_source(kubernetes_metrics, metrics_api=api), MetricsServerSource)
    default = build_source([])
    assert isinstance(default, PrometheusSource)
    assert default.settings.url == "http://prometheus-k8s.monitoring.svc:9090"
    with pytest.raises(ValueError, match=r"needs a metrics\.k8s\.io API client"):
        build_source(kubernetes_metrics)
    with pytest.raises(ValueError, match="only one metrics provider"):
        build_source([MetricsProvider(source="Prometheus"), *kubernetes_metrics], metrics_api=api)
