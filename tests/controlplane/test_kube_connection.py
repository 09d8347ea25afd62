"""Finding the cluster on the real API server: kubeconfig, $KUBECONFIG and the in-cluster service account,
with real tokens (TokenRequest), the control plane's own CA, and the server's own 401; and the metrics API
through the server's aggregation layer."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from descheduler.kube.connection import connect
from descheduler.kube.errors import ApiConnectionError, ApiStatusError
from descheduler.kube.metrics_api import MetricsServerApi, list_node_metrics, list_pod_metrics
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane, write_kubeconfig
from tests.controlplane.move43a_fixtures import (
    METRICS_GROUP_VERSION,
    AuditedIdentity,
    MetricsBackend,
    aggregated_metrics,
)

pytestmark = pytest.mark.controlplane


def test_an_explicit_kubeconfig_sends_its_token(
    control_plane: ControlPlane, namespace: str, audited: Callable[[str], AuditedIdentity]
) -> None:
    identity = audited("explicit")
    control_plane.apply([objects.node(f"{namespace}-node-1", namespace)])
    api = connect(str(identity.kubeconfig), qps=10, burst=10)
    try:
        nodes = api.get("/api/v1/nodes", query={"labelSelector": f"{objects.GROUP_LABEL}={namespace}"})
    finally:
        api.close()
    assert [n["metadata"]["name"] for n in nodes["items"]] == [f"{namespace}-node-1"]
    # The server filed the request under the ServiceAccount: the token was sent and accepted.
    (request,) = [r for r in identity.flush() if r.resource == "nodes"]
    assert request.verb == "list" and request.code == 200
    assert request.user_agent.startswith("load-aware-descheduler/")


def test_kubeconfig_env_is_used_when_no_path_is_given(
    control_plane: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'absent.yaml'}:{control_plane.kubeconfig}")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    server = json.loads(control_plane.kubectl("version", "-o", "json").stdout)["serverVersion"]
    api = connect(None, qps=10, burst=10)
    try:
        assert api.host == control_plane.server
        assert api.get("/version")["gitVersion"] == server["gitVersion"]
    finally:
        api.close()


def test_in_cluster_service_account_talks_tls_with_the_mounted_token_and_ca(
    control_plane: ControlPlane,
    audited: Callable[[str], AuditedIdentity],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    identity = audited("in-cluster")
    token = tmp_path / "token"
    token.write_text(identity.token)
    port = control_plane.server.rsplit(":", 1)[1]
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config to find first
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    api = connect(None, qps=10, burst=10, token_file=str(token), ca_file=str(control_plane.pki.ca_crt))
    try:
        assert api.host == f"https://127.0.0.1:{port}"
        assert api.get("/api/v1/namespaces")["kind"] == "NamespaceList"
    finally:
        api.close()
    assert [(r.verb, r.code) for r in identity.flush() if r.resource == "namespaces"] == [("list", 200)]


def test_a_wrong_token_is_an_unauthorized_status_error(control_plane: ControlPlane, tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(
        tmp_path / "wrong", control_plane.server, control_plane.pki.ca_crt, {"token": "not-the-token"}
    )
    api = connect(str(kubeconfig), qps=10, burst=10)
    try:
        with pytest.raises(ApiStatusError) as failure:
            api.get("/api/v1/pods")
    finally:
        api.close()
    assert failure.value.status == 401 and failure.value.reason == "Unauthorized"


def test_a_server_certificate_from_an_unknown_ca_is_refused(
    control_plane: ControlPlane, audited: Callable[[str], AuditedIdentity], tmp_path: Path
) -> None:
    identity = audited("no-ca")
    kubeconfig = tmp_path / "no-ca"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": control_plane.server}}],  # no CA
                "users": [{"name": "u", "user": {"token": identity.token}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    api = connect(str(kubeconfig), qps=10, burst=10)
    try:
        with pytest.raises(ApiConnectionError, match=r"(?i)certificate"):
            api.get("/api/v1/nodes")
    finally:
        api.close()
    assert [r for r in identity.flush() if r.resource == "nodes"] == []


def _metrics(
    kind: str, name: str, namespace: str = "", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": labels or {}}
    if namespace:
        metadata["namespace"] = namespace
    return {"kind": kind, "apiVersion": METRICS_GROUP_VERSION, "metadata": metadata}


def test_metrics_api_reads_node_and_pod_metrics(
    control_plane: ControlPlane, namespace: str, audited: Callable[[str], AuditedIdentity]
) -> None:
    """Through the real server's aggregation layer (metrics-server's place): the selector and the
    namespace reach the backend as sent, and the lists come back as the backend wrote them."""
    node_1, node_2 = f"{namespace}-node-1", f"{namespace}-node-2"
    backend = MetricsBackend(
        nodes=[
            _metrics("NodeMetrics", node_1, labels={"pool": "a"})
            | {"usage": {"cpu": "1250m", "memory": "2Gi"}},
            _metrics("NodeMetrics", node_2, labels={"pool": "b"})
            | {"usage": {"cpu": "10m", "memory": "1Gi"}},
        ],
        pods=[
            _metrics("PodMetrics", "web-1", "default")
            | {"containers": [{"name": "app", "usage": {"cpu": "10m", "memory": "20Mi"}}]},
            _metrics("PodMetrics", "api-1", "team-a")
            | {"containers": [{"name": "app", "usage": {"cpu": "5m", "memory": "10Mi"}}]},
        ],
        forwarded=[],
    )
    identity = audited("metrics-reader")
    with aggregated_metrics(control_plane, namespace, backend):
        api = connect(str(identity.kubeconfig), qps=10, burst=10)
        try:
            nodes = list_node_metrics(api)
            assert [(n["metadata"]["name"], n["usage"]["cpu"]) for n in nodes] == [
                (node_1, "1250m"),
                (node_2, "10m"),
            ]
            assert [n["metadata"]["name"] for n in list_node_metrics(api, label_selector="pool=b")] == [
                node_2
            ]
            assert [p["metadata"]["name"] for p in list_pod_metrics(api)] == ["web-1", "api-1"]
            bound = MetricsServerApi(api)
            assert [p["metadata"]["namespace"] for p in bound.list_pod_metrics(namespace="team-a")] == [
                "team-a"
            ]
            assert len(bound.list_node_metrics()) == 2
        finally:
            api.close()
    base = f"/apis/{METRICS_GROUP_VERSION}"
    assert [f for f in backend.forwarded if "?" in f or "/pods" in f] == [
        f"{base}/nodes?labelSelector=pool%3Db",
        f"{base}/pods",
        f"{base}/namespaces/team-a/pods",
    ]
    assert {(r.resource, r.code) for r in identity.flush()} == {("nodes", 200), ("pods", 200)}
