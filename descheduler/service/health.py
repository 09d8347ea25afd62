"""HTTP endpoints for the kubelet and Prometheus: ``/healthz``, ``/readyz`` and ``/metrics``.

Koordinator's shipped config binds health and metrics to the same address; then one server serves all
three paths instead of failing on a port conflict.

Whoever can reach the port must not be able to starve the kubelet's probe or grow the process, so the
server is not thread-per-connection. One loop thread per address accepts connections and reads request
heads without blocking; a connection costs a socket and a small buffer, never a thread. The probes
(``/healthz``, ``/livez``, ``/readyz``) and ``/debug/cache`` are answered on the loop thread itself from
answers computed beforehand (``probes.py``): they share no pool and no queue with anything, so a flood
of any path, the probes included, cannot put work in front of a probe. Only ``/metrics`` is rendered
in a pool (``scrapes.py``), at most ``MAX_METRICS_IN_FLIGHT`` requests at a time (more are answered 503
at once), so the connections held by that work stay few and never fill the connection cap; and a render
is reused for a while after it (``METRICS_DUTY``), so however many clients scrape, rendering takes a
bounded share of the GIL the loop thread needs. The loop writes answers back without blocking. The
bounds:

- a request head (request line and headers) must arrive within ``HEAD_TIMEOUT`` seconds of the connection,
  however slowly it trickles, and fit in ``MAX_HEAD_BYTES``; an answer must be taken by the client
  within ``WRITE_TIMEOUT`` seconds; otherwise the connection is closed;
- at most ``MAX_CONNECTIONS`` connections per address; one more displaces the oldest connection that is
  waiting on its client (the probe's own connection sends its request at once, and what connections
  have sent is read before new ones are accepted, so held idle connections cannot keep it out); only if
  every connection is being answered is the newcomer refused with 503, which the cap on ``/metrics``
  work makes impossible;
- only GET and HEAD, one request per connection (``Connection: close``).
"""

from __future__ import annotations

import collections
import contextlib
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import structlog
from prometheus_client import CollectorRegistry

from descheduler.service.httpwire import BUSY, PLAIN, Request, listen, parse_head, response
from descheduler.service.probes import Check, Published, RefreshedCheck
from descheduler.service.scrapes import Scrapes

log = structlog.get_logger("descheduler.health")

