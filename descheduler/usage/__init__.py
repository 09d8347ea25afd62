"""Where node and pod usage comes from: Prometheus (default) or metrics-server, behind ``UsageSource``."""

from descheduler.usage.metrics_server import MetricsApi, MetricsServerSource
from descheduler.usage.prometheus import PrometheusSource
from descheduler.usage.source import UsageSource, build_source

__all__ = [
    "MetricsApi",
    "MetricsServerSource",
    "PrometheusSource",
    "UsageSource",
    "build_source",
]
