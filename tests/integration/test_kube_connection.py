"""Finding the cluster: kubeconfig, $KUBECONFIG and the in-cluster service account, over real HTTP(S)."""

from __future__ import annotations

from pathlib import Path

import pytest

from descheduler.kube.connection import connect
from descheduler.kube.errors import ApiConnectionError, ApiStatusError
from descheduler.kube.metrics_api import MetricsServerApi, list_node_metrics, list_pod_metrics
from tests.apiserver import ApiServer, objects

pytestmark = pytest.mark.integration


def test_an_explicit_kubeconfig_sends_its_token(apiserver: ApiServer) -> None:
    apiserver.create(objects.node("node-1"))
    api = connect(str(apiserver.kubeconfig_path), qps=10, burst=10)
    try:
        nodes = api.get("/api/v1/nodes")
    finally:
        api.close()
    assert [n["metadata"]["name"] for n in nodes["items"]] == ["node-1"]
    (request,) = apiserver.requests_for(resource="nodes")
    assert request.authorization == "Bearer test-token"
    assert request.user_agent.startswith("load-aware-descheduler/")


def test_kubeconfig_env_is_used_when_no_path_is_given(
    apiserver: ApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent.yaml'}:{apiserver.kubeconfig_path}")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    api = connect(None, qps=10, burst=10)
    try:
        assert api.get("/version")["gitVersion"] == "v1.32.4"
    finally:
        api.close()


def test_in_cluster_service_account_talks_tls_with_the_mounted_token_and_ca(
    tls_apiserver: ApiServer, tls_files: tuple[str, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca, _, _ = tls_files
    token = tmp_path / "token"
    token.write_text("test-token")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(tls_apiserver.port))
    api = connect(None, qps=10, burst=10, token_file=str(token), ca_file=ca)
    try:
        assert api.host == f"https://127.0.0.1:{tls_apiserver.port}"
        assert api.get("/api/v1/namespaces")["kind"] == "NamespaceList"
    finally:
        api.close()
    assert tls_apiserver.requests_for(resource="namespaces")[0].authorization.lower() == "bearer test-token"


def test_a_wrong_token_is_an_unauthorized_status_error(apiserver: ApiServer, tmp_path: Path) -> None:
    kubeconfig = apiserver.write_kubeconfig(tmp_path / "wrong", token="not-the-token")
    api = connect(str(kubeconfig), qps=10, burst=10)
    try:
        with pytest.raises(ApiStatusError) as failure:
            api.get("/api/v1/pods")
    finally:
        api.close()
    assert failure.value.status == 401 and failure.value.reason == "Unauthorized"


def test_a_server_certificate_from_an_unknown_ca_is_refused(tls_apiserver: ApiServer, tmp_path: Path) -> None:
    kubeconfig = tls_apiserver.write_kubeconfig(tmp_path / "no-ca")  # no certificate-authority
    api = connect(str(kubeconfig), qps=10, burst=10)
    try:
        with pytest.raises(ApiConnectionError, match=r"(?i)certificate"):
            api.get("/api/v1/nodes")
    finally:
        api.close()
    assert tls_apiserver.requests_for(resource="nodes") == []


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
