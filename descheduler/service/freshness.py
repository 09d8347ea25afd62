"""How fresh the watch cache must be for a cycle to plan, and to act.

A watch that is quiet and one whose connection went silently dead look the same from the client: both
say nothing. The cache's watches run long (``watchCache.watchTimeout``) so an idle cycle costs the API
server nothing; freshness is proven only when a cycle is about to act (evict, restart, taint): the
resources that have not heard from the server within ``watchCache.maxStaleness`` have their watches
re-opened and the server's answer is awaited (bounded). No answer: nothing is acted on, and the record
says which resources and how old. A resource not heard from for longer than a healthy watch can stay
quiet (``kube.cache.broken_after``) is broken: no cycle runs at all and /readyz says it.
"""

from __future__ import annotations

from collections.abc import Mapping

import structlog

from descheduler.cluster.types import ClusterSnapshot
from descheduler.planner import Plan
from descheduler.planner.steer import has_our_taint, steer_reason
from descheduler.service.edges import Signals

log = structlog.get_logger("descheduler.cycle")


def acts(snapshot: ClusterSnapshot, decided: Plan, *, steering: bool) -> bool:
    """Whether a cycle may act on ``decided``: an eviction or restart planned, or (``steering``: hotspot
    taints on) a node that may be tainted or untainted. Only then must the cache be proven fresh."""
    if decided.evictions:
        return True
    if not steering:
        return False
    moving = decided.moving or {}
    return any(has_our_taint(n) for n in snapshot.nodes) or any(
        steer_reason(r, moving) for r in decided.node_reports
    )


def prove_fresh(signals: Signals, bound: float | None) -> tuple[bool, str]:
    """Before acting: resources quiet for longer than ``bound`` have their watches re-opened and the
    server's answer awaited (``Signals.refresh``). Returns whether any was refreshed (the plan must then
    be made again on what they brought), and why the cache is still too old to act on (``""``: it is not)."""
    if bound is None:
        return False, ""
    quiet = sorted(name for name, age in signals.cache_ages().items() if age > bound)
    if not quiet:
        return False, ""
    log.info("cache_refresh", resources=quiet, bound_seconds=bound)
    signals.refresh(quiet)
    return True, stale_cache(signals.cache_ages(), bound)


def stale_cache(ages: Mapping[str, float], bound: float | None) -> str:
    """Why the cache is too old to act on, or ``""``: every resource must have heard within ``bound``."""
    if bound is None:
        return ""
    stale = {name: age for name, age in ages.items() if age > bound}
    if not stale:
        return ""
    shown = ", ".join(
        f"{name} {'never' if age == float('inf') else f'{age:.0f}s ago'}"
        for name, age in sorted(stale.items())
    )
    return (
        f"watch cache stale: last heard from the API server: {shown} "
        f"(bound {bound:g}s); nothing is decided on data that old"
    )
