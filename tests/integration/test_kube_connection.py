"""The metrics.k8s.io client against the stand-in, which serves the metrics API: the real control plane of
tests/controlplane runs no metrics-server. The connection tests moved to tests/controlplane/."""

from __future__ import annotations

import pytest

from descheduler.kube.connection import connect
from descheduler.kube.metrics_api import MetricsServerApi, list_node_metrics, list_pod_metrics
from tests.apiserver import ApiServer

pytestmark = pytest.mark.integration


def test_metrics_api_reads_node_and_pod_metrics(apiserver: ApiServer) -> None:
    apiserver.set_node_metrics("node-1", {"cpu": "1250m", "memory": "2Gi"}, labels={"pool": "a"})
    apiserver.set_node_metrics("node-2", {"cpu": "10m", "memory": "1Gi"}, labels={"pool": "b"})
    apiserver.set_pod_metrics("default", "web-1", {"app": {"cpu": "10m", "memory": "20Mi"}})
    apiserver.set_pod_metrics("team-a", "api-1", {"app": {"cpu": "5m", "memory": "10Mi"}})
    api = connect(str(apiserver.kubeconfig_path), qps=10, burst=10)
    try:
        nodes = list_node_metrics(api)
        assert [(n["metadata"]["name"], n["usage"]["cpu"]) for n in nodes] == [
            ("node-1", "1250m"),
            ("node-2", "10m"),
        ]
        assert [n["metadata"]["name"] for n in list_node_metrics(api, label_selector="pool=b")] == ["node-2"]
        assert [p["metadata"]["name"] for p in list_pod_metrics(api)] == ["web-1", "api-1"]
        bound = MetricsServerApi(api)
        assert [p["metadata"]["namespace"] for p in bound.list_pod_metrics(namespace="team-a")] == ["team-a"]
        assert len(bound.list_node_metrics()) == 2
    finally:
        api.close()
