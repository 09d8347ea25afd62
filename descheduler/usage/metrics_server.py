"""Node and pod usage from metrics-server (``metrics.k8s.io/v1beta1`` NodeMetrics and PodMetrics).

Caveat: metrics-server reports memory as the cgroup *working set*, which includes active page cache
(file pages recently used). A node busy with file I/O can therefore look fuller than its reclaimable
memory says, and memory-driven evictions may fire where the Prometheus source (``MemTotal -
MemAvailable``, container RSS) would not. Use Prometheus when memory thresholds matter.

Its CPU is averaged over metrics-server's own short window (the ``window`` field, typically 15-30 s), not
over a configurable one, so it is noisier than the Prometheus source's 5-minute average.

The HTTP client lives in ``descheduler.kube.metrics_api``; this module only needs the two list calls of
:class:`MetricsApi`, which keeps it free of the ``kubernetes`` package and testable with plain dicts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from descheduler.cluster.types import Node, Pod, UsageSample, UsageSnapshot
from descheduler.units import parse_quantity
from descheduler.usage.samples import build_sample, join_reasons, node_snapshot

__all__ = ["MetricsApi", "MetricsServerSource"]

RawList = Mapping[str, Any] | Sequence[Mapping[str, Any]]
"""A ``NodeMetricsList``/``PodMetricsList`` as the API returns it, or just its ``items``."""


class MetricsApi(Protocol):
    """The two calls this source needs from the metrics.k8s.io API."""

    def list_node_metrics(self) -> RawList: ...

    def list_pod_metrics(self) -> RawList: ...


class _BadItem(ValueError):
    pass


def _items(raw: RawList, kind: str) -> Sequence[Mapping[str, Any]]:
    items = raw.get("items") if isinstance(raw, Mapping) else raw
    if not isinstance(items, Sequence) or isinstance(items, str | bytes):
        raise _BadItem(f"{kind} list has no items list")
    return items


def _timestamp(item: Mapping[str, Any]) -> float:
    text = item.get("timestamp")
    if not isinstance(text, str):
        raise _BadItem(f"missing timestamp (got {text!r})")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise _BadItem(f"bad timestamp {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _usage(usage: Any, where: str) -> dict[str, float]:
    if not isinstance(usage, Mapping):
        raise _BadItem(f"{where} has no usage")
    try:
        return {
            "cpu": float(parse_quantity(usage["cpu"]) * 1000),
            "memory": float(parse_quantity(usage["memory"])),
        }
    except KeyError as error:
        raise _BadItem(f"{where} usage has no {error.args[0]}") from None
    except ValueError as error:
        raise _BadItem(f"{where} usage: {error}") from None


def _pod_usage(item: Mapping[str, Any]) -> dict[str, float]:
    containers = item.get("containers")
    if not isinstance(containers, Sequence) or isinstance(containers, str):
        raise _BadItem("pod metrics without a containers list")
    total = {"cpu": 0.0, "memory": 0.0}
    for container in containers:
        name = container.get("name", "?") if isinstance(container, Mapping) else "?"
        usage = _usage(
            container.get("usage") if isinstance(container, Mapping) else None, f"container {name}"
        )
        for resource, amount in usage.items():
            total[resource] += amount
    return total


def _index(items: Sequence[Any], with_namespace: bool) -> dict[str, Mapping[str, Any]]:
    """Items by ``name`` (nodes) or ``namespace/name`` (pods); items without those are ignored."""
    index: dict[str, Mapping[str, Any]] = {}
    for item in items:
        metadata = item.get("metadata") if isinstance(item, Mapping) else None
        if not isinstance(metadata, Mapping) or not isinstance(metadata.get("name"), str):
            continue
        if not with_namespace:
            index[metadata["name"]] = item
        elif isinstance(metadata.get("namespace"), str):
            index[f"{metadata['namespace']}/{metadata['name']}"] = item
    return index


def _judge(
    item: Mapping[str, Any] | None,
    usage: Callable[[Mapping[str, Any]], dict[str, float]],
    allocatable: Mapping[str, int],
    now: float,
) -> UsageSample | str:
    if item is None:
        return "no sample for node"
    try:
        sample = build_sample(usage(item), _timestamp(item), allocatable=allocatable, now=now)
    except _BadItem as error:
        return f"bad metrics: {error}"
    return sample if isinstance(sample, UsageSample) else join_reasons(sample)


def _node_usage(item: Mapping[str, Any]) -> dict[str, float]:
    return _usage(item.get("usage"), "node")


class MetricsServerSource:
    """Usage from metrics-server. ``clock`` is only used to distrust sample times in the future."""

    def __init__(self, api: MetricsApi, *, clock: Callable[[], float] = time.time) -> None:
        self._api = api
        self._clock = clock
        self._now: float | None = None

    def fetch(self, nodes: Sequence[Node], pods: Sequence[Pod]) -> UsageSnapshot:
        usage = self.fetch_nodes(nodes)
        if not usage.nodes:  # no node can be judged: pod usage would serve nothing
            return usage
        return UsageSnapshot(
            nodes=usage.nodes, pods=self.fetch_pods(None, nodes, pods), node_errors=usage.node_errors
        )

    def fetch_nodes(self, nodes: Sequence[Node]) -> UsageSnapshot:
        now = self._now = self._clock()
        try:
            raw = self._api.list_node_metrics()
        except Exception as error:  # the client's errors are not ours to know; the cycle must go on
            reason = f"metrics-server unavailable: {' '.join(str(error).split()) or type(error).__name__}"
            return UsageSnapshot(node_errors={node.name: reason for node in nodes})
        try:
            by_node = _index(_items(raw, "NodeMetrics"), with_namespace=False)
        except _BadItem as error:
            reason = f"bad metrics-server response: {error}"
            return UsageSnapshot(node_errors={node.name: reason for node in nodes})
        return node_snapshot(
            nodes, lambda node: _judge(by_node.get(node.name), _node_usage, node.allocatable, now)
        )

    def fetch_pods(
        self, wanted: Collection[str] | None, nodes: Sequence[Node], pods: Sequence[Pod]
    ) -> dict[str, UsageSample]:
        """Pods on the ``wanted`` nodes (None: all). metrics-server cannot filter by node: one list call."""
        if wanted is not None:
            chosen = set(wanted)
            pods = [p for p in pods if p.node_name in chosen]
        now = self._now if self._now is not None else self._clock()
        return self._pod_samples(nodes, pods, now)

    def _pod_samples(self, nodes: Sequence[Node], pods: Sequence[Pod], now: float) -> dict[str, UsageSample]:
        """Pods without a trustworthy sample are left out: the planner treats their usage as unknown."""
        if not pods:
            return {}
        try:
            by_pod = _index(_items(self._api.list_pod_metrics(), "PodMetrics"), with_namespace=True)
        except Exception:  # nodes can still be judged without pod usage
            return {}
        allocatable = {node.name: node.allocatable for node in nodes}
        samples: dict[str, UsageSample] = {}
        for pod in pods:
            sample = _judge(by_pod.get(pod.key), _pod_usage, allocatable.get(pod.node_name, {}), now)
            if isinstance(sample, UsageSample):
                samples[pod.key] = sample
        return samples
