"""The health and metrics server under hostile clients (issue 25): idle connections cost no thread and do
not starve the probe, slow or silent clients are dropped after the head timeout, the connection cap
displaces the oldest waiting connection, and only small GET/HEAD requests are answered. 127.0.0.1 only."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest
from prometheus_client import CollectorRegistry, Gauge

from descheduler.service import health
from descheduler.service.health import Endpoints
from tests.support.ports import free_port

pytestmark = pytest.mark.integration


def _threads() -> int:
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise AssertionError("no Threads line in /proc/self/status")


@contextmanager
def serving(registry: CollectorRegistry | None = None) -> Iterator[Endpoints]:
    address = f"127.0.0.1:{free_port()}"
    endpoints = Endpoints(
        healthz_address=address,
        metrics_address=address,
        liveness=lambda: (True, "ok"),
        readiness=lambda: (True, "ok"),
        registry=registry or CollectorRegistry(),
    )
    endpoints.start()
    try:
        yield endpoints
    finally:
        endpoints.stop()


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5.0)


def _exchange(port: int, raw: bytes, timeout: float = 5.0) -> bytes:
    """Send ``raw`` on a new connection and read until the server closes it (it always does)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(raw)
        reply = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (chunk := sock.recv(65536)):
            reply += chunk
        return reply


def _probe(port: int) -> tuple[bytes, float]:
    start = time.perf_counter()
    reply = _exchange(port, b"GET /healthz HTTP/1.1\r\nHost: kubelet\r\n\r\n", timeout=2.0)
    return reply, time.perf_counter() - start


def _closed_by_server(sock: socket.socket, within: float) -> float | None:
    """Seconds until the server closed ``sock`` (EOF or reset), or None if it stayed open ``within``."""
    start = time.monotonic()
    sock.settimeout(0.05)
    while time.monotonic() - start < within:
        try:
            if sock.recv(4096) == b"":
                return time.monotonic() - start
        except TimeoutError:
            continue
        except ConnectionResetError:
            return time.monotonic() - start
    return None


def test_300_idle_connections_cost_no_thread_and_the_probe_answers_under_a_second() -> None:
    with serving() as endpoints, ExitStack() as stack:
        (port,) = endpoints.ports
        assert _probe(port)[0].startswith(b"HTTP/1.1 200 ")  # the pool's first thread exists from here on
        before = _threads()
        idle = [stack.enter_context(_connect(port)) for _ in range(300)]
        time.sleep(0.5)  # the server accepts them meanwhile
        latencies = []
        for _ in range(10):
            reply, seconds = _probe(port)
            assert reply.startswith(b"HTTP/1.1 200 ") and reply.endswith(b"\r\n\r\nok\n")
            latencies.append(seconds)
        under = _threads()
        assert under - before <= 4, f"{under - before} threads more with {len(idle)} idle connections"
        assert max(latencies) < 1.0


@pytest.mark.parametrize(
    ("name", "trickle"),
    [
        ("silent", b""),
        ("slowloris", b"GET /healthz HTTP/1.1\r\nX-a: b\r\n"),  # one byte every 0.1 s, never a blank line
    ],
)
def test_a_client_that_does_not_finish_its_request_in_time_is_dropped(
    monkeypatch: pytest.MonkeyPatch, name: str, trickle: bytes
) -> None:
    monkeypatch.setattr(health, "HEAD_TIMEOUT", 1.0)
    with serving() as endpoints, _connect(endpoints.ports[0]) as sock:
        start = time.monotonic()
        for byte in trickle:
            try:
                sock.send(bytes([byte]))
            except OSError:
                break
            time.sleep(0.1)
            if time.monotonic() - start > 3.0:
                break
        closed = _closed_by_server(sock, within=3.0 - (time.monotonic() - start))
        assert closed is not None, f"the {name} client is still connected after 3 s"
        assert 0.9 <= time.monotonic() - start <= 2.5
        assert endpoints.dropped["timed_out_reading"] == 1


