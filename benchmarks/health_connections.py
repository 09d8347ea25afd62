"""What do idle connections cost the health and metrics server, and does ``/healthz`` still answer?

Run from the repository root::

    python -m benchmarks.health_connections                      # 300 idle connections, the working tree
    python -m benchmarks.health_connections --connections 1000
    git show HEAD~5:descheduler/service/health.py > /tmp/old_health.py
    python -m benchmarks.health_connections --implementation /tmp/old_health.py

The server (``Endpoints`` of the given ``health.py``) runs in this process on 127.0.0.1, health and
metrics on one address as Koordinator's shipped config has them. N clients connect and send nothing
(what a port scanner, a half-open proxy or a slowloris attacker does). Figures: the process's thread count
(``/proc/self/status``) before, while the connections are held and after they are closed, and the
latency of ``/healthz`` (a fresh connection per request, as the kubelet probes) while they are held.
Issue 25's bound: threads stay bounded (not one per connection) and ``/healthz`` answers under 1 s.
"""

from __future__ import annotations

import argparse
import importlib.util
import socket
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from prometheus_client import CollectorRegistry

from benchmarks.common import median, summary_line, verdict

DEFAULT_IMPLEMENTATION = Path(__file__).resolve().parent.parent / "descheduler" / "service" / "health.py"


def threads() -> int:
    """The kernel's count, so threads that Python does not know about are counted as well."""
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    raise RuntimeError("/proc/self/status has no Threads line")


def load(path: Path) -> ModuleType:
    """An older ``health.py`` (from ``git show``) loads beside the current one, under its own name."""
    spec = importlib.util.spec_from_file_location(f"health_under_test_{abs(hash(path))}", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"error: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def healthz_seconds(port: int, timeout: float) -> float:
    """One probe on a new connection; a probe that fails or times out counts as ``timeout``."""
    start = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.settimeout(max(0.01, timeout - (time.perf_counter() - start)))
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
            reply = b""
            while chunk := sock.recv(4096):
                reply += chunk
        if not reply.startswith(b"HTTP/1.") or b" 200 " not in reply.split(b"\r\n", 1)[0]:
            return timeout
    except OSError:
        return timeout
    return time.perf_counter() - start


def settle(baseline: int, deadline: float) -> int:
    """Threads exit a little after their connection closes: wait, bounded, for the count to come back."""
    while time.monotonic() < deadline and threads() > baseline:
        time.sleep(0.05)
    return threads()


def measure(module: Any, connections: int, probes: int, hold: float) -> dict[str, float]:
    registry = CollectorRegistry()
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        port = int(spare.getsockname()[1])
    address = f"127.0.0.1:{port}"
    endpoints = module.Endpoints(
        healthz_address=address,
        metrics_address=address,
        liveness=lambda: (True, "ok"),
        readiness=lambda: (True, "ok"),
        registry=registry,
    )
    endpoints.start()
    idle: list[socket.socket] = []
    try:
        healthz_seconds(port, 2.0)  # the server's first request starts its lazily created threads
        before = threads()
        for _ in range(connections):
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=2.0))
        time.sleep(hold)  # give the server time to accept every one (and to spend a thread on it, if it does)
        under = threads()
        latencies = [healthz_seconds(port, 5.0) for _ in range(probes)]
        under = max(under, threads())
        for sock in idle:
            sock.close()
        idle.clear()
        after = settle(before, time.monotonic() + 10.0)
    finally:
        for sock in idle:
            sock.close()
        endpoints.stop()
    return {
        "threads_before": before,
        "threads_under": under,
        "threads_after": after,
        "healthz_median": median(latencies),
        "healthz_max": max(latencies),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--connections", type=int, default=300, help="idle connections to hold (300)")
    parser.add_argument("--probes", type=int, default=20, help="/healthz requests while they are held (20)")
    parser.add_argument("--hold", type=float, default=1.0, help="seconds to wait after connecting (1)")
    parser.add_argument(
        "--implementation", type=Path, default=DEFAULT_IMPLEMENTATION, help="health.py to measure"
    )
    args = parser.parse_args(argv)
    if args.connections < 0 or args.probes < 1 or args.hold < 0:
        parser.error("--connections and --hold must be >= 0, --probes >= 1")
    figures = measure(load(args.implementation), args.connections, args.probes, args.hold)
    print(f"implementation: {args.implementation}")
    print(
        f"threads: {figures['threads_before']:.0f} before, {figures['threads_under']:.0f} under "
        f"{args.connections} idle connections, {figures['threads_after']:.0f} after"
    )
    print(
        f"/healthz while held: median {figures['healthz_median'] * 1000:.1f} ms, "
        f"max {figures['healthz_max'] * 1000:.1f} ms over {args.probes} probes"
    )
    bounded = figures["threads_under"] - figures["threads_before"] < 16
    print(f"bounded threads: {verdict(bounded)}; /healthz under 1 s: {verdict(figures['healthz_max'] < 1.0)}")
    print(
        summary_line(
            {
                "threads_before": f"{figures['threads_before']:.0f}",
                "threads_under": f"{figures['threads_under']:.0f}",
                "threads_after": f"{figures['threads_after']:.0f}",
                "healthz_median": f"{figures['healthz_median']:.4f}s",
                "healthz_max": f"{figures['healthz_max']:.4f}s",
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
