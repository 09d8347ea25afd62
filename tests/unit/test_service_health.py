"""The HTTP endpoints: one server when health and metrics share an address (Koordinator's shipped config
does that), 503 with the reason when a check fails, 404 for paths an address does not serve."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from descheduler.cli import build_parser
from descheduler.service import probes, scrapes
from descheduler.service.health import Endpoints
from descheduler.service.httpwire import Request
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
def serving(
    healthz: str, metrics: str, checks: Checks, registry: CollectorRegistry | None = None
) -> Iterator[Endpoints]:
    if registry is None:
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
        deadline = time.monotonic() + 1.0  # checks run again every PROBE_REFRESH (0.25 s), not per request
        while _get(port, path)[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _get(port, path)[0] == 200, "the check was asked again within a second"


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


class SlowCollector(Collector):
    """Takes ``RENDER`` seconds per collection and reports how many collections there have been."""

    RENDER = 0.05

    def __init__(self) -> None:
        self.renders = 0

    def collect(self) -> Iterator[GaugeMetricFamily]:
        time.sleep(self.RENDER)
        self.renders += 1
        yield GaugeMetricFamily("descheduler_test_renders", "Collections so far.", value=self.renders)


@contextmanager
def serving_slow(collector: SlowCollector) -> Iterator[Endpoints]:
    """Health and metrics on one address, ``/metrics`` rendering only ``collector``."""
    registry = CollectorRegistry()
    registry.register(collector)
    address = f"127.0.0.1:{free_port()}"
    with serving(address, address, Checks(), registry) as endpoints:
        yield endpoints


def _renders_seen(port: int) -> int:
    status, _, body = _get(port, "/metrics")
    assert status == 200, body
    (line,) = [line for line in body.splitlines() if line.startswith("descheduler_test_renders ")]
    return int(float(line.split()[1]))


def test_metrics_asked_for_back_to_back_are_rendered_for_at_most_their_duty_share_and_stay_fresh() -> None:
    collector = SlowCollector()
    with serving_slow(collector) as endpoints:
        (port,) = endpoints.ports
        started = time.monotonic()
        seen = [_renders_seen(port) for _ in range(40)]
        elapsed = time.monotonic() - started
        reuse_for = SlowCollector.RENDER / scrapes.METRICS_DUTY  # at least: a render, then its reuse
        assert collector.renders <= elapsed / reuse_for + 1, f"{collector.renders} renders in {elapsed:.2f}s"
        assert seen == sorted(seen), "never an older render after a newer one"
        deadline = time.monotonic() + 5.0
        while (latest := _renders_seen(port)) == seen[-1] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert latest > seen[-1], "a render is reused for a while, not for ever"


@pytest.mark.parametrize(
    ("took", "after", "reused"),
    [
        (0.05, 0.44, True),  # nine times its duration
        (0.05, 0.46, False),
        (1.0, 1.9, True),  # a slow render: at most METRICS_REUSE_MAX, not nine seconds
        (1.0, 2.1, False),
    ],
)
def test_a_render_is_reused_for_nine_times_its_duration_and_never_past_the_cap(
    took: float, after: float, reused: bool
) -> None:
    render = scrapes._Render(b"GET", b"HEAD", ended=100.0, took=took)
    assert render.reusable(100.0 + after) is reused


def test_a_reused_render_answers_head_without_its_body_and_get_with_it() -> None:
    collector = SlowCollector()
    with serving_slow(collector) as endpoints:
        answers = []
        for method in ("HEAD", "GET", "HEAD"):  # within the first render's reuse (9 x 0.05 s at least)
            with socket.create_connection(("127.0.0.1", endpoints.ports[0]), timeout=5) as sock:
                sock.sendall(f"{method} /metrics HTTP/1.1\r\n\r\n".encode())
                answers.append(b"".join(iter(lambda s=sock: s.recv(65536), b"")))
    assert collector.renders == 1
    heads = [a.partition(b"\r\n\r\n") for a in answers]
    length = int(heads[0][0].split(b"Content-Length: ")[1].split(b"\r\n")[0])
    assert [len(body) for _, _, body in heads] == [0, length, 0]
    assert heads[0][0] == heads[1][0] == heads[2][0] and heads[1][2].startswith(b"# HELP")


@pytest.mark.parametrize("host", ["127.0.0.1", "[::1]"])
def test_a_loopback_address_of_either_family_is_honoured(host: str) -> None:
    address = f"{host}:{free_port(host.strip('[]'))}"
    with serving(address, address, Checks()) as endpoints:
        (port,) = endpoints.ports
        with socket.create_connection((host.strip("[]"), port), timeout=5) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
            assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
            assert sock.getsockname()[0] == host.strip("[]"), "listens on the loopback address given"


def test_the_cache_digest_is_served_only_when_enabled_as_published_once_per_cycle() -> None:
    address = f"127.0.0.1:{free_port()}"
    digest = {"pods": {"count": 2, "digest": "ab", "resourceVersion": "7"}}
    computed: list[int] = []

    def compute() -> dict[str, dict[str, object]]:
        computed.append(1)
        return digest

    endpoints = Endpoints(
        healthz_address=address,
        metrics_address="",
        liveness=lambda: (True, "ok"),
        readiness=lambda: (True, "ok"),
        registry=CollectorRegistry(),
    )
    endpoints.enable_debug_cache()
    endpoints.start()
    try:
        (port,) = endpoints.ports
        before = _get(port, "/debug/cache")
        endpoints.publish_cache_digest(compute)
        answers = [_get(port, "/debug/cache") for _ in range(5)]
    finally:
        endpoints.stop()
    assert before[0] == 503 and "no cycle has run yet" in before[2]
    assert {(status, content_type) for status, content_type, _ in answers} == {(200, "application/json")}
    assert all(json.loads(body) == digest for _, _, body in answers)
    assert len(computed) == 1, "computed once per cycle, not per request"
    with serving(f"127.0.0.1:{free_port()}", "", Checks()) as plain:
        plain.publish_cache_digest(compute)
        assert _get(plain.ports[0], "/debug/cache")[0] == 404, "off by default"
    assert len(computed) == 1, "not computed at all when not served"


def test_run_serves_the_cache_digest_only_with_its_flag() -> None:
    parser = build_parser()
    assert parser.parse_args(["run", "--config", "c.yaml"]).debug_cache is False
    assert parser.parse_args(["run", "--config", "c.yaml", "--debug-cache"]).debug_cache is True


def test_a_probe_whose_check_stops_completing_answers_503_not_its_last_answer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(probes, "PROBE_REFRESH", 0.01)
    monkeypatch.setattr(probes, "PROBE_STALE_AFTER", 0.3)
    release = threading.Event()
    calls: list[int] = []

    def check() -> tuple[bool, str]:
        calls.append(1)
        if len(calls) > 1:
            release.wait(5.0)  # blocked on a lock, say
        return True, "ok"

    refreshed = probes.RefreshedCheck("liveness", check)
    refreshed.start()
    try:
        get = Request("GET", "/healthz")
        assert refreshed.answer(get, time.monotonic()).startswith(b"HTTP/1.1 200 ")
        later = refreshed.answer(get, time.monotonic() + 1.0)
    finally:
        refreshed.stop()
        release.set()
    assert later.startswith(b"HTTP/1.1 503 ") and later.endswith(b"liveness check has not completed for 1s\n")


def test_a_check_that_raises_is_a_500_and_the_server_keeps_answering() -> None:
    def boom() -> tuple[bool, str]:
        raise RuntimeError("no cache")

    address = f"127.0.0.1:{free_port()}"
    endpoints = Endpoints(
        healthz_address=address,
        metrics_address="",
        liveness=lambda: (True, "ok"),
        readiness=boom,
        registry=CollectorRegistry(),
    )
    endpoints.start()
    try:
        (port,) = endpoints.ports
        assert [_get(port, p)[0::2] for p in ("/readyz", "/healthz")] == [
            (500, "check raised an error\n"),
            (200, "ok\n"),
        ]
    finally:
        endpoints.stop()
