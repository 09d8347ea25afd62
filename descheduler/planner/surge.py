"""Surge-first moves (``MigrationControllerArgs.surgeSingleReplica``): when a single-replica Deployment's pod
may be moved by a rollout restart instead of an eviction.

Evicting the only pod of a workload is an outage, so such pods are never evicted (``replicas-1``). A
Deployment whose rolling update creates the new pod before it removes the old one can be moved without
one: patch its pod template (``kubectl rollout restart``'s annotation) and its own controller surges a
replacement, waits for it to be ready, then removes the old pod. That holds only when the rollout really
surges first, which this module decides over the Deployment's fields (``cluster.types.Rollout``):

- strategy ``RollingUpdate`` (``Recreate`` stops the pod first);
- effective ``maxSurge`` at least 1 and effective ``maxUnavailable`` 0, resolved as the Deployment
  controller resolves them (``ResolveFenceposts``: a percent of the replicas, maxSurge rounded up,
  maxUnavailable rounded down; both 0 makes maxUnavailable 1);
- not paused (a paused Deployment does not roll out at all);
- the previous rollout complete: ``observedGeneration == generation`` and ``updated == ready == replicas``
  (status) equal to the expected replicas;
- no restart of it by us in flight or within the ``objectLimiters`` window (``recent_restart``).

Each failed condition has its own skip code. StatefulSets (their rolling update deletes first), bare pods
and DaemonSets stay protected.

Once patched, a restart is followed from the state alone (the journal's records and the Deployment's
status, so a successor follows it on; ``follow_restarts``): ``completed`` when the old pod is gone and
the Deployment rolled out; ``failed`` when it is overdue (``progressDeadlineSeconds`` plus
``minReadySeconds`` after the patch) or the Deployment reports ``ProgressDeadlineExceeded``. A failed
restart's old pod counts as staying: its usage is its node's again and it holds no limit slot. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from descheduler.cluster.parse import DEFAULT_PROGRESS_DEADLINE
from descheduler.cluster.types import ClusterSnapshot, Pod, Rollout, Workload
from descheduler.planner import reasons
from descheduler.planner.state import COMPLETED, FAILED, RESTARTING, Migration, PlannerState


def scaled(value: int | str, replicas: int, round_up: bool) -> int:
    """Kubernetes' ``GetScaledValueFromIntOrPercent``: an int as is, a percent of ``replicas`` rounded up or
    down (in integers: no float error at the boundary)."""
    if isinstance(value, int):
        return value
    percent = int(value.rstrip("%"))
    if round_up:
        return (percent * replicas + 99) // 100
    return percent * replicas // 100


def fenceposts(rollout: Rollout, replicas: int) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) as the Deployment controller resolves them for ``replicas``."""
    surge = scaled(rollout.max_surge, replicas, round_up=True)
    unavailable = scaled(rollout.max_unavailable, replicas, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1  # the controller's own rule: it must be able to make progress
    return surge, unavailable


def surge_refusal(name: str, rollout: Rollout | None, replicas: int) -> tuple[str, str] | None:
    """Why a rollout restart of Deployment ``name`` (``namespace/name``) would not surge first, as a
    (code, message); None when it would."""
    what = f"Deployment {name} expects {replicas} replica"
    if rollout is None:
        return reasons.SURGE_UNKNOWN, f"{what} and is not in the snapshot: whether it surges first is unknown"
    if rollout.problem:
        return reasons.SURGE_UNKNOWN, f"{what} and cannot be read ({rollout.problem}): it is not restarted"
    if rollout.strategy != "RollingUpdate":
        return reasons.SURGE_RECREATE, (
            f"{what} with strategy {rollout.strategy}: a restart stops the pod before its replacement starts"
        )
    surge, unavailable = fenceposts(rollout, replicas)
    if surge < 1:
        return reasons.SURGE_NO_SURGE, (
            f"{what}; maxSurge {rollout.max_surge} resolves to {surge}: a restart would not create the new "
            "pod first"
        )
    if unavailable > 0:
        return reasons.SURGE_UNAVAILABLE, (
            f"{what}; maxUnavailable {rollout.max_unavailable} resolves to {unavailable}: a restart may stop "
            "the pod before its replacement is ready"
        )
    if rollout.paused:
        return reasons.SURGE_PAUSED, f"{what} and is paused: a restart would not roll out"
    if rollout.observed_generation != rollout.generation or not (
        rollout.updated_replicas == rollout.ready_replicas == rollout.replicas == replicas
    ):
        return reasons.SURGE_ROLLING_OUT, (
            f"{what} and its previous rollout is not complete (generation {rollout.generation}, "
            f"observed {rollout.observed_generation}; replicas {rollout.replicas}, "
            f"updated {rollout.updated_replicas}, ready {rollout.ready_replicas})"
        )
    return None


def recent_restart(
    migrations: Iterable[Migration],
    identity: str,
    window: float,
    now: float,
    exists: Callable[[Migration], bool],
) -> Migration | None:
    """A move of workload ``identity`` by us still in flight (``exists``: its pod is still there) or inside
    the ``objectLimiters`` window (``window`` seconds, 0 when disabled): no second restart overlaps it."""
    for migration in migrations:
        if migration.workload == identity and (exists(migration) or migration.in_window(window, now)):
            return migration
    return None


# --- following a restart to its outcome -------------------------------------------------------------------


@dataclass(frozen=True)
class RestartOutcome:
    """A restart this cycle found settled: the migration as it now stands (``restart`` is ``completed``
    or ``failed``), why, and the seconds since the patch (a cycle's interval is the resolution)."""

    migration: Migration
    message: str
    seconds: float


def restart_deadline(rollout: Rollout | None) -> float:
    """How long a restart may take: the Deployment's ``progressDeadlineSeconds`` plus its
    ``minReadySeconds`` (the new pod must be available that long before the old one goes); Kubernetes'
    default 600 s when the Deployment is unknown."""
    if rollout is None:
        return float(DEFAULT_PROGRESS_DEADLINE)
    return float(rollout.progress_deadline + rollout.min_ready)


def follow_restarts(
    snapshot: ClusterSnapshot, state: PlannerState, now: float
) -> tuple[PlannerState, tuple[RestartOutcome, ...]]:
    """Settle the restarts in flight (``restarting``, outcome known) that ``snapshot`` shows ended. A
    failed one whose old pod still runs loses its departure: that pod is its node's load again, not a
    pod leaving. Restarts of unknown outcome wait until they are settled (``service/unknown.py``)."""
    followed = [m for m in state.migrations if m.restart == RESTARTING and not m.unresolved]
    if not followed:
        return state, ()
    pods = {p.uid or p.key: p for p in snapshot.pods}
    deployments = {(w.namespace, w.name): w for w in snapshot.workloads if w.kind == "Deployment"}
    settled: dict[tuple[str, str], RestartOutcome] = {}
    for m in followed:
        old = pods.get(m.uid or m.pod)
        found = _outcome(m, old, deployments.get((m.namespace, m.workload_name)), now)
        if found is not None:
            result, message = found
            settled[(m.pod, m.uid)] = RestartOutcome(replace(m, restart=result), message, now - m.started)
    if not settled:
        return state, ()
    staying = {k for k, o in settled.items() if o.migration.restart == FAILED and (k[1] or k[0]) in pods}
    migrations = tuple(
        settled[(m.pod, m.uid)].migration if (m.pod, m.uid) in settled else m for m in state.migrations
    )
    departures = tuple(d for d in state.departures if (d.pod, d.uid) not in staying)
    return replace(state, migrations=migrations, departures=departures), tuple(settled.values())


def _outcome(
    m: Migration, old: Pod | None, deployment: Workload | None, now: float
) -> tuple[str, str] | None:
    """(``completed`` or ``failed``, why) for restart ``m``, or None while it may still complete."""
    if deployment is not None and m.workload and deployment.uid != m.workload:
        deployment = None  # another Deployment of that name: ours is gone
    rollout = deployment.rollout if deployment is not None else None
    seconds = now - m.started
    name = f"Deployment {m.namespace}/{m.workload_name}"
    if old is None and deployment is not None and rollout is not None and _rolled_out(rollout, deployment):
        return COMPLETED, f"old pod {m.pod} gone and {name} rolled out, {seconds:.0f}s after the restart"
    if old is not None and old.terminating:
        return None  # its replacement is ready: it is on its way out
    stalled = rollout is not None and rollout.deadline_exceeded
    stalled = stalled and rollout is not None and rollout.observed_generation == rollout.generation
    deadline = restart_deadline(rollout)
    if not stalled and seconds <= deadline:
        return None
    if stalled:
        why = f"{name} reports ProgressDeadlineExceeded"
    elif rollout is None:
        why = f"{name} is not in the snapshot {seconds:.0f}s after the restart (deadline {deadline:g}s)"
    else:
        why = (
            f"{name} has not rolled out {seconds:.0f}s after the restart (deadline {deadline:g}s: "
            f"progressDeadlineSeconds {rollout.progress_deadline} + minReadySeconds {rollout.min_ready})"
        )
    fate = "still runs and counts as staying on its node" if old is not None else "is gone"
    return FAILED, f"failed: {why}; the old pod {m.pod} {fate}"


def _rolled_out(rollout: Rollout, deployment: Workload) -> bool:
    """The Deployment's controller saw its latest spec and every expected replica is updated and ready."""
    return rollout.observed_generation == rollout.generation and (
        rollout.updated_replicas == rollout.ready_replicas == rollout.replicas == deployment.replicas
    )
