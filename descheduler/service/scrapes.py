"""``/metrics`` for the health server: rendered in a small pool, a few requests at a time, and a render
reused for a while after it, so that scrapes, however many, cannot take the loop thread's GIL from the
kubelet's probes (``health.py``)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from descheduler.service.httpwire import Request, response

METRICS_WORKERS = 1
MAX_METRICS_IN_FLIGHT = 4
"""``/metrics`` requests being rendered or waiting for the pool, over all addresses; more get 503 at once
(Prometheus scrapes every 15-60 s: a few at a time is plenty)."""
METRICS_DUTY = 0.1
"""The share of the time ``/metrics`` rendering may take, however often it is asked for: a render is
reused for ``1 / METRICS_DUTY - 1`` times its own duration after it ends. Why: rendering holds the GIL,
and the loop thread that answers the probes gives the GIL up at every socket call and may then wait a
whole switch interval (5 ms) to get it back. Under renders back to back, a probe that needs a few dozen
such calls took 1.3-1.9 s, past the kubelet's 1 s (80 clients on 5,000 series). A reused render is a
fraction of a second old; Prometheus scrapes every 15-60 s."""
METRICS_REUSE_MAX = 2.0
"""Seconds a render is reused at most, however long it took: a render slowed by a busy process (a large
cycle holding the GIL) must not leave a second Prometheus (an HA pair) reading the same figures for long."""


@dataclass(frozen=True)
class _Render:
    """One ``/metrics`` render as whole answers to GET and HEAD (the loop thread sends them as they are,
    never copying a body of megabytes per request), when it was done and how long it took."""

    get: bytes
    head: bytes
    ended: float
    took: float

    def reusable(self, now: float) -> bool:
        return now - self.ended <= min(self.took * (1 / METRICS_DUTY - 1), METRICS_REUSE_MAX)


class Scrapes:
    """The pool that renders ``/metrics``, the slots that bound the requests waiting for it, and the last
    render."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.pool = ThreadPoolExecutor(METRICS_WORKERS, thread_name_prefix="http-metrics")
        self.slot = threading.BoundedSemaphore(MAX_METRICS_IN_FLIGHT)
        self._render: _Render | None = None
        """Written by the pool's thread, read by the loop's (one reference, replaced whole)."""

    def reused(self, request: Request, now: float) -> bytes | None:
        """The last render's answer while it may still be reused (``METRICS_DUTY``), else None."""
        render = self._render
        if render is None or not render.reusable(now):
            return None
        return render.head if request.head else render.get

    def render(self, request: Request) -> bytes:
        """In the pool: a request that waited behind a render takes that render's answer."""
        started = time.monotonic()
        reused = self.reused(request, started)
        if reused is not None:
            return reused
        body = generate_latest(self.registry)
        get = response(HTTPStatus.OK, CONTENT_TYPE_LATEST, body)
        head = response(HTTPStatus.OK, CONTENT_TYPE_LATEST, body, head=True)
        ended = time.monotonic()
        self._render = _Render(get, head, ended, ended - started)
        return head if request.head else get

    def shutdown(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
