"""The HTTP endpoints: one server when health and metrics share an address (Koordinator's shipped config
does that), 503 with the reason when a check fails, 404 for paths an address does not serve."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from prometheus_client import CollectorRegistry, Counter

from descheduler.service.health import Endpoints
from tests.support.ports import free_port


def _get(port: int, path: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


class Checks:
    def __init__(self) -> None:
        self.live: tuple[bool, str] = (True, "ok")
        self.ready: tuple[bool, str] = (True, "ok")


@contextmanager
def serving(healthz: str, metrics: str, checks: Checks) -> Iterator[Endpoints]:
    registry = CollectorRegistry()
    Counter("descheduler_test_things", "A counter to find on /metrics.", registry=registry).inc(3)
    endpoints = Endpoints(
        healthz_address=healthz,
        metrics_address=metrics,
        liveness=lambda: checks.live,
        readiness=lambda: checks.ready,
        registry=registry,
    )
    endpoints.start()
    try:
        yield endpoints
    finally:
        endpoints.stop()


def test_one_address_for_health_and_metrics_serves_every_path_from_one_server() -> None:
    address = f"127.0.0.1:{free_port()}"
    with serving(address, address, Checks()) as endpoints:
        (port,) = endpoints.ports
        assert [_get(port, p)[0] for p in ("/healthz", "/readyz", "/livez", "/metrics")] == [200] * 4
        _, content_type, body = _get(port, "/metrics")
        assert content_type.startswith("text/plain") and "descheduler_test_things_total 3.0" in body


def test_two_addresses_serve_health_and_metrics_apart() -> None:
    health, metrics = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    with serving(health, metrics, Checks()) as endpoints:
        health_port, metrics_port = endpoints.ports
        assert _get(health_port, "/readyz")[0] == 200
        assert _get(health_port, "/metrics")[0] == 404
        assert _get(metrics_port, "/metrics")[0] == 200
        assert _get(metrics_port, "/healthz")[0] == 404


@pytest.mark.parametrize(
    ("failing", "path", "other_path"),
    [("ready", "/readyz", "/healthz"), ("live", "/healthz", "/readyz"), ("live", "/livez", "/readyz")],
)
def test_a_failing_check_answers_503_with_its_reason_and_leaves_the_other_alone(
    failing: str, path: str, other_path: str
) -> None:
    checks = Checks()
    setattr(checks, failing, (False, "cache not synced"))
    address = f"127.0.0.1:{free_port()}"
    with serving(address, address, checks) as endpoints:
        (port,) = endpoints.ports
        assert _get(port, path)[0::2] == (503, "cache not synced\n")
        assert _get(port, other_path)[0::2] == (200, "ok\n")
        setattr(checks, failing, (True, "ok"))
        assert _get(port, path)[0] == 200, "checks are asked again on every request"


def test_query_strings_do_not_hide_a_path() -> None:
    address = f"127.0.0.1:{free_port()}"
    with serving(address, address, Checks()) as endpoints:
        assert _get(endpoints.ports[0], "/readyz?verbose=1")[0] == 200


def test_an_empty_metrics_address_serves_no_metrics() -> None:
    with serving(f"127.0.0.1:{free_port()}", "", Checks()) as endpoints:
        (port,) = endpoints.ports
        assert _get(port, "/metrics")[0] == 404


def test_a_taken_port_is_an_error_naming_the_address() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        endpoints = Endpoints(
            healthz_address=address,
            metrics_address=address,
            liveness=lambda: (True, ""),
            readiness=lambda: (True, ""),
            registry=CollectorRegistry(),
        )
        with pytest.raises(OSError, match=f"cannot listen on {address}"):
            endpoints.start()
        endpoints.stop()


@pytest.mark.parametrize("host", ["127.0.0.1", "[::1]"])
def test_a_loopback_address_of_either_family_is_honoured(host: str) -> None:
    address = f"{host}:{free_port(host.strip('[]'))}"
    with serving(address, address, Checks()) as endpoints:
        (port,) = endpoints.ports
        with socket.create_connection((host.strip("[]"), port), timeout=5) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
            assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
            assert sock.getsockname()[0] == host.strip("[]"), "listens on the loopback address given"


def test_the_cache_digest_is_served_as_json_next_to_the_probes_only_when_given() -> None:
    address = f"127.0.0.1:{free_port()}"
    digest = {"pods": {"count": 2, "digest": "ab", "resourceVersion": "7"}}
    endpoints = Endpoints(
        healthz_address=address,
        metrics_address="",
        liveness=lambda: (True, "ok"),
        readiness=lambda: (True, "ok"),
        registry=CollectorRegistry(),
        cache_digest=lambda: digest,
    )
    endpoints.start()
    try:
        (port,) = endpoints.ports
        status, content_type, body = _get(port, "/debug/cache")
    finally:
        endpoints.stop()
    assert (status, content_type) == (200, "application/json")
    assert json.loads(body) == digest
    with serving(f"127.0.0.1:{free_port()}", "", Checks()) as plain:
        assert _get(plain.ports[0], "/debug/cache")[0] == 404
