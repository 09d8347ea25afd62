"""Answers the health server gives without running anything on the request path: the probes' and
``/debug/cache``'s (issue 37, point 18).

Why: a probe answered by a check run in a shared pool waits behind whatever else that pool runs. Flooded
with ``/debug/cache`` (a digest over the whole cache, ~13 ms at 20,000 pods) or with the probes
themselves, the pool's connections filled the connection cap and the kubelet's probes were refused or
timed out: a liveness probe turns that into a restart loop. So:

- each check (liveness, readiness) runs on its own small thread every ``PROBE_REFRESH`` seconds, and
  its complete answer (GET and HEAD bytes) is stored with the time it was computed; the server's loop
  thread answers a probe from the stored bytes: no pool, no queue, nothing computed per request;
- a check that stops completing (blocked on a lock, stuck) is not hidden behind its last answer: one
  older than ``PROBE_STALE_AFTER`` is served as 503 naming its age; a check that raises is a 500;
- ``/debug/cache`` serves the digest published once per cycle (``Published.publish``), 503 before
  the first.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Any

import structlog

from descheduler.service.httpwire import PLAIN, Request, response

log = structlog.get_logger("descheduler.health")

Check = Callable[[], tuple[bool, str]]

PROBE_REFRESH = 0.25
"""Seconds between two runs of a check: an answer is at most this old (a kubelet probes every 10 s)."""
PROBE_STALE_AFTER = 30.0
"""An answer older than this means the check no longer completes: 503, whatever it last said."""
FIRST_ANSWER_WAIT = 2.0
"""``start`` waits this long for each check's first answer, so a probe right after start is answered."""


def _both(status: int, content_type: str, body: bytes) -> tuple[bytes, bytes]:
    """The GET and the HEAD answer."""
    return response(status, content_type, body), response(status, content_type, body, head=True)


class RefreshedCheck:
    """One check, run on its own thread; ``answer`` (on the server's loop thread) reads the stored bytes."""

    def __init__(self, name: str, check: Check) -> None:
        self.name = name
        self.check = check
        self._stored: tuple[float, bytes, bytes] | None = None
        """(monotonic time computed, GET answer, HEAD answer): replaced whole, so read without a lock."""
        self._first = threading.Event()
        self._stop = threading.Event()
        self._raised = ""
        self._thread = threading.Thread(target=self._run, name=f"http-probe-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._first.wait(FIRST_ANSWER_WAIT)

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while True:
            self.refresh()
            if self._stop.wait(PROBE_REFRESH):
                return

    def refresh(self) -> None:
        try:
            ok, why = self.check()
            get, head = _both(
                HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE,
                "text/plain",
                (why or "ok").encode() + b"\n",
            )
            self._raised = ""
        except Exception as exc:  # a failing check is a failed probe, not a dead thread
            if repr(exc) != self._raised:  # once per distinct error, not four times a second
                self._raised = repr(exc)
                log.warning("health_check_raised", check=self.name, error=self._raised)
            get, head = _both(HTTPStatus.INTERNAL_SERVER_ERROR, PLAIN, b"check raised an error\n")
        self._stored = (time.monotonic(), get, head)
        self._first.set()

    def answer(self, request: Request, now: float) -> bytes:
        stored = self._stored
        if stored is None:
            body = f"{self.name} check has not completed yet\n".encode()
            return response(HTTPStatus.SERVICE_UNAVAILABLE, PLAIN, body, head=request.head)
        computed, get, head = stored
        if now - computed > PROBE_STALE_AFTER:
            body = f"{self.name} check has not completed for {now - computed:.0f}s\n".encode()
            return response(HTTPStatus.SERVICE_UNAVAILABLE, PLAIN, body, head=request.head)
        return head if request.head else get


class Published:
    """A JSON document computed elsewhere (once per cycle) and served as stored."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._stored: tuple[bytes, bytes] | None = None

    def publish(self, value: Mapping[str, Any]) -> None:
        self._stored = _both(HTTPStatus.OK, "application/json", json.dumps(value, sort_keys=True).encode())

    def answer(self, request: Request) -> bytes:
        stored = self._stored
        if stored is None:
            body = f"{self.what} is computed at the start of each cycle; no cycle has run yet\n".encode()
            return response(HTTPStatus.SERVICE_UNAVAILABLE, PLAIN, body, head=request.head)
        return stored[1] if request.head else stored[0]
