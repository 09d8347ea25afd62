"""Evictions of unknown outcome, and how the watch cache settles them.

A request that reached the API server without a clear answer (timeout, connection broken after
sending, 5xx, including a 504 sent after the eviction was applied) may or may not have evicted the
pod. Until the cache shows which, the runner counts it as an eviction: it is a migration for every
limit and window, and its node's anomaly count is reset. These pure rules decide when the cache has
shown enough:

- the pod is gone, or a pod of that name now has another UID, or it is terminating: ``evicted``;
- the same pod, not terminating, in a cache that has heard from the server at least ``settle`` seconds
  after the request was sent (the server's own request timeout: a slow server may still act on it
  until then): ``failed``;
- a surge-first restart's old pod legitimately runs on until its replacement is ready, so while it runs
  (not terminating) the pod tells little: the Deployment does. Its pod template carries the
  ``restartedAt`` our patch wrote (not older than the send, to the second): ``evicted`` (applied; the
  restart is then followed to its outcome, ``restarts.py``); a cache that has heard ``settle`` seconds
  past the send with a template without it: ``failed``. Only a Deployment missing from the cache falls
  back to waiting ``restart_settle`` too;
- anything else: still ``unknown``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from descheduler.cluster.types import Pod, Rollout
from descheduler.planner.state import PlannerState, forget, settle_migrations

DEFAULT_SETTLE_SECONDS = 60.0
"""kube-apiserver's default ``--request-timeout``: no request is still being worked on after this."""


@dataclass(frozen=True)
class Unconfirmed:
    """An eviction request whose outcome is not known yet."""

    pod: Pod
    """The pod as it was when chosen (its UID tells it from a successor of the same name)."""
    node: str
    destination: str
    reason: str
    sent: float
    """Wall-clock time the request was sent."""
    restart: bool = False
    """A surge-first restart (its old pod stays until the new one is ready), not an eviction."""
    deployment: str = ""
    """A restart's Deployment (the pod's namespace): its pod template says whether the patch applied."""


@dataclass(frozen=True)
class Resolution:
    eviction: Unconfirmed
    result: str
    """``evicted`` or ``failed``."""
    message: str


def resolve(
    pending: Iterable[Unconfirmed],
    pods: Mapping[str, Pod],
    *,
    heard: float,
    settle: float,
    restart_settle: float = 0.0,
    rollouts: Mapping[str, Rollout] | None = None,
) -> tuple[list[Resolution], list[Unconfirmed]]:
    """Split ``pending`` into what the cache settles now and what stays unknown.

    ``pods`` is the cache's pods by ``namespace/name``; ``heard`` the wall-clock time up to which the
    cache is known to reflect the server (now minus the age of its stalest resource); ``rollouts`` the
    cache's Deployments by ``namespace/name``.
    """
    settled: list[Resolution] = []
    still: list[Unconfirmed] = []
    for item in pending:
        current = pods.get(item.pod.key)
        rollout = (rollouts or {}).get(f"{item.pod.namespace}/{item.deployment}") if item.restart else None
        if current is None:
            settled.append(Resolution(item, "evicted", "confirmed: the pod is gone"))
        elif item.pod.uid and current.uid != item.pod.uid:
            settled.append(
                Resolution(item, "evicted", f"confirmed: replaced by a new pod (uid {current.uid})")
            )
        elif current.terminating:
            settled.append(Resolution(item, "evicted", "confirmed: the pod is terminating"))
        elif rollout is not None and (told := _restart_told(item, rollout, heard, settle)) is not None:
            settled.append(told)
        elif heard >= item.sent + (max(settle, restart_settle) if item.restart else settle):
            settled.append(
                Resolution(
                    item,
                    "failed",
                    f"confirmed not evicted: the pod is still running {heard - item.sent:.0f}s after "
                    "the request, longer than the server may take to apply it",
                )
            )
        else:
            still.append(item)
    return settled, still


def _restart_told(item: Unconfirmed, rollout: Rollout, heard: float, settle: float) -> Resolution | None:
    """What a restart's Deployment says of its patch: applied when the pod template carries a
    ``restartedAt`` from the send on (the patch stamps the second it leaves); not applied when the cache
    has heard from the server ``settle`` seconds past the send and the template does not; else None."""
    name = f"Deployment {item.pod.namespace}/{item.deployment}"
    if rollout.restarted_at >= math.floor(item.sent):
        return Resolution(item, "evicted", f"confirmed: {name}'s pod template carries the restart")
    if heard >= item.sent + settle:
        return Resolution(
            item,
            "failed",
            f"confirmed not applied: {heard - item.sent:.0f}s after the patch {name}'s pod template does "
            "not carry it, longer than the server may take to apply it",
        )
    return None


def settle_state(
    state: PlannerState,
    pending: Mapping[str, Unconfirmed],
    pods: Iterable[Pod],
    *,
    heard: float,
    settle: float,
    now: float,
    restart_settle: float = 0.0,
    rollouts: Mapping[str, Rollout] | None = None,
) -> tuple[PlannerState, dict[str, Unconfirmed], list[Resolution]]:
    """``resolve`` applied to the planner state: a confirmed failure stops counting (``forget``); a
    confirmed eviction counts in every window from the latest moment it may have been applied (now, or
    the server's own request timeout after sending if that came first), while its replacement is matched
    from the send time (the ping-pong guard: a replacement is created soon after the request, before
    that worst case). Returns the new state, what stays unknown by pod key, and the resolutions."""
    if not pending:
        return state, dict(pending), []
    by_key = {pod.key: pod for pod in pods}
    settled, still = resolve(
        pending.values(), by_key, heard=heard, settle=settle, restart_settle=restart_settle, rollouts=rollouts
    )
    failed = [(r.eviction.pod.key, r.eviction.pod.uid) for r in settled if r.result == "failed"]
    applied = {
        (r.eviction.pod.key, r.eviction.pod.uid): min(now, r.eviction.sent + settle)
        for r in settled
        if r.result == "evicted"
    }
    sent = {(r.eviction.pod.key, r.eviction.pod.uid): r.eviction.sent for r in settled}
    settled_state = settle_migrations(forget(state, failed), applied, sent)
    return settled_state, {u.pod.key: u for u in still}, settled
