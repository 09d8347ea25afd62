"""The API server's flow-control rejections (``descheduler.kube.flowcontrol``) as a metric and a /readyz
line: an operator whose descheduler stops acting on a busy cluster sees that APF refuses it, and which
FlowSchema and priority level (by UID) did."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from descheduler.kube.flowcontrol import FlowControlLedger


class FlowControlCollector(Collector):
    """``descheduler_api_flowcontrol_rejected_total``, read from the ledger at scrape time (the ledger is
    fed by every request's answer, on whatever thread sent it)."""

    def __init__(self, ledger: FlowControlLedger) -> None:
        self.ledger = ledger

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "descheduler_api_flowcontrol_rejected",
            "Requests the API server's flow control (API Priority and Fairness) rejected with 429, by the "
            "UIDs of the FlowSchema and PriorityLevelConfiguration it classified them into (response headers "
            "X-Kubernetes-PF-FlowSchema-UID / X-Kubernetes-PF-PriorityLevel-UID; 'unknown' without them).",
            labels=["flow_schema_uid", "priority_level_uid"],
        )
        for (schema, level), count in sorted(self.ledger.counts().items()):
            family.add_metric([schema, level], count)
        yield family


def register(registry: CollectorRegistry, ledger: FlowControlLedger) -> None:
    registry.register(FlowControlCollector(ledger))
