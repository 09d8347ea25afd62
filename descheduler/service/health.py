"""HTTP endpoints for the kubelet and Prometheus: ``/healthz``, ``/readyz`` and ``/metrics``.

Koordinator's shipped config binds health and metrics to the same address; then one server serves all
three paths instead of failing on a port conflict.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

Check = Callable[[], tuple[bool, str]]


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


class Endpoints:
    """Starts one or two servers depending on whether the bind addresses differ."""

    def __init__(
        self,
        *,
        healthz_address: str,
        metrics_address: str,
        liveness: Check,
        readiness: Check,
        registry: CollectorRegistry,
    ) -> None:
        self.liveness = liveness
        self.readiness = readiness
        self.registry = registry
        self.servers: list[ThreadingHTTPServer] = []
        plan: dict[str, set[str]] = {}
        if healthz_address:
            plan.setdefault(healthz_address, set()).update({"/healthz", "/readyz", "/livez"})
        if metrics_address:
            plan.setdefault(metrics_address, set()).add("/metrics")
        self._plan = plan

    def start(self) -> None:
        for address, paths in self._plan.items():
            try:
                server = ThreadingHTTPServer(_split(address), self._handler(frozenset(paths)))
            except OSError as exc:  # name the address: "Address already in use" alone says too little
                raise OSError(exc.errno, f"cannot listen on {address}: {exc.strerror or exc}") from exc
            server.daemon_threads = True
            # A short poll interval: shutdown() waits for it, and SIGTERM should not wait half a second.
            threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": 0.1},
                name=f"http-{address}",
                daemon=True,
            ).start()
            self.servers.append(server)

    @property
    def ports(self) -> list[int]:
        return [int(s.server_address[1]) for s in self.servers]

    def stop(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()

    def _handler(self, paths: frozenset[str]) -> type[BaseHTTPRequestHandler]:
        endpoints = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path not in paths:
                    self._reply(404, "text/plain", b"not found\n")
                elif path == "/metrics":
                    self._reply(200, CONTENT_TYPE_LATEST, generate_latest(endpoints.registry))
                else:
                    check = endpoints.readiness if path == "/readyz" else endpoints.liveness
                    ok, why = check()
                    self._reply(200 if ok else 503, "text/plain", (why or "ok").encode() + b"\n")

            def _reply(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                """Probes every few seconds would drown the useful log lines."""

        return Handler
