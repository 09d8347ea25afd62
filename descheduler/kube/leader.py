"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does it.

A candidate takes the lease when it is free or when its holder has not renewed it for
``lease_duration`` (timed on the local clock from when *we* last saw it change, so clock skew between
replicas does not matter). The leader renews every ``retry_period``; updates carry the resourceVersion
so two candidates cannot both win (409 Conflict). ``is_leader()`` turns false as soon as the last
successful renewal is older than ``renew_deadline`` (< ``lease_duration``), before anyone else can
acquire, so two replicas never evict at the same time. Stopping releases the lease so a successor
takes over at once.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import structlog

from descheduler.kube.api import KubeApi, path_segment
from descheduler.kube.errors import ApiStatusError, KubeError

log = structlog.get_logger("descheduler.kube.leader")


def _micro_time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _record(spec: Mapping[str, Any]) -> tuple[Any, ...]:
    """What identifies one observed lease state; any change of it restarts the expiry timer."""
    return (
        spec.get("holderIdentity") or "",
        spec.get("renewTime"),
        spec.get("acquireTime"),
        spec.get("leaseDurationSeconds"),
        spec.get("leaseTransitions"),
    )


class LeaderElector:
    def __init__(
        self,
        api: KubeApi,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float,
        renew_deadline: float,
        retry_period: float,
        on_started_leading: Callable[[], None],
        on_stopped_leading: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if not lease_duration > renew_deadline > retry_period > 0:
            raise ValueError(
                "leader election needs leaseDuration > renewDeadline > retryPeriod > 0, got "
                f"{lease_duration} / {renew_deadline} / {retry_period}"
            )
        if not identity:
            raise ValueError("leader election identity must not be empty")
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._clock = clock
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._leader = False
        self._announced = False
        self._last_renew = -math.inf
        self._lease: dict[str, Any] | None = None
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = -math.inf
        self.observed_holder = ""
        self._write_sent: float | None = None
        """When the last Lease write (create or update) was sent, on the monotonic clock."""
        self._path = (
            f"/apis/coordination.k8s.io/v1/namespaces/{path_segment(namespace)}/leases/{path_segment(name)}"
        )
        self._collection = f"/apis/coordination.k8s.io/v1/namespaces/{path_segment(namespace)}/leases"

    # -- public ------------------------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"leader-{self.name}", daemon=True)
        self._thread.start()

    def is_leader(self) -> bool:
        """True only while the last renewal is younger than ``renew_deadline``."""
        with self._lock:
            return self._leader and self._clock() - self._last_renew < self.renew_deadline

    def stop(self, release: bool = True, timeout: float | None = None) -> None:
        """Stop renewing and (if leading) release the Lease. ``timeout`` bounds the wait for a renewal in
        flight (default: its longest possible duration); the release is sent either way."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.renew_deadline + 5 if timeout is None else timeout)
        was_leader = self._set_leader(False)
        if release and was_leader:
            self._release()
        self._announce(False)

    # -- loop --------------------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            # A renewal counts from when its write was sent: the server applied it no earlier than that,
            # and other replicas time the Lease from when they see it change.
            self._write_sent = None
            ok = self._try_acquire_or_renew()
            if ok:
                with self._lock:
                    self._last_renew = self._write_sent if self._write_sent is not None else self._clock()
                    self._leader = True
                if not self._stop.is_set():
                    self._announce(True)
            elif self._leader_flag() and not self.is_leader():
                self._set_leader(False)
                log.warning("leadership_lost", lease=f"{self.namespace}/{self.name}", identity=self.identity)
                self._announce(False)
            if self._leader_flag():
                # Never sleep past the renew deadline: losing it must be noticed (and announced) at once.
                period = min(self.retry_period, max(0.0, self._leadership_ends() - self._clock()))
            else:
                period = self.retry_period * (1 + 0.2 * random.random())
            self._stop.wait(period)

    def _announce(self, leading: bool) -> None:
        """Run the callback for a change of leadership, once per change."""
        with self._lock:
            if self._announced == leading:
                return
            self._announced = leading
        if leading:
            log.info("leadership_acquired", lease=f"{self.namespace}/{self.name}", identity=self.identity)
        self._callback(self._on_started if leading else self._on_stopped)

    def _leader_flag(self) -> bool:
        with self._lock:
            return self._leader

    def _set_leader(self, value: bool) -> bool:
        with self._lock:
            previous = self._leader
            self._leader = value
            return previous

    def _callback(self, callback: Callable[[], None]) -> None:
        try:
            callback()
        except Exception:
            log.exception("leader_callback_failed")

    def _leadership_ends(self) -> float:
        with self._lock:
            return self._last_renew + self.renew_deadline

    def _request_timeout(self) -> float:
        """How long one Lease request may take, derived from the lease settings as client-go does.

        A leader's renewal may use all the time left before its renew deadline: a slow server that
        applies it after a shorter client timeout would keep the Lease fresh with writes this replica
        counted as failures, and the replica would step down while nobody else could take over. A
        candidate may use ``renew_deadline`` (still shorter than ``lease_duration``).
        """
        if self._leader_flag():
            return max(0.05, self._leadership_ends() - self._clock())
        return self.renew_deadline

    # -- lease operations -----------------------------------------------------------------------------------
    def _spec(self, previous: Mapping[str, Any] | None, now: float) -> dict[str, Any]:
        held_by_us = previous is not None and previous.get("holderIdentity") == self.identity
        transitions = int((previous or {}).get("leaseTransitions") or 0)
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, math.ceil(self.lease_duration)),
            "acquireTime": (previous or {}).get("acquireTime") if held_by_us else _micro_time(now),
            "renewTime": _micro_time(now),
            "leaseTransitions": transitions if held_by_us or previous is None else transitions + 1,
        }

    def _observe(self, spec: Mapping[str, Any]) -> None:
        record = _record(spec)
        if record != self._observed:
            self._observed = record
            self._observed_at = self._clock()
        self.observed_holder = str(spec.get("holderIdentity") or "")

    def _try_acquire_or_renew(self) -> bool:
        now = self._wall_clock()
        timeout = self._request_timeout()
        # Fast path for the leader: update the lease we wrote last time, no GET.
        lease_seen = self._lease
        if (
            self._leader_flag()
            and lease_seen is not None
            and self._update(lease_seen, self._spec(lease_seen.get("spec") or {}, now), timeout)
        ):
            return True
        timeout = self._request_timeout()
        try:
            lease = self.api.request("GET", self._path, timeout=timeout)
        except ApiStatusError as exc:
            if exc.status != 404:
                log.warning("lease_get_failed", error=str(exc))
                return False
            return self._create(now, timeout)
        except KubeError as exc:
            log.warning("lease_get_failed", error=str(exc))
            return False
        if not isinstance(lease, dict):
            return False
        spec = lease.get("spec") or {}
        if not isinstance(spec, Mapping):
            return False
        self._observe(spec)
        holder = str(spec.get("holderIdentity") or "")
        duration = spec.get("leaseDurationSeconds")
        duration = (
            float(duration) if isinstance(duration, int | float) and duration > 0 else self.lease_duration
        )
        if holder and holder != self.identity and self._clock() < self._observed_at + duration:
            return False
        return self._update(lease, self._spec(spec, now), timeout)

    def _create(self, now: float, timeout: float) -> bool:
        self._write_sent = self._clock()
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": self._spec(None, now),
        }
        try:
            lease = self.api.request("POST", self._collection, body=body, timeout=timeout)
        except KubeError as exc:
            log.info("lease_create_failed", error=str(exc))
            return False
        self._remember(lease)
        return True

    def _update(self, lease: Mapping[str, Any], spec: dict[str, Any], timeout: float) -> bool:
        self._write_sent = self._clock()
        body = {**lease, "spec": spec}
        try:
            updated = self.api.request("PUT", self._path, body=body, timeout=timeout)
        except KubeError as exc:
            log.info("lease_update_failed", error=str(exc))
            self._lease = None
            return False
        self._remember(updated)
        return True

    def _remember(self, lease: Any) -> None:
        if isinstance(lease, dict) and isinstance(lease.get("spec"), Mapping):
            self._lease = lease
            self._observe(lease["spec"])
        else:
            self._lease = None

    def _release(self) -> None:
        """Give the lease up (empty holder, 1s duration) so a successor need not wait for expiry.

        The lease we wrote last is tried first. Someone else may have written it since (the journal's
        marker, ``kube/lost.py``, an operator's annotation): the server refuses our stale copy with 409,
        so it is read again and the release sent once more, as a renewal falls back to a fresh read."""
        lease = self._lease
        for attempt in range(2):
            if lease is None:
                try:
                    lease = self.api.request("GET", self._path, timeout=self._request_timeout())
                except KubeError as exc:
                    log.warning("lease_release_failed", error=str(exc))
                    return
            if not isinstance(lease, dict):
                return
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") != self.identity:
                return
            now = _micro_time(self._wall_clock())
            spec.update(
                {"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": now, "acquireTime": now}
            )
            try:
                self.api.request(
                    "PUT", self._path, body={**lease, "spec": spec}, timeout=self._request_timeout()
                )
            except ApiStatusError as exc:
                if exc.status == 409 and attempt == 0:
                    lease = None
                    continue
                log.warning("lease_release_failed", error=str(exc))
                return
            except KubeError as exc:
                log.warning("lease_release_failed", error=str(exc))
                return
            log.info("lease_released", lease=f"{self.namespace}/{self.name}", identity=self.identity)
            return
