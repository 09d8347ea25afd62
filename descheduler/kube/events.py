"""Kubernetes Events on evicted pods (and on nodes we taint), written in the background so a slow events
API never slows a cycle.

Events go to ``events.k8s.io/v1``; a server without that API (404) or a role that only allows core
events (403) gets the core ``v1`` shape instead. Text is cut to the API's limits (note 1 KiB, reason and
action 128 bytes) rather than rejected. Writing is best effort: failures are logged and counted.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from descheduler.cluster.types import Pod
from descheduler.kube.api import KubeApi, path_segment
from descheduler.kube.errors import ApiStatusError, KubeError

log = structlog.get_logger("descheduler.kube.events")
NOTE_LIMIT = 1024
SHORT_LIMIT = 128
NAME_LIMIT = 253


def truncate_utf8(text: str, limit: int) -> str:
    """At most ``limit`` bytes of UTF-8, cut on a character boundary, marked with an ellipsis when cut."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[: limit - 3].decode("utf-8", errors="ignore") + "..."


@dataclass(frozen=True, slots=True)
class Regarding:
    """The namespaced object an Event is about (the Event's ``regarding`` reference), for
    ``EventRecorder.record_object``."""

    kind: str
    api_version: str
    namespace: str
    name: str
    uid: str = ""

    @classmethod
    def workload(cls, kind: str, namespace: str, name: str, uid: str = "") -> Regarding:
        """A workload (Deployment, StatefulSet...): ReplicationController is ``v1``, the rest ``apps/v1``."""
        return cls(kind, "v1" if kind == "ReplicationController" else "apps/v1", namespace, name, uid)


@dataclass(frozen=True)
class _Pending:
    namespace: str
    name: str
    uid: str
    type: str
    reason: str
    action: str
    message: str
    at: float
    kind: str = "Pod"
    api_version: str = "v1"


NODE_EVENT_NAMESPACE = "default"
"""Events about cluster-scoped nodes live in ``default``, where the kubelet writes its own."""


