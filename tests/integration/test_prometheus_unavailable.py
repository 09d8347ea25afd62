"""A Prometheus that is down, slow, or not Prometheus at all costs one bounded cycle and skips the nodes."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from descheduler.cluster.types import Node, Pod
from descheduler.config.providers import PrometheusSettings
from descheduler.usage.prometheus import PrometheusSource
from tests.support.ports import free_port
from tests.support.prometheus import LocalHttpServer, canned_server

pytestmark = pytest.mark.integration

NODES = [Node(name=f"node-{i}", labels={}, allocatable={"cpu": 4000, "memory": 2**34}) for i in range(3)]
PODS = [Pod(namespace="default", name="web-1", uid="web-1", node_name="node-0")]


def _source(url: str, timeout: str = "1s") -> PrometheusSource:
    return PrometheusSource(PrometheusSettings.model_validate({"url": url, "timeout": timeout}))


@pytest.fixture
def slow() -> Iterator[LocalHttpServer]:
    server = canned_server(delay_s=10.0)
    try:
        yield server
    finally:
        server.close()


def test_a_prometheus_that_is_down_skips_every_node_at_once() -> None:
    source = _source(f"http://127.0.0.1:{free_port()}")  # nothing listens there
    started = time.monotonic()
    snapshot = source.fetch(NODES, [])
    elapsed = time.monotonic() - started
    source.close()
    assert snapshot.nodes == {}
    assert set(snapshot.node_errors) == {"node-0", "node-1", "node-2"}
    assert set(snapshot.node_errors.values()) == {"prometheus unreachable: [Errno 111] Connection refused"}
    assert source.queries_sent == 1  # no point asking the other queries of a server that is not there
    assert elapsed < 2.0


def test_a_slow_prometheus_costs_one_timeout_not_one_per_query(slow: LocalHttpServer) -> None:
    source = _source(slow.url, timeout="1s")
    started = time.monotonic()
    snapshot = source.fetch(NODES, [])
    elapsed = time.monotonic() - started
    source.close()
    assert snapshot.nodes == {}
    assert set(snapshot.node_errors.values()) == {"prometheus timed out after 1s"}
    assert source.queries_sent == 1
    assert 0.9 < elapsed < 3.0


@pytest.mark.parametrize(
    ("status", "body", "content_type", "reason", "queries"),
    [
        (200, b"<html>Sign in</html>", "text/html", "nodeCpu query got a response that is not JSON", 7),
        (200, b'{"status":"success","data":{"resultType":"matrix","result":{}}}', "application/json",
         "nodeCpu query got a malformed response: expected a vector result, got dict", 7),
        (200, b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1]}]}}',
         "application/json", "not an instant-vector sample: {'metric': {}, 'value': [1]}", 7),
        (503, b"Service Unavailable", "text/plain", "nodeCpu query failed: HTTP 503: Service Unavailable", 7),
        (422, b'{"status":"error","errorType":"execution","error":"too many samples"}', "application/json",
         "nodeCpu query failed: HTTP 422: execution: too many samples", 7),
        (403, b"Forbidden", "text/plain", "prometheus rejected the credentials: HTTP 403: Forbidden", 1),
    ],
    ids=["html-login-page", "wrong-result-type", "short-sample", "unavailable", "query-too-big", "forbidden"],
)  # fmt: skip
def test_answers_that_are_not_usable_query_results_skip_the_nodes_with_the_cause(
    status: int, body: bytes, content_type: str, reason: str, queries: int
) -> None:
    server = canned_server(status, body, content_type=content_type)
    source = _source(server.url)
    try:
        snapshot = source.fetch(NODES, PODS)  # a pod, so the pod queries are due too
    finally:
        source.close()
        server.close()
    assert snapshot.nodes == {}
    assert reason in snapshot.node_errors["node-0"]
    assert source.queries_sent == queries
