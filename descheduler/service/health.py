"""HTTP endpoints for the kubelet and Prometheus: ``/healthz``, ``/readyz`` and ``/metrics``.

Koordinator's shipped config binds health and metrics to the same address; then one server serves all
three paths instead of failing on a port conflict.

Whoever can reach the port must not be able to starve the kubelet's probe or grow the process, so the
server is not thread-per-connection. One loop thread per address accepts connections and reads request
heads without blocking; a connection costs a socket and a small buffer, never a thread. A complete head
goes to a small fixed pool that runs the check or renders the metrics, and the loop writes the answer back,
again without blocking. The bounds:

- a request head (request line and headers) must arrive within ``HEAD_TIMEOUT`` seconds of the connection,
  however slowly it trickles, and fit in ``MAX_HEAD_BYTES``; an answer must be taken by the client
  within ``WRITE_TIMEOUT`` seconds; otherwise the connection is closed;
- at most ``MAX_CONNECTIONS`` connections per address; one more displaces the oldest connection that is
  waiting on its client (the probe's own connection sends its request at once, so held idle connections
  cannot keep it out), and only if every connection is being answered is the newcomer refused with 503;
- only GET and HEAD, one request per connection (``Connection: close``).
"""

from __future__ import annotations

import collections
import contextlib
import json
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = structlog.get_logger("descheduler.health")

Check = Callable[[], tuple[bool, str]]

HEAD_TIMEOUT = 5.0
"""Seconds from accept to the end of the request head: the kubelet and Prometheus send it at once."""
WRITE_TIMEOUT = 10.0
"""Seconds for a client to take its answer (``/metrics`` of a large cluster is a few hundred KiB)."""
MAX_HEAD_BYTES = 8192
"""Request line plus headers; a probe or a scrape sends a few hundred bytes."""
MAX_CONNECTIONS = 64
"""Open connections per address, answered or not."""
HEALTH_WORKERS = 2
METRICS_WORKERS = 1
"""Separate pools, so a slow or flooded ``/metrics`` never queues in front of a probe."""

_PLAIN = "text/plain; charset=utf-8"
_HEALTH_PATHS = frozenset({"/healthz", "/readyz", "/livez"})
DEBUG_CACHE_PATH = "/debug/cache"
"""Read-only: per resource, the count and a digest of what the watch cache holds (``ClusterCache.digest``),
so a soak can compare the cache with a fresh LIST from outside. Served next to the probes."""


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


def _listen(address: str) -> socket.socket:
    """A non-blocking listening socket; an IPv6 literal (``[::1]:10258``) gets an IPv6 socket."""
    host, port = _split(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family, backlog=128)
    except OSError as exc:  # name the address: "Address already in use" alone says too little
        raise OSError(exc.errno, f"cannot listen on {address}: {exc.strerror or exc}") from exc
    sock.setblocking(False)
    return sock


def response(status: int, content_type: str, body: bytes, *, head: bool = False, allow: str = "") -> bytes:
    """A complete HTTP/1.1 answer that closes the connection; ``head`` keeps the length, drops the body."""
    phrase = HTTPStatus(status).phrase
    lines = [
        f"HTTP/1.1 {int(status)} {phrase}",
        f"Content-Type: {content_type}",
        f"Content-Length: {len(body)}",
        "Cache-Control: no-store",
        "Connection: close",
    ]
    if allow:
        lines.append(f"Allow: {allow}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii") + (b"" if head else body)


_BUSY = response(HTTPStatus.SERVICE_UNAVAILABLE, _PLAIN, b"too many connections\n")


@dataclass(frozen=True)
class Request:
    method: str
    path: str


def parse_head(head: bytes) -> Request | bytes:
    """The request of a complete head, or the error answer to send instead."""
    first = head.split(b"\n", 1)[0].rstrip(b"\r")
    try:
        line = first.decode("ascii")
    except UnicodeDecodeError:
        return response(HTTPStatus.BAD_REQUEST, _PLAIN, b"request line is not ASCII\n")
    parts = line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
        return response(HTTPStatus.BAD_REQUEST, _PLAIN, b"malformed request line\n")
    method, target = parts[0], parts[1]
    if method not in ("GET", "HEAD"):
        return response(HTTPStatus.METHOD_NOT_ALLOWED, _PLAIN, b"only GET and HEAD\n", allow="GET, HEAD")
    return Request(method, target.split("?", 1)[0])