def test_beyond_the_cap_a_new_connection_displaces_the_oldest_waiting_one() -> None:
    with serving() as endpoints, ExitStack() as stack:
        (port,) = endpoints.ports
        oldest = stack.enter_context(_connect(port))
        time.sleep(0.05)  # accepted first, so it is the oldest
        for _ in range(health.MAX_CONNECTIONS - 1):
            stack.enter_context(_connect(port))
        time.sleep(0.2)
        assert _closed_by_server(oldest, within=0.2) is None, "nothing displaced below the cap"
        reply, seconds = _probe(port)  # the 65th connection
        assert reply.startswith(b"HTTP/1.1 200 ") and seconds < 1.0
        assert _closed_by_server(oldest, within=1.0) is not None
        assert endpoints.dropped["displaced"] >= 1


@pytest.mark.parametrize(
    ("request_bytes", "status", "has_body", "extra_header"),
    [
        (b"GET /healthz HTTP/1.1\r\n\r\n", b"200", True, b""),
        (b"HEAD /healthz HTTP/1.1\r\n\r\n", b"200", False, b""),
        (b"GET /healthz?verbose HTTP/1.0\n\n", b"200", True, b""),
        (b"POST /healthz HTTP/1.1\r\nContent-Length: 0\r\n\r\n", b"405", True, b"Allow: GET, HEAD"),
        (b"DELETE /metrics HTTP/1.1\r\n\r\n", b"405", True, b"Allow: GET, HEAD"),
        (b"GET /nothing HTTP/1.1\r\n\r\n", b"404", True, b""),
        (b"GET /healthz\r\n\r\n", b"400", True, b""),
        (b"GET healthz HTTP/1.1\r\n\r\n", b"400", True, b""),
        (b"GET /healthz SPDY/3\r\n\r\n", b"400", True, b""),
        (b"GET /h\xc3\xa9althz HTTP/1.1\r\n\r\n", b"400", True, b""),
        (b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", b"431", True, b""),
        (b"GET /healthz HTTP/1.1\r\n" + b"X: y\r\n" * 2000, b"431", True, b""),
    ],
)
def test_only_small_get_and_head_requests_are_served(
    request_bytes: bytes, status: bytes, has_body: bool, extra_header: bytes
) -> None:
    with serving() as endpoints:
        reply = _exchange(endpoints.ports[0], request_bytes)
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.split(b" ")[1] == status, reply[:200]
        assert b"Connection: close" in head and extra_header in head
        assert bool(body) == has_body


def test_metrics_are_served_and_a_client_that_never_reads_them_is_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(health, "WRITE_TIMEOUT", 1.0)
    registry = CollectorRegistry()
    gauge = Gauge(
        "descheduler_test_wide", "Enough series to fill the socket buffers.", ["name"], registry=registry
    )
    for i in range(60_000):
        gauge.labels(f"pod-{i:06d}-{'x' * 80}").set(i)
    with serving(registry) as endpoints:
        (port,) = endpoints.ports
        reply = _exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n", timeout=20.0)
        assert reply.startswith(b"HTTP/1.1 200 ") and len(reply) > 6_000_000
        with socket.socket() as stalled:
            stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            stalled.connect(("127.0.0.1", port))
            stalled.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
            deadline = time.monotonic() + 20.0
            while time.monotonic() < deadline and endpoints.dropped["timed_out_writing"] == 0:
                time.sleep(0.1)
            assert endpoints.dropped["timed_out_writing"] == 1
        assert _probe(port)[0].startswith(b"HTTP/1.1 200 ")


def test_stop_closes_the_port_and_every_connection() -> None:
    with ExitStack() as stack:
        with serving() as endpoints:
            (port,) = endpoints.ports
            held = [stack.enter_context(_connect(port)) for _ in range(20)]
            time.sleep(0.2)
        assert all(_closed_by_server(sock, within=2.0) is not None for sock in held)
        with pytest.raises(OSError):
            _connect(port).close()