HEAD_TIMEOUT = 5.0
"""Seconds from accept to the end of the request head: the kubelet and Prometheus send it at once."""
WRITE_TIMEOUT = 10.0
"""Seconds for a client to take its answer (``/metrics`` of a large cluster is a few hundred KiB)."""
MAX_HEAD_BYTES = 8192
"""Request line plus headers; a probe or a scrape sends a few hundred bytes."""
MAX_CONNECTIONS = 64
"""Open connections per address, answered or not."""
_HEALTH_PATHS = frozenset({"/healthz", "/readyz", "/livez"})
DEBUG_CACHE_PATH = "/debug/cache"
"""Opt-in (``run --debug-cache``): per resource, the count and a digest of what the watch cache held at
the start of the last cycle (``ClusterCache.digest``), so a soak can compare the cache with a fresh LIST
from outside. Computed once per cycle, served as stored, next to the probes."""


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
        self.listener = listen(address)
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
                ready = self.selector.select(max(0.0, timeout))
                # What connected clients sent is read (and a probe answered) before new connections can
                # displace them: a flood of connects never pushes a waiting probe out.
                for key, events in sorted(ready, key=lambda item: item[0].fileobj is self.listener):
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
                    sock.send(BUSY)
                sock.close()
                continue
            now = time.monotonic()
            conn = _Connection(sock=sock, opened=now, deadline=now + HEAD_TIMEOUT)
            self.connections[sock] = conn
            self.selector.register(sock, selectors.EVENT_READ, data=conn)
            self._read(conn)  # a probe has usually sent its request already: answered before any displacement

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
                self._answer(conn, response(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, PLAIN, body))
            return
        request = parse_head(bytes(conn.head[:end]))
        conn.head = bytearray()
        if isinstance(request, bytes):
            self._answer(conn, request)
        elif request.path not in self.paths:
            self._answer(conn, response(HTTPStatus.NOT_FOUND, PLAIN, b"not found\n", head=request.head))
        elif request.path != "/metrics":
            self._answer(conn, self.endpoints.stored_answer(request))
        elif (reused := self.endpoints.scrapes.reused(request, time.monotonic())) is not None:
            self._answer(conn, reused)
        elif not self.endpoints.scrapes.slot.acquire(blocking=False):
            self.dropped["metrics_busy"] += 1
            self._answer(conn, response(HTTPStatus.SERVICE_UNAVAILABLE, PLAIN, b"busy\n", head=request.head))
        else:
            conn.working = True
            self.selector.unregister(conn.sock)
            try:
                self.endpoints.scrapes.pool.submit(self._work, conn, request)
            except RuntimeError:  # the pool is shut down: we are stopping
                self.endpoints.scrapes.slot.release()
                self._close(conn)

    def _work(self, conn: _Connection, request: Request) -> None:
        """In the metrics pool's thread: the only place ``/metrics`` is rendered."""
        try:
            answer = self.endpoints.scrapes.render(request)
        except Exception as exc:  # a broken collector is a failed scrape, not a dead pool thread
            log.warning("metrics_render_raised", error=repr(exc))
            answer = response(HTTPStatus.INTERNAL_SERVER_ERROR, PLAIN, b"metrics raised an error\n")
        finally:
            self.endpoints.scrapes.slot.release()
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
    ) -> None:
        live = RefreshedCheck("liveness", liveness)
        self.checks = {"/healthz": live, "/livez": live, "/readyz": RefreshedCheck("readiness", readiness)}
        self.debug_cache: Published | None = None
        """Opt-in (``enable_debug_cache``): published once per cycle, served on ``DEBUG_CACHE_PATH``."""
        self.servers: list[_Server] = []
        self._addresses = (healthz_address, metrics_address)
        self.scrapes = Scrapes(registry)

    def enable_debug_cache(self) -> None:
        """Serve ``/debug/cache`` beside the probes (before ``start``)."""
        self.debug_cache = Published("the cache digest")

    def _plan(self) -> dict[str, set[str]]:
        healthz_address, metrics_address = self._addresses
        plan: dict[str, set[str]] = {}
        if healthz_address:
            plan.setdefault(healthz_address, set()).update(_HEALTH_PATHS)
            if self.debug_cache is not None:
                plan[healthz_address].add(DEBUG_CACHE_PATH)
        if metrics_address:
            plan.setdefault(metrics_address, set()).add("/metrics")
        return plan

    def start(self) -> None:
        for address, paths in self._plan().items():
            server = _Server(address, frozenset(paths), self)  # binds now: a taken port fails start()
            self.servers.append(server)
        if any(_HEALTH_PATHS & server.paths for server in self.servers):
            for check in {id(c): c for c in self.checks.values()}.values():
                check.start()
        for server in self.servers:
            server.start()

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
        for check in self.checks.values():
            check.stop()
        self.scrapes.shutdown()
        for server in self.servers:
            server.stop(timeout=2.0)

    def publish_cache_digest(self, digest: Callable[[], Mapping[str, Any]]) -> None:
        """Once per cycle: the cache's digest, computed only when ``/debug/cache`` is served, which
        serves it until the next cycle (never computed per request)."""
        if self.debug_cache is not None:
            self.debug_cache.publish(digest())

    def stored_answer(self, request: Request) -> bytes:
        """On the loop thread: a probe's or ``/debug/cache``'s answer, computed beforehand."""
        if request.path == DEBUG_CACHE_PATH and self.debug_cache is not None:
            return self.debug_cache.answer(request)
        return self.checks[request.path].answer(request, time.monotonic())


def add_debug_cache_flag(parser: Any) -> None:
    parser.add_argument(
        "--debug-cache",
        action="store_true",
        help=f"serve {DEBUG_CACHE_PATH} on the healthz address: the watch cache's per-resource count and "
        "digest at the start of the last cycle (for a soak's cache check; off by default)",
    )
