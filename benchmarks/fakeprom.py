"""A tiny Prometheus stand-in on 127.0.0.1 that answers the usage source's instant queries from a ``World``.

Only ``/api/v1/query`` is served. The query text says which of the seven queries it is (by the metric it
reads), and the answer is a vector built from the world's current usage: node series carry
``instance="<node>:9100"`` (the default relabel strips the port), pod series ``namespace`` and ``pod``.
Every request is counted, so a benchmark can check the queries per cycle against the source's own
``queries_sent``.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

Usage = dict[str, dict[str, int]]
SAMPLES_PER_WINDOW = 30
"""What ``nodeSampleCount`` answers for every node: always the same, so no scrape gap ever shows."""


def classify(query: str) -> str:
    """Which of the source's queries this is (``QUERY_NAMES`` of ``descheduler.usage.prometheus``)."""
    if "node_" in query:
        if "timestamp(" in query:
            return "nodeSampleTime"
        if "count_over_time(" in query:
            return "nodeSampleCount"
        return "nodeCpu" if "node_cpu_seconds_total" in query else "nodeMemory"
    if "timestamp(" in query:
        return "podSampleTime"
    return "podCpu" if "container_cpu_usage_seconds_total" in query else "podMemory"


_NODE_MATCHER = re.compile(r'node=~"((?:[^"\\]|\\.)*)"')


def _matched_nodes(query: str) -> set[str] | None:
    """The node names of a ``node=~"a|b"`` matcher (escapes undone), or None without one."""
    match = _NODE_MATCHER.search(query)
    if match is None:
        return None
    regex = re.sub(r"\\(.)", r"\1", match.group(1))  # the PromQL string escapes
    return {re.sub(r"\\(.)", r"\1", name) for name in regex.split("|")}  # the regex escapes


class FakePrometheus:
    """Serve ``nodes()`` and ``pods()`` (usage in millicores and bytes) as Prometheus vectors."""

    def __init__(
        self,
        nodes: Callable[[], Usage],
        pods: Callable[[], Usage],
        pod_nodes: Callable[[], dict[str, str]] | None = None,
    ) -> None:
        self.nodes = nodes
        self.pods = pods
        self.pod_nodes = pod_nodes
        """Pod key -> node: lets pod queries honour a ``node=~"a|b"`` matcher as Prometheus would."""
        self.queries: Counter[str] = Counter()
        self.series_returned = 0
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None, "not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self.queries.values())

    def answer(self, query: str, at: float) -> dict[str, Any]:
        name = classify(query)
        with self._lock:
            self.queries[name] += 1
        result: list[dict[str, Any]] = []
        if name.startswith("node"):
            for node, usage in self.nodes().items():
                value = (
                    at
                    if name == "nodeSampleTime"
                    else SAMPLES_PER_WINDOW
                    if name == "nodeSampleCount"
                    else (usage["cpu"] / 1000 if name == "nodeCpu" else usage["memory"])
                )
                result.append({"metric": {"instance": f"{node}:9100"}, "value": [at, repr(float(value))]})
        else:
            wanted = _matched_nodes(query)
            placed = self.pod_nodes() if wanted is not None and self.pod_nodes is not None else None
            for key, usage in self.pods().items():
                if placed is not None and wanted is not None and placed.get(key) not in wanted:
                    continue
                namespace, pod = key.split("/", 1)
                value = (
                    at
                    if name == "podSampleTime"
                    else (usage["cpu"] / 1000 if name == "podCpu" else usage["memory"])
                )
                result.append(
                    {"metric": {"namespace": namespace, "pod": pod}, "value": [at, repr(float(value))]}
                )
        with self._lock:
            self.series_returned += len(result)
        return {"status": "success", "data": {"resultType": "vector", "result": result}}

    def start(self) -> FakePrometheus:
        prom = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self, params: dict[str, list[str]]) -> None:
                if urlsplit(self.path).path != "/api/v1/query" or "query" not in params:
                    self.send_error(404)
                    return
                at = float(params.get("time", ["0"])[-1])
                body = json.dumps(prom.answer(params["query"][-1], at)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._serve(parse_qs(urlsplit(self.path).query))

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = parse_qs(self.rfile.read(length).decode())
                self._serve({**parse_qs(urlsplit(self.path).query), **form})

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
