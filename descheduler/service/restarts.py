"""Following the rollout restarts this replica made (``surgeSingleReplica``) until their old pod is gone.

A restart is a migration like an eviction: its record is in the journal before the patch and it counts
against every limit while the old pod exists (``planner``). What is particular is the outcome: the
Deployment's controller creates the new pod, waits for it to be ready, then removes the old one. These pure
rules read each cycle's snapshot and say when that happened, or that it did not within the deadline:

- ``completed``: the old pod (by uid) is gone and a pod of the workload, not terminating, is Ready;
  the message names it and its node (off the hotspot or not) and how long it took from the patch;
- ``overdue``: not completed ``deadline`` seconds after the patch (the Deployment's own default
  ``progressDeadlineSeconds`` is 600 s): a Warning on the Deployment; the old pod, while it exists, still
  counts as in flight, and the rollout, incomplete, keeps the Deployment from being restarted again;
- anything else: still restarting.

Kept in memory only: after a restart of the descheduler the journal's record keeps the limits; the
follow-up report of a restart in flight at that moment is lost.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from descheduler.cluster.types import Pod
from descheduler.planner import PlannedEviction
from descheduler.planner.index import ClusterIndex

DEFAULT_RESTART_DEADLINE = 600.0
"""Kubernetes' default ``progressDeadlineSeconds`` of a Deployment."""


@dataclass(frozen=True)
class Restarting:
    """A restart whose patch the server accepted, and when (wall clock)."""

    planned: PlannedEviction
    sent: float


@dataclass(frozen=True)
class Followed:
    restart: Restarting
    result: str
    """``completed`` or ``overdue``."""
    message: str
    seconds: float
    """From the patch to the cycle that saw the outcome (a cycle's interval is the resolution)."""
    new_pod: Pod | None = None


def follow(
    pending: Mapping[str, Restarting], index: ClusterIndex, now: float, deadline: float
) -> tuple[list[Followed], dict[str, Restarting]]:
    """Split ``pending`` (by old pod key) into what the snapshot behind ``index`` settles and the rest."""
    done: list[Followed] = []
    still: dict[str, Restarting] = {}
    for key, item in pending.items():
        old = item.planned.pod
        seconds = now - item.sent
        gone = not index.pod_exists(old.uid, old.key)
        ready = _ready_pods(index.snapshot.pods, index, item.planned.workload, old)
        if gone and ready:
            new = min(ready, key=lambda p: (-p.created, p.key))
            where = "off" if new.node_name != item.planned.node else "back on"
            message = (
                f"completed: old pod {old.key} gone, new pod {new.key} Ready on node {new.node_name} "
                f"({where} {item.planned.node}) {seconds:.0f}s after the restart"
            )
            done.append(Followed(item, "completed", message, seconds, new))
        elif seconds > deadline:
            state = "gone" if gone else "still running"
            message = (
                f"overdue: {seconds:.0f}s after the restart the old pod {old.key} is {state} and "
                f"{len(ready)} new pod(s) are Ready (deadline {deadline:g}s): see the Deployment's rollout"
            )
            done.append(Followed(item, "overdue", message, seconds))
        else:
            still[key] = item
    return done, still


def _ready_pods(pods: Iterable[Pod], index: ClusterIndex, identity: str, old: Pod) -> list[Pod]:
    """The workload's pods other than the old one that are Ready and not terminating."""
    out = []
    for pod in pods:
        if pod.namespace != old.namespace or pod.uid == old.uid:
            continue
        if not pod.ready or pod.terminating or pod.is_terminal:
            continue
        workload = index.workload_of(pod)
        if workload is not None and workload.identity == identity:
            out.append(pod)
    return out
