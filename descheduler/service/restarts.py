"""Telling how the rollout restarts this service made (``surgeSingleReplica``) turned out.

A restart is a migration like an eviction: its record is in the journal before the patch and it counts
against every limit while its old pod is leaving. Its outcome is decided over the planner state, from the
journal's record and the Deployment's status (``planner.surge.follow_restarts``), not from this process's
memory: a successor after a kill or a takeover follows the restarts in flight where its predecessor left
them, and the record's ``outcome`` says which were already told. This module adds what only the cluster
shows, the new pod, and the words:

- ``completed``: the old pod is gone and the Deployment rolled out; the message names the new pod (Ready,
  not terminating) and its node (off the hotspot or back on it) and how long it took from the patch;
- ``failed``: overdue (the Deployment's ``progressDeadlineSeconds`` plus ``minReadySeconds`` after the
  patch) or the Deployment reports ``ProgressDeadlineExceeded``: a Warning on the Deployment and the pod;
  its old pod counts as staying (its node's load, no limit slot).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from descheduler.cluster.types import ClusterSnapshot, Pod
from descheduler.planner import PlannerState
from descheduler.planner.index import ClusterIndex
from descheduler.planner.state import COMPLETED, Migration
from descheduler.planner.surge import follow_restarts
from descheduler.service.records import EvictionRecord


@dataclass(frozen=True)
class Followed:
    migration: Migration
    """The restart as it now stands: ``restart`` is its result."""
    message: str
    seconds: float
    """From the patch to the cycle that saw the outcome (a cycle's interval is the resolution)."""
    new_pod: Pod | None = None

    @property
    def result(self) -> str:
        """``completed`` or ``failed``."""
        return self.migration.restart

    @property
    def pod(self) -> Pod:
        """The old pod, as far as the record names it."""
        m = self.migration
        name = m.pod.split("/", 1)[-1]
        return Pod(namespace=m.namespace, name=name, uid=m.uid, node_name=m.node)

    def record(self) -> EvictionRecord:
        m = self.migration
        return EvictionRecord(m.pod, m.node, "", "", self.result, self.message, "Deployment", m.workload_name)


def follow(
    state: PlannerState, snapshot: ClusterSnapshot, index: ClusterIndex, now: float
) -> tuple[PlannerState, list[Followed]]:
    """The state with the restarts ``snapshot`` settles marked, and what to tell of each."""
    state, outcomes = follow_restarts(snapshot, state, now)
    done = []
    for outcome in outcomes:
        m = outcome.migration
        new = None
        message = outcome.message
        if m.restart == COMPLETED:
            ready = _ready_pods(snapshot.pods, index, m)
            if ready:
                new = min(ready, key=lambda p: (-p.created, p.key))
                where = "off" if new.node_name != m.node else "back on"
                message = (
                    f"completed: old pod {m.pod} gone, new pod {new.key} Ready on node {new.node_name} "
                    f"({where} {m.node}) {outcome.seconds:.0f}s after the restart"
                )
        done.append(Followed(m, message, outcome.seconds, new))
    return state, done


def _ready_pods(pods: Iterable[Pod], index: ClusterIndex, old: Migration) -> list[Pod]:
    """The workload's pods other than the old one that are Ready and not terminating."""
    out = []
    for pod in pods:
        if pod.namespace != old.namespace or pod.uid == old.uid:
            continue
        if not pod.ready or pod.terminating or pod.is_terminal:
            continue
        workload = index.workload_of(pod)
        if workload is not None and workload.identity == old.workload:
            out.append(pod)
    return out
