"""Flooding the health server the way issue 37 (point 18) did, and probing it the way the kubelet does.

The server runs in its own process (as in a pod: the flood must not take the GIL from it), health and
metrics on one address as Koordinator's shipped config has them, with ``/debug/cache`` enabled and a
digest as costly as a 20,000-pod cache's (``ROWS`` rows through ``digest_rows``), and a registry of
``SERIES`` series so ``/metrics`` costs what a real scrape does. The flood runs in another process:
``clients`` threads, each requesting one path on a fresh connection again and again, for a bounded time.
The probe is the kubelet's liveness probe: a fresh connection every ``PROBE_PERIOD`` seconds, GET
``/healthz``, given up after ``PROBE_TIMEOUT`` second. Everything on 127.0.0.1.

Used by ``tests/integration/test_health_flood.py`` and ``benchmarks/health_flood.py``.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.service import subprocess_env

REPO = Path(__file__).resolve().parents[2]
ROWS = 20_000
SERIES = 5_000
PROBE_PERIOD = 0.5
PROBE_TIMEOUT = 1.0

SERVER = """
import sys
sys.path[:0] = sys.argv[3:]  # another tree's descheduler (a benchmark's before/after)
from prometheus_client import CollectorRegistry, Gauge
from descheduler.kube.cache import digest_rows
from descheduler.service.health import Endpoints

count = int(sys.argv[1])
rows = [(f"ns-{i % 50}/pod-{i:06d}", f"uid-{i}", f"node-{i % 500}", "Running", "") for i in range(count)]
def digest():
    return {"pods": {"count": len(rows), "digest": digest_rows(rows), "resourceVersion": "1"}}
registry = CollectorRegistry()
gauge = Gauge("flood_series", "Series for a realistic scrape.", ["pod"], registry=registry)
for i in range(int(sys.argv[2])):
    gauge.labels(f"pod-{i:06d}").set(i)
options = dict(
    healthz_address="127.0.0.1:0", metrics_address="127.0.0.1:0",
    liveness=lambda: (True, "ok"), readiness=lambda: (True, "ok"), registry=registry,
)
if hasattr(Endpoints, "enable_debug_cache"):
    endpoints = Endpoints(**options)
    endpoints.enable_debug_cache()
    endpoints.start()
    endpoints.publish_cache_digest(digest)
else:  # before issue 37: the digest computed on every request
    endpoints = Endpoints(**options, cache_digest=digest)
    endpoints.start()
print(endpoints.ports[0], flush=True)
sys.stdin.read()
endpoints.stop()
"""

FLOOD = """
import socket, sys, threading, time
port, path, clients, seconds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
request = f"GET {path} HTTP/1.1\\r\\nHost: flood\\r\\n\\r\\n".encode()
end = time.monotonic() + seconds
counts = [0] * clients
def hammer(i):
    while time.monotonic() < end:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(request)
                while sock.recv(65536):
                    pass
            counts[i] += 1
        except OSError:
            time.sleep(0.001)
threads = [threading.Thread(target=hammer, args=(i,)) for i in range(clients)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(sum(counts), flush=True)
"""


@dataclass(frozen=True)
class Probe:
    at: float
    status: str
    """The status code, or why there was none (``timeout``, ``reset``, ``refused``)."""
    seconds: float

    @property
    def answered(self) -> bool:
        return self.status == "200" and self.seconds <= PROBE_TIMEOUT


@contextmanager
def server(tree: str = "") -> Iterator[int]:
    """The health server in its own process (``health.py`` of ``tree``, default this one); its port."""
    process = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(ROWS), str(SERIES), *([tree] if tree else [])],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=subprocess_env(),
        cwd=REPO,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.strip():
            raise RuntimeError("the health server did not start")
        yield int(line)
    finally:
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def probe(port: int) -> Probe:
    """One kubelet-like liveness probe: fresh connection, GET /healthz, 1 s for the whole answer."""
    start = time.monotonic()
    reply = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=PROBE_TIMEOUT) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: kube-probe/1.35\r\n\r\n")
            while time.monotonic() - start < PROBE_TIMEOUT and (chunk := sock.recv(4096)):
                reply += chunk
        status = reply.split(b" ", 2)[1].decode() if reply.startswith(b"HTTP/1.1 ") else "empty"
    except TimeoutError:
        status = "timeout"
    except ConnectionResetError:
        status = "reset"
    except OSError as exc:
        status = type(exc).__name__
    return Probe(start, status, time.monotonic() - start)


def flooded(port: int, path: str, clients: int, seconds: float) -> tuple[list[Probe], int]:
    """Probes every ``PROBE_PERIOD`` s while ``clients`` flood ``path`` for ``seconds``; and how many
    flood requests completed (so a test can tell the flood really ran)."""
    flood = subprocess.Popen(
        [sys.executable, "-c", FLOOD, str(port), path, str(clients), str(seconds)],
        stdout=subprocess.PIPE,
        env=subprocess_env(),
        cwd=REPO,
        text=True,
    )
    probes: list[Probe] = []
    end = time.monotonic() + seconds - PROBE_TIMEOUT
    try:
        time.sleep(1.0)  # the flood's threads are up and hammering
        while time.monotonic() < end:
            started = time.monotonic()
            probes.append(probe(port))
            time.sleep(max(0.0, PROBE_PERIOD - (time.monotonic() - started)))
        out, _ = flood.communicate(timeout=seconds + 30)
    finally:
        if flood.poll() is None:
            flood.kill()
            flood.wait()
    return probes, int(out.strip() or 0)
