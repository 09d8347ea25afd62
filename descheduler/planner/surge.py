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
and DaemonSets stay protected. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from descheduler.cluster.types import Rollout
from descheduler.planner import reasons
from descheduler.planner.state import Migration


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