class EventRecorder:
    """Queue events on pods; a worker thread posts them. ``flush()`` waits for the queue to drain."""

    def __init__(
        self,
        api: KubeApi,
        component: str = "load-aware-descheduler",
        write_in_dry_run: bool = False,
        *,
        instance: str | None = None,
        queue_size: int = 1000,
        request_timeout: float = 5.0,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.component = truncate_utf8(component, SHORT_LIMIT)
        self.write_in_dry_run = write_in_dry_run
        self.instance = truncate_utf8(instance or f"{component}-{socket.gethostname()}", SHORT_LIMIT)
        self._queue_size = queue_size
        self._timeout = request_timeout
        self._wall_clock = wall_clock
        self._cond = threading.Condition()
        self._pending: deque[_Pending] = deque()
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._core_only = False
        self.written = 0
        self.failed = 0
        self.dropped = 0

    def record(self, pod: Pod, type_: str, reason: str, message: str, *, action: str = "Evict") -> None:
        """Queue an event on ``pod``. Never blocks on the API and never raises for API trouble."""
        if type_ not in ("Normal", "Warning"):
            raise ValueError(f"event type must be Normal or Warning, got {type_!r}")
        item = _Pending(pod.namespace, pod.name, pod.uid, type_, reason, action, message, self._wall_clock())
        self._enqueue(item)

    def record_node(self, node: str, uid: str, type_: str, reason: str, message: str, *, action: str) -> None:
        """Queue an event on a node (in ``default``, as the kubelet's). Never blocks, never raises."""
        if type_ not in ("Normal", "Warning"):
            raise ValueError(f"event type must be Normal or Warning, got {type_!r}")
        at = self._wall_clock()
        self._enqueue(_Pending(NODE_EVENT_NAMESPACE, node, uid, type_, reason, action, message, at, "Node"))

    def record_object(
        self, regarding: Regarding, type_: str, reason: str, message: str, *, action: str
    ) -> None:
        """Queue an event on a namespaced object (a Deployment, a workload the ping-pong guard backs off).
        Never blocks, never raises."""
        if type_ not in ("Normal", "Warning"):
            raise ValueError(f"event type must be Normal or Warning, got {type_!r}")
        at, r = self._wall_clock(), regarding
        self._enqueue(
            _Pending(r.namespace, r.name, r.uid, type_, reason, action, message, at, r.kind, r.api_version)
        )

    def _enqueue(self, item: _Pending) -> None:
        with self._cond:
            if self._closed:
                self.dropped += 1
                return
            if len(self._pending) >= self._queue_size:
                self.dropped += 1
                log.warning(
                    "event_dropped_queue_full", pod=f"{item.namespace}/{item.name}", reason=item.reason
                )
                return
            self._pending.append(item)
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="event-recorder", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued event was written or given up on."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._pending and not self._busy, timeout)

    def close(self, timeout: float = 5.0) -> None:
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                item = self._pending.popleft()
                self._busy = True
            try:
                self._write(item)
            except Exception:
                self.failed += 1
                log.exception("event_write_crashed", pod=f"{item.namespace}/{item.name}")
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _write(self, item: _Pending) -> None:
        ns = path_segment(item.namespace)
        if not self._core_only:
            try:
                self.api.request(
                    "POST",
                    f"/apis/events.k8s.io/v1/namespaces/{ns}/events",
                    body=self._events_v1(item),
                    timeout=self._timeout,
                )
                self.written += 1
                return
            except ApiStatusError as exc:
                if exc.status not in (403, 404):
                    self._log_failure(item, exc)
                    return
                self._core_only = True
                log.info("events_api_fallback_to_core_v1", status=exc.status)
            except KubeError as exc:
                self._log_failure(item, exc)
                return
        try:
            self.api.request(
                "POST", f"/api/v1/namespaces/{ns}/events", body=self._core_v1(item), timeout=self._timeout
            )
            self.written += 1
        except KubeError as exc:
            self._log_failure(item, exc)

    def _log_failure(self, item: _Pending, exc: Exception) -> None:
        self.failed += 1
        log.warning(
            "event_write_failed", pod=f"{item.namespace}/{item.name}", reason=item.reason, error=str(exc)
        )

    def _name(self, item: _Pending) -> str:
        suffix = f".{int(item.at * 1e9):x}"
        return item.name[: NAME_LIMIT - len(suffix)] + suffix

    @staticmethod
    def _regarding(item: _Pending) -> dict[str, Any]:
        ref = {"apiVersion": item.api_version, "kind": item.kind, "name": item.name}
        if item.kind != "Node":
            ref["namespace"] = item.namespace
        if item.uid and "/" not in item.uid:
            ref["uid"] = item.uid
        return ref

    def _events_v1(self, item: _Pending) -> dict[str, Any]:
        return {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": self._name(item), "namespace": item.namespace},
            "eventTime": datetime.fromtimestamp(item.at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "reportingController": self.component,
            "reportingInstance": self.instance,
            "action": truncate_utf8(item.action, SHORT_LIMIT),
            "reason": truncate_utf8(item.reason, SHORT_LIMIT),
            "regarding": self._regarding(item),
            "note": truncate_utf8(item.message, NOTE_LIMIT),
            "type": item.type,
        }

    def _core_v1(self, item: _Pending) -> dict[str, Any]:
        stamp = datetime.fromtimestamp(item.at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": self._name(item), "namespace": item.namespace},
            "involvedObject": self._regarding(item),
            "reason": truncate_utf8(item.reason, SHORT_LIMIT),
            "message": truncate_utf8(item.message, NOTE_LIMIT),
            "type": item.type,
            "source": {"component": self.component},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "reportingComponent": self.component,
            "reportingInstance": self.instance,
        }
