"""Reads of ``metrics.k8s.io/v1beta1`` (metrics-server) for the metrics-server usage source.

Items are returned as decoded dicts (``NodeMetrics`` / ``PodMetrics``); the usage source parses and
validates them. An answer without an ``items`` list is an error, never an empty result.
"""

from __future__ import annotations

from typing import Any

from descheduler.kube.api import KubeApi, path_segment
from descheduler.kube.errors import DecodeError

BASE = "/apis/metrics.k8s.io/v1beta1"


def _items(answer: Any, what: str) -> list[dict[str, Any]]:
    if not isinstance(answer, dict) or not isinstance(answer.get("items"), list):
        raise DecodeError(f"{what}: answer has no items list")
    return [item for item in answer["items"] if isinstance(item, dict)]


def list_node_metrics(
    api: KubeApi, *, label_selector: str | None = None, timeout: float | None = None
) -> list[dict[str, Any]]:
    answer = api.request("GET", f"{BASE}/nodes", query={"labelSelector": label_selector}, timeout=timeout)
    return _items(answer, "metrics.k8s.io nodes")


def list_pod_metrics(
    api: KubeApi,
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
    timeout: float | None = None,
) -> list[dict[str, Any]]:
    path = f"{BASE}/namespaces/{path_segment(namespace)}/pods" if namespace else f"{BASE}/pods"
    answer = api.request("GET", path, query={"labelSelector": label_selector}, timeout=timeout)
    return _items(answer, "metrics.k8s.io pods")


class MetricsServerApi:
    """The two reads bound to one client, for code that takes an object rather than functions."""

    def __init__(self, api: KubeApi, *, timeout: float | None = None) -> None:
        self.api = api
        self.timeout = timeout

    def list_node_metrics(self, label_selector: str | None = None) -> list[dict[str, Any]]:
        return list_node_metrics(self.api, label_selector=label_selector, timeout=self.timeout)

    def list_pod_metrics(
        self, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict[str, Any]]:
        return list_pod_metrics(
            self.api, namespace=namespace, label_selector=label_selector, timeout=self.timeout
        )
