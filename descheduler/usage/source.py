"""The one interface the planner's usage input goes through, and the factory that picks a source."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol

from descheduler.cluster.types import Node, Pod, UsageSample, UsageSnapshot
from descheduler.config.providers import MetricsProvider, default_providers
from descheduler.usage.metrics_server import MetricsApi, MetricsServerSource
from descheduler.usage.prometheus import PrometheusSource

__all__ = ["UsageSource", "build_source"]


class UsageSource(Protocol):
    """Measured usage for one cycle.

    Never raises for data problems or an unavailable backend: nodes without trustworthy usage are listed
    in ``UsageSnapshot.node_errors`` with the reason, so the planner skips them and carries on.

    A cycle fetches in two steps: ``fetch_nodes`` for every node, then ``fetch_pods`` for the pods of the
    nodes that need pod usage (``planner.pod_usage_nodes``: the nodes over a high threshold, plus any a
    caller adds, such as nodes whose pods changed inside the usage window). ``fetch`` does both for all.
    """

    def fetch(self, nodes: Sequence[Node], pods: Sequence[Pod]) -> UsageSnapshot: ...

    def fetch_nodes(self, nodes: Sequence[Node]) -> UsageSnapshot: ...

    def fetch_pods(
        self, wanted: Collection[str] | None, nodes: Sequence[Node], pods: Sequence[Pod]
    ) -> Mapping[str, UsageSample]: ...


def build_source(
    providers: Sequence[MetricsProvider],
    *,
    metrics_api: MetricsApi | None = None,
    clock: Callable[[], float] = time.time,
) -> UsageSource:
    """The source for the configured ``metricsProviders`` (empty means :func:`default_providers`).

    Raises ``ValueError`` for a configuration that cannot work (more than one provider, or metrics-server
    without an API client): that is a start-up error, not a cycle error.
    """
    chosen = list(providers) or default_providers()
    if len(chosen) > 1:
        raise ValueError(f"only one metrics provider can be used, got {len(chosen)}")
    provider = chosen[0]
    if provider.source == "KubernetesMetrics":
        if metrics_api is None:
            raise ValueError("metricsProviders source KubernetesMetrics needs a metrics.k8s.io API client")
        return MetricsServerSource(metrics_api, clock=clock)
    return PrometheusSource(provider.prometheus_settings, clock=clock)
