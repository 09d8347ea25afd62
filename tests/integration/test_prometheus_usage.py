"""A real Prometheus, on series written in node-exporter and cAdvisor shapes, yields the usage put in.

The data ends 7.5 s before the query instant T (a query between two scrapes), so every expected sample
time is T - 7.5 and the 5-minute window holds exactly 20 samples of each series.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from descheduler.cluster.types import Node, Pod, UsageSnapshot
from descheduler.config.providers import PrometheusSettings
from descheduler.usage.prometheus import MAX_POD_BATCHES, QUERY_NAMES, PrometheusSource
from tests.support.prometheus import (
    Container,
    PrometheusServer,
    Series,
    cadvisor,
    node_exporter,
    running_prometheus,
    sample_times,
)

pytestmark = pytest.mark.integration

Gi = 2**30
Mi = 2**20
T = 1_700_000_000.0
LAST = T - 7.5
TIMES = sample_times(T - 3600 + 7.5, LAST)

IDLE_HEAVY = {"user": 0.30, "system": 0.10, "nice": 0.02, "irq": 0.01, "softirq": 0.02, "iowait": 0.20,
              "steal": 0.05, "idle": 0.30}  # fmt: skip
"""Per cpu: busy = user+system+nice+irq+softirq = 0.45 cores; iowait and steal are not busy."""
BUSY = {"user": 0.6, "system": 0.2, "idle": 0.2}
"""Per cpu: 0.8 cores busy."""


def _before(t_change: float, before: float, after: float) -> Any:
    return lambda t: before if t < t_change else after


def _alternating(first: float, second: float) -> Any:
    return lambda t: first if round((LAST - t) / 15) % 2 == 0 else second


def _series() -> list[Series]:
    series: list[Series] = []
    # node-a: 4 cpus at 0.45 busy each; 16Gi total, 10Gi available in the last 5 minutes (6Gi before),
    # 2Gi free and 7Gi page cache, so "total - free" would say 14Gi.
    series += node_exporter(
        "node-a", TIMES, cpus=4, mode_rates=IDLE_HEAVY, mem_total=16 * Gi,
        mem_available=_before(T - 300, 6 * Gi, 10 * Gi), mem_free=2 * Gi, cached=7 * Gi, buffers=1 * Gi,
        extra_labels={"node": "node-a"},
    )  # fmt: skip
    # node-b: scraped as host:port; every counter restarts 157.5 s before T; available memory alternates.
    series += node_exporter(
        "node-b:9100", TIMES, cpus=2, mode_rates=BUSY, mem_total=8 * Gi,
        mem_available=_alternating(3 * Gi, 5 * Gi), mem_free=1 * Gi, cached=3 * Gi,
        reset_at=T - 157.5, extra_labels={"node": "node-b"},
    )  # fmt: skip
    # node-late: its exporter stopped 2 minutes before T; its last sample is still in the window.
    late = [t for t in TIMES if t <= T - 127.5]
    series += node_exporter(
        "node-late", late, cpus=2, mode_rates=BUSY, mem_total=4 * Gi, mem_available=3 * Gi,
        mem_free=1 * Gi, cached=2 * Gi, extra_labels={"node": "node-late"},
    )  # fmt: skip
    # node-gone: stopped 20 minutes before T, nothing in the window.
    gone = [t for t in TIMES if t <= T - 1200]
    series += node_exporter(
        "node-gone", gone, cpus=1, mode_rates=BUSY, mem_total=4 * Gi, mem_available=3 * Gi,
        mem_free=1 * Gi, cached=1 * Gi, extra_labels={"node": "node-gone"},
    )  # fmt: skip
    # node-nan: one NaN reading of MemAvailable inside the window.
    series += node_exporter(
        "node-nan", TIMES, cpus=1, mode_rates=BUSY, mem_total=4 * Gi,
        mem_available=lambda t: float("nan") if t == T - 67.5 else 3 * Gi, mem_free=1 * Gi, cached=1 * Gi,
        extra_labels={"node": "node-nan"},
    )  # fmt: skip
    # node-negative: MemAvailable above MemTotal (a broken exporter).
    series += node_exporter(
        "node-negative", TIMES, cpus=1, mode_rates=BUSY, mem_total=8 * Gi, mem_available=9 * Gi,
        mem_free=1 * Gi, cached=1 * Gi, extra_labels={"node": "node-negative"},
    )  # fmt: skip
    # node-absurd: 8 cpus fully busy, but the node object says 1 cpu allocatable.
    series += node_exporter(
        "node-absurd", TIMES, cpus=8, mode_rates={"user": 1.0}, mem_total=8 * Gi, mem_available=4 * Gi,
        mem_free=1 * Gi, cached=1 * Gi, extra_labels={"node": "node-absurd"},
    )  # fmt: skip
    web = {
        "app": Container(cpu=0.25, rss=300 * Mi, cache=600 * Mi),
        "sidecar": Container(cpu=0.05, rss=20 * Mi),
    }
    series += cadvisor("default", "web-1", "node-a", TIMES, web)
    series += cadvisor(
        "default", "batch-1", "node-b", TIMES, {"worker": Container(cpu=0.75, rss=1 * Gi, reset_at=T - 97.5)}
    )
    series += cadvisor("default", "runaway", "node-a", TIMES, {"spin": Container(cpu=50.0, rss=1 * Mi)})
    series += cadvisor("other", "not-asked-for", "node-a", TIMES, {"x": Container(cpu=0.1, rss=1 * Mi)})
    return series


def _node(name: str, cpu: int = 4000, memory: int = 15 * Gi) -> Node:
    return Node(name=name, labels={}, allocatable={"cpu": cpu, "memory": memory})


NODES = [
    _node("node-a"),
    _node("node-b", cpu=2000, memory=7 * Gi),
    _node("node-late", cpu=2000),
    _node("node-gone"),
    _node("node-missing"),
    _node("node-nan"),
    _node("node-negative"),
    _node("node-absurd", cpu=1000),
]
PODS = [
    Pod(namespace="default", name=name, uid=name, node_name=node)
    for name, node in (("web-1", "node-a"), ("batch-1", "node-b"), ("runaway", "node-a"), ("ghost", "node-a"))
]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    with running_prometheus(_series(), tmp_path_factory.mktemp("prometheus-usage")) as server:
        yield server


def _fetch(
    server: PrometheusServer, at: float = T, **settings: Any
) -> tuple[UsageSnapshot, PrometheusSource]:
    source = PrometheusSource(
        PrometheusSettings.model_validate({"url": server.url, **settings}), clock=lambda: at
    )
    try:
        return source.fetch(NODES, PODS), source
    finally:
        source.close()


@pytest.mark.parametrize(
    ("node", "cpu", "memory", "timestamp"),
    [
        ("node-a", 1800, 6 * Gi, LAST),  # 4 x 0.45 busy; iowait/steal/idle left out; cache left out
        ("node-b", 1600, 4 * Gi, LAST),  # counter reset inside the window; mean of 3Gi/5Gi available
        ("node-late", None, 1 * Gi, T - 127.5),  # the sample time is the last scrape, not the query time
    ],
)
def test_node_usage_equals_the_busy_cpu_and_non_cache_memory_put_into_prometheus(
    prometheus: PrometheusServer, node: str, cpu: int | None, memory: int, timestamp: float
) -> None:
    snapshot, _ = _fetch(prometheus)
    sample = snapshot.nodes[node]
    if cpu is not None:
        assert sample.resources["cpu"] == pytest.approx(cpu, abs=1)
    assert sample.resources["memory"] == pytest.approx(memory, abs=1)
    assert sample.timestamp == timestamp
    assert set(sample.resources) == {"cpu", "memory"}


def test_a_node_whose_exporter_stopped_under_reports_cpu_so_its_old_sample_time_matters(
    prometheus: PrometheusServer,
) -> None:
    snapshot, _ = _fetch(prometheus)
    # rate() divides by the whole 300 s window: 165 s of samples, extrapolated by 7.5 s at each end,
    # at 2 x 0.8 cores gives 180 x 1.6 / 300 = 0.96 cores. Only the sample time (T - 127.5) tells the
    # planner this number is stale; the evaluation time would call it fresh.
    late = snapshot.nodes["node-late"]
    assert late.resources["cpu"] == pytest.approx(960, abs=1)
    assert late.timestamp == T - 127.5


def test_node_memory_leaves_page_cache_out(prometheus: PrometheusServer) -> None:
    snapshot, _ = _fetch(prometheus)
    used_with_cache = 16 * Gi - 2 * Gi  # MemTotal - MemFree on node-a
    assert snapshot.nodes["node-a"].resources["memory"] == 16 * Gi - 10 * Gi
    assert snapshot.nodes["node-a"].resources["memory"] < used_with_cache - 7 * Gi


@pytest.mark.parametrize(
    ("node", "reason"),
    [
        ("node-gone", "no sample for node"),
        ("node-missing", "no sample for node"),
        ("node-nan", "NaN memory"),
        ("node-negative", "negative memory"),
        ("node-absurd", "absurd cpu: 8000m is more than 4x allocatable 1000m"),
    ],
)
def test_nodes_without_trustworthy_usage_are_skipped_with_a_reason(
    prometheus: PrometheusServer, node: str, reason: str
) -> None:
    snapshot, _ = _fetch(prometheus)
    assert node not in snapshot.nodes
    assert reason in snapshot.node_errors[node]


def test_pod_usage_sums_the_workload_containers_rss_and_cpu_only(prometheus: PrometheusServer) -> None:
    snapshot, _ = _fetch(prometheus)
    web = snapshot.pods["default/web-1"]
    # app + sidecar; not the pause container, not the pod-level aggregate, not the 600Mi page cache
    assert web.resources["cpu"] == pytest.approx(300, abs=1)
    assert web.resources["memory"] == pytest.approx(320 * Mi, abs=1)
    assert web.timestamp == LAST
    batch = snapshot.pods["default/batch-1"]  # its container restarted inside the window
    assert batch.resources["cpu"] == pytest.approx(750, abs=1)
    assert batch.resources["memory"] == pytest.approx(1 * Gi, abs=1)


def test_pods_without_series_not_asked_for_or_absurd_are_left_out(prometheus: PrometheusServer) -> None:
    snapshot, _ = _fetch(prometheus)
    assert set(snapshot.pods) == {"default/web-1", "default/batch-1"}  # not ghost, runaway, other/*


def test_a_cycle_sends_the_same_number_of_queries_whatever_the_cluster_size(
    prometheus: PrometheusServer,
) -> None:
    source = PrometheusSource(PrometheusSettings(url=prometheus.url), clock=lambda: T)
    try:
        source.fetch(NODES[:1], PODS[:1])
        after_one = source.queries_sent
        source.fetch(NODES, PODS)
        source.fetch(NODES * 50, PODS * 50)
    finally:
        source.close()
    assert after_one == len(QUERY_NAMES)
    assert source.queries_sent == 3 * len(QUERY_NAMES)


def test_pod_usage_is_fetched_only_for_the_wanted_nodes_so_prometheus_touches_fewer_samples(
    prometheus: PrometheusServer,
) -> None:
    source = PrometheusSource(PrometheusSettings(url=prometheus.url), clock=lambda: T)
    try:
        source.fetch_nodes(NODES)
        nodes_only = source.cycle_samples
        one = dict(source.fetch_pods({"node-a"}, NODES, PODS))
        with_one = source.cycle_samples
        source.fetch_nodes(NODES)
        every = dict(source.fetch_pods(None, NODES, PODS))
        with_every = source.cycle_samples
    finally:
        source.close()
    assert set(one) == {"default/web-1"}
    assert set(every) == {"default/web-1", "default/batch-1"}
    assert one["default/web-1"] == every["default/web-1"]
    assert 0 < nodes_only < with_one < with_every


def test_fetched_pod_samples_answer_get_and_in_like_a_dict(prometheus: PrometheusServer) -> None:
    source = PrometheusSource(PrometheusSettings(url=prometheus.url), clock=lambda: T)
    try:
        source.fetch_nodes(NODES)
        samples = source.fetch_pods({"node-a"}, NODES, PODS)
    finally:
        source.close()
    plain = dict(samples)
    for key in ("default/web-1", "default/batch-1", "default/nobody", "default/web-1"):  # twice: memoised
        assert samples.get(key) == plain.get(key)
        assert samples.get(key, "absent") == plain.get(key, "absent")
        assert (key in samples) == (key in plain)
    assert 42 not in samples  # type: ignore[comparison-overlap]


def test_pod_queries_stay_bounded_however_many_nodes_need_pod_usage(prometheus: PrometheusServer) -> None:
    nodes = [_node(f"node-{i:04d}") for i in range(3000)]
    pods = [
        Pod(namespace="default", name=f"p-{i}", uid=f"p-{i}", node_name=f"node-{i:04d}") for i in range(1000)
    ]
    source = PrometheusSource(PrometheusSettings(url=prometheus.url), clock=lambda: T)
    try:
        source.fetch_nodes(nodes)
        source.fetch_pods({p.node_name for p in pods}, nodes, pods)
    finally:
        source.close()
    assert source.cycle_queries == 4 + 3 * MAX_POD_BATCHES  # 1,000 names: 5 batches of 200, capped at 4


def test_a_few_nodes_needing_pod_usage_take_one_query_per_pod_query(prometheus: PrometheusServer) -> None:
    source = PrometheusSource(PrometheusSettings(url=prometheus.url), clock=lambda: T)
    try:
        source.fetch_nodes(NODES)
        source.fetch_pods({"node-a", "node-b"}, NODES, PODS)
    finally:
        source.close()
    assert source.cycle_queries == 4 + 3


def test_data_older_than_the_window_gives_no_sample_for_any_node(prometheus: PrometheusServer) -> None:
    snapshot, _ = _fetch(prometheus, at=T + 1800)
    assert snapshot.nodes == {}
    assert set(snapshot.node_errors.values()) == {"no sample for node"}


@pytest.mark.parametrize(
    ("settings", "node", "memory"),
    [
        ({"nodeLabel": "node", "nodeRelabel": None}, "node-b", 4 * Gi),
        ({"window": "10m"}, "node-a", 8 * Gi),  # half the window at 10Gi used, half at 6Gi
        (
            {
                "queries": {
                    "nodeMemory": "sum by (instance) (node_memory_MemTotal_bytes - node_memory_MemFree_bytes)"
                }
            },
            "node-a",
            14 * Gi,
        ),
    ],
    ids=["node-label", "window", "query-override"],
)
def test_label_window_and_query_settings_change_what_is_read(
    prometheus: PrometheusServer, settings: dict[str, Any], node: str, memory: int
) -> None:
    snapshot, _ = _fetch(prometheus, **settings)
    assert snapshot.nodes[node].resources["memory"] == pytest.approx(memory, abs=1)


def test_without_the_port_strip_a_host_port_instance_matches_no_node(prometheus: PrometheusServer) -> None:
    snapshot, _ = _fetch(prometheus, nodeRelabel=None)
    assert "node-a" in snapshot.nodes
    assert snapshot.node_errors["node-b"] == "no sample for node"


def test_a_query_prometheus_rejects_skips_every_node_with_its_error(prometheus: PrometheusServer) -> None:
    snapshot, _ = _fetch(
        prometheus, queries={"nodeCpu": "sum by (instance) (rate(node_cpu_seconds_total[5m]"}
    )
    assert snapshot.nodes == {}
    assert snapshot.node_errors["node-a"].startswith("nodeCpu query failed: HTTP 400: bad_data: ")
    assert "parse error: unclosed left parenthesis" in snapshot.node_errors["node-a"]
    assert "default/web-1" in snapshot.pods  # pod queries were still sent and answered


def test_several_series_for_one_node_are_distrusted(prometheus: PrometheusServer) -> None:
    per_cpu = 'sum by (instance, cpu) (rate(node_cpu_seconds_total{mode="user"}[5m]))'
    snapshot, _ = _fetch(prometheus, queries={"nodeCpu": per_cpu})
    assert "node-a" not in snapshot.nodes
    assert snapshot.node_errors["node-a"] == "4 series map to this node in nodeCpu"
