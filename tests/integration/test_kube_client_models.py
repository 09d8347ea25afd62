"""The official Kubernetes client's models deserialize the stand-in's answers the real control plane
cannot give here: the metrics API (no metrics-server runs there) and a watch from compacted history.

Everything else is checked against the real kube-apiserver in
``tests/controlplane/test_kube_client_models.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from tests.apiserver import ApiServer, objects

pytestmark = pytest.mark.integration


@pytest.fixture
def official(apiserver: ApiServer) -> Iterator[client.ApiClient]:
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(apiserver.kubeconfig_path), client_configuration=cfg)
    api_client = client.ApiClient(cfg)
    yield api_client
    api_client.close()


@pytest.fixture
def cluster(apiserver: ApiServer) -> ApiServer:
    for obj in (
        objects.namespace("default"),
        objects.node("node-1"),
        objects.node("node-2"),
        objects.pod("web-1", node="node-1"),
    ):
        apiserver.create(obj)
    return apiserver


def test_a_watch_from_compacted_history_is_gone_at_once(
    cluster: ApiServer, official: client.ApiClient
) -> None:
    """410 Gone for a compacted resourceVersion: a young real server replays such a version from its
    watch cache instead, so this answer is checked here."""
    core = client.CoreV1Api(official)
    start_rv = core.list_pod_for_all_namespaces().metadata.resource_version
    cluster.create(objects.pod("web-3", node="node-2"))
    cluster.compact()
    started = time.monotonic()
    with pytest.raises(ApiException) as gone:
        for _ in watch.Watch().stream(
            core.list_pod_for_all_namespaces, resource_version=start_rv, timeout_seconds=1
        ):
            pass
    assert gone.value.status == 410
    assert time.monotonic() - started < 1


def test_metrics_api_answers_match_the_metrics_server_shape(
    cluster: ApiServer, official: client.ApiClient
) -> None:
    cluster.set_node_metrics("node-1", {"cpu": "1250m", "memory": "2Gi"})
    cluster.set_pod_metrics("default", "web-1", {"app": {"cpu": "10m", "memory": "20Mi"}})
    custom = client.CustomObjectsApi(official)
    nodes = custom.list_cluster_custom_object("metrics.k8s.io", "v1beta1", "nodes")
    assert nodes["kind"] == "NodeMetricsList" and nodes["items"][0]["usage"] == {
        "cpu": "1250m",
        "memory": "2Gi",
    }
    pods = custom.list_namespaced_custom_object("metrics.k8s.io", "v1beta1", "default", "pods")
    assert pods["items"][0]["containers"][0]["usage"]["cpu"] == "10m"
    assert "resourceVersion" not in pods["items"][0]["metadata"]