@dataclass(eq=False)
class _Connection:
    sock: socket.socket
    opened: float
    deadline: float
    head: bytearray = field(default_factory=bytearray)
    out: memoryview | None = None
    working: bool = False

    @property
    def waiting_on_client(self) -> bool:
        return not self.working


class _Server:
    """One address: the loop thread, its connections, and the pools it hands complete requests to."""

    def __init__(self, address: str, paths: frozenset[str], endpoints: Endpoints) -> None:
        self.address = address
        self.paths = paths
        self.endpoints = endpoints
        self.listener = _listen(address)
        self.port = int(self.listener.getsockname()[1])
        self.selector = selectors.DefaultSelector()
        self.connections: dict[socket.socket, _Connection] = {}
        self.finished: queue.SimpleQueue[tuple[_Connection, bytes]] = queue.SimpleQueue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stopping = False
        self._closed = False
        self.dropped: collections.Counter[str] = collections.Counter()
        self.thread = threading.Thread(target=self._loop, name=f"http-{address}", daemon=True)

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        self.selector.register(self.listener, selectors.EVENT_READ, data=None)
        self.selector.register(self._wake_r, selectors.EVENT_READ, data=None)
        self.thread.start()

    def stop(self, timeout: float) -> None:
        self._stopping = True
        self._wake()
        if self.thread.is_alive():
            self.thread.join(timeout)
        if not self.thread.is_alive():
            self._close_all()

    def _wake(self) -> None:
        # OSError: the pipe is full (already woken) or closed (already stopped).
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _close_all(self) -> None:
        if self._closed:
            return
        self._closed = True
        for conn in list(self.connections.values()):
            self._close(conn)
        for sock in (self.listener, self._wake_r, self._wake_w):
            sock.close()
        self.selector.close()

    # -- the loop ------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            while not self._stopping:
                now = time.monotonic()
                timeout = min([0.5, *(c.deadline - now for c in self.connections.values() if not c.working)])
                for key, events in self.selector.select(max(0.0, timeout)):
                    conn = key.data
                    if key.fileobj is self.listener:
                        self._accept()
                    elif key.fileobj is self._wake_r:
                        self._drain_wake()
                    elif isinstance(conn, _Connection) and self.connections.get(conn.sock) is conn:
                        if events & selectors.EVENT_READ:
                            self._read(conn)
                        elif events & selectors.EVENT_WRITE:
                            self._write(conn)
                self._take_finished()
                self._expire(time.monotonic())
        except Exception:  # never let the probe port die silently; the liveness probe then fails loudly
            log.exception("health_server_failed", address=self.address)
        finally:
            self._close_all()

    def _accept(self) -> None:
        for _ in range(MAX_CONNECTIONS):  # bounded, so a connect flood cannot keep the loop from the rest
            try:
                sock, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # ECONNABORTED, EMFILE: nothing to do for this one
                return
            sock.setblocking(False)
            if len(self.connections) >= MAX_CONNECTIONS and not self._displace_oldest():
                self.dropped["refused"] += 1
                with contextlib.suppress(OSError):
                    sock.send(_BUSY)
                sock.close()
                continue
            now = time.monotonic()
            conn = _Connection(sock=sock, opened=now, deadline=now + HEAD_TIMEOUT)
            self.connections[sock] = conn
            self.selector.register(sock, selectors.EVENT_READ, data=conn)

    def _displace_oldest(self) -> bool:
        waiting = [c for c in self.connections.values() if c.waiting_on_client]
        if not waiting:
            return False
        self.dropped["displaced"] += 1
        self._close(min(waiting, key=lambda c: c.opened))
        return True

    def _read(self, conn: _Connection) -> None:
        try:
            chunk = conn.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._close(conn)
            return
        conn.head += chunk
        end = conn.head.find(b"\r\n\r\n")
        if end < 0:
            end = conn.head.find(b"\n\n")
        if end < 0 or end > MAX_HEAD_BYTES:
            if len(conn.head) > MAX_HEAD_BYTES:
                self.dropped["too_large"] += 1
                body = b"request head over %d bytes\n" % MAX_HEAD_BYTES
                self._answer(conn, response(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, _PLAIN, body))
            return
        request = parse_head(bytes(conn.head[:end]))
        conn.head = bytearray()
        if isinstance(request, bytes):
            self._answer(conn, request)
        elif request.path not in self.paths:
            head = request.method == "HEAD"
            self._answer(conn, response(HTTPStatus.NOT_FOUND, _PLAIN, b"not found\n", head=head))
        else:
            conn.working = True
            self.selector.unregister(conn.sock)
            pool = self.endpoints.pool_for(request.path)
            try:
                pool.submit(self._work, conn, request)
            except RuntimeError:  # the pool is shut down: we are stopping
                self._close(conn)

    def _work(self, conn: _Connection, request: Request) -> None:
        """In a pool thread: the only place a check or the metrics rendering runs."""
        try:
            answer = self.endpoints.render(request)
        except Exception as exc:  # a failing check is a failed probe, not a dead pool thread
            log.warning("health_check_raised", path=request.path, error=repr(exc))
            answer = response(HTTPStatus.INTERNAL_SERVER_ERROR, _PLAIN, b"check raised an error\n")
        self.finished.put((conn, answer))
        self._wake()

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass

    def _take_finished(self) -> None:
        while True:
            try:
                conn, answer = self.finished.get_nowait()
            except queue.Empty:
                return
            if conn.sock in self.connections:
                conn.working = False
                self.selector.register(conn.sock, selectors.EVENT_READ, data=conn)
                self._answer(conn, answer)

    def _answer(self, conn: _Connection, answer: bytes) -> None:
        conn.out = memoryview(answer)
        conn.deadline = time.monotonic() + WRITE_TIMEOUT
        self.selector.modify(conn.sock, selectors.EVENT_WRITE, data=conn)
        self._write(conn)

    def _write(self, conn: _Connection) -> None:
        assert conn.out is not None
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        conn.out = conn.out[sent:]
        if not conn.out:
            with contextlib.suppress(OSError):
                conn.sock.shutdown(socket.SHUT_WR)
            self._close(conn)

    def _expire(self, now: float) -> None:
        for conn in [c for c in self.connections.values() if not c.working and c.deadline <= now]:
            self.dropped["timed_out_writing" if conn.out is not None else "timed_out_reading"] += 1
            self._close(conn)

    def _close(self, conn: _Connection) -> None:
        if self.connections.pop(conn.sock, None) is None:
            return
        if not conn.working:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(conn.sock)
        conn.sock.close()


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
        cache_digest: Callable[[], Mapping[str, Any]] | None = None,
    ) -> None:
        self.liveness = liveness
        self.cache_digest = cache_digest
        self.readiness = readiness
        self.registry = registry
        self.servers: list[_Server] = []
        plan: dict[str, set[str]] = {}
        if healthz_address:
            plan.setdefault(healthz_address, set()).update(_HEALTH_PATHS)
            if cache_digest is not None:
                plan[healthz_address].add(DEBUG_CACHE_PATH)
        if metrics_address:
            plan.setdefault(metrics_address, set()).add("/metrics")
        self._plan = plan
        self._health_pool = ThreadPoolExecutor(HEALTH_WORKERS, thread_name_prefix="http-health")
        self._metrics_pool = ThreadPoolExecutor(METRICS_WORKERS, thread_name_prefix="http-metrics")

    def start(self) -> None:
        for address, paths in self._plan.items():
            server = _Server(address, frozenset(paths), self)  # binds now: a taken port fails start()
            server.start()
            self.servers.append(server)

    @property
    def ports(self) -> list[int]:
        return [s.port for s in self.servers]

    @property
    def dropped(self) -> collections.Counter[str]:
        """Connections closed by a bound, by reason (``timed_out_reading``, ``displaced``, ...)."""
        total: collections.Counter[str] = collections.Counter()
        for server in self.servers:
            total.update(server.dropped)
        return total

    def stop(self) -> None:
        self._health_pool.shutdown(wait=False, cancel_futures=True)
        self._metrics_pool.shutdown(wait=False, cancel_futures=True)
        for server in self.servers:
            server.stop(timeout=2.0)

    def pool_for(self, path: str) -> ThreadPoolExecutor:
        return self._metrics_pool if path == "/metrics" else self._health_pool

    def render(self, request: Request) -> bytes:
        head = request.method == "HEAD"
        if request.path == "/metrics":
            return response(HTTPStatus.OK, CONTENT_TYPE_LATEST, generate_latest(self.registry), head=head)
        if request.path == DEBUG_CACHE_PATH and self.cache_digest is not None:
            body = json.dumps(self.cache_digest(), sort_keys=True).encode()
            return response(HTTPStatus.OK, "application/json", body, head=head)
        check = self.readiness if request.path == "/readyz" else self.liveness
        ok, why = check()
        status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
        return response(status, "text/plain", (why or "ok").encode() + b"\n", head=head)
