"""The ping-pong guard: stop chasing a workload whose replacements keep landing on hot nodes.

The stock kube-scheduler places a replacement by requests, not usage. A pod evicted from a hot node
often comes straight back to it (the node now has the most free requests), or lands on a node that
earlier replacements have filled; the next cycle evicts it again, for ever. Three pure steps, run by
``plan`` on every cycle with the recorded migrations as the evidence:

1. **Match** (``match_replacements``): a migration's replacement is a pod of the same workload created
   after the eviction request was sent (``creationTimestamp`` has whole seconds: from one second before
   it; an eviction of unknown outcome settles later, but its replacement is still matched from the send
   time), bound to a node, not the evicted pod and not already another migration's replacement; the
   earliest such pod goes to the earliest migration. The match, its node and the cycle it was first seen
   bound (``landed_at``) are recorded on the migration.
2. **Bounce** (``mark_bounces``): a migration whose replacement's node is over its high threshold (on
   the usage estimate's upper bound, which counts a replacement that has not started at its workload's
   latest usage) is marked bounced, at that cycle's time: it is, or became, hot with the replacement.
   Only shortly after the landing (``PingPong.within``: the usage window plus ``BOUNCE_INTERVALS``
   descheduling intervals, long enough for the replacement's load to show in its node's sample) and
   only while the replacement still runs there: a node hot hours later, or after the replacement left,
   is hot for other reasons.
3. **Back off** (``backoffs``): per workload, its bounces in time order. The second bounce starts a
   back-off of ``base`` seconds; after a back-off, one more bounce starts the next, twice as long, at
   most ``cap``. Bounces seen during a back-off come from evictions made before it and count for nothing
   but the destinations. A workload without a bounce for ``cap`` seconds after its last bounce or
   back-off is forgiven (it starts from scratch). While a back-off runs, its pods are skipped with
   ``ping-pong-backoff``.

The bounced migrations are the guard's whole memory: ``plan`` keeps them (in the state and the journal)
while their workload is not forgiven, so a restart rebuilds every back-off exactly.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from descheduler.cluster.types import Pod
from descheduler.planner.state import Migration

BOUNCES_TO_BACK_OFF = 2
"""Bounces before the first back-off: one replacement on a hot node may be bad luck, two are a pattern."""
BOUNCE_INTERVALS = 3
"""Descheduling intervals, after the usage window, during which a landed replacement's node being over
counts as a bounce (``settings.ping_pong_settings``)."""
CREATION_SLACK = 1.0
"""``creationTimestamp`` is truncated to seconds: a replacement created just after the eviction may read
up to a second earlier."""
FIX = (
    "the kube-scheduler places replacements by requests, not usage: enable LowNodeLoadArgs.hotspotTaint "
    "(a PreferNoSchedule taint on hot nodes) or use a load-aware scheduler"
)


@dataclass(frozen=True, slots=True)
class Backoff:
    """One workload's ping-pong record: ``level`` back-offs so far (0: one bounce, no back-off yet)."""

    workload: str
    """Identity (``WorkloadRef.identity``)."""
    kind: str
    namespace: str
    name: str
    level: int
    started: float
    """When the current back-off began (the bounce that started it); 0 without one."""
    until: float
    """When it ends; 0 without one."""
    bounces: int
    """Bounces since the workload was last forgiven."""
    destinations: tuple[tuple[str, int], ...]
    """The nodes its bounced replacements landed on, most first (then by name)."""
    last: float
    """The latest bounce."""

    def active(self, now: float) -> bool:
        return self.until > now

    @property
    def cooldown(self) -> float:
        return self.until - self.started

    @property
    def attractor(self) -> str:
        """The node that keeps attracting the replacements: at least two of them, and more than any other."""
        if not self.destinations or self.destinations[0][1] < 2:
            return ""
        if len(self.destinations) > 1 and self.destinations[1][1] == self.destinations[0][1]:
            return ""
        return self.destinations[0][0]

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.kind else self.workload

    def message(self) -> str:
        """The skip message, Event note and log text: what happened, until when, and what would fix it."""
        where = ", ".join(f"{node} x{count}" for node, count in self.destinations)
        pattern = f"; {self.attractor} keeps attracting them" if self.attractor else ""
        return (
            f"{self.bounces} replacement(s) of {self.describe()} landed on nodes over their high threshold "
            f"({where}){pattern}: not moved until {iso(self.until)} (back-off #{self.level}, "
            f"{self.cooldown:g}s); {FIX}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.describe(),
            "level": self.level,
            "since": iso(self.started),
            "until": iso(self.until),
            "cooldownSeconds": self.cooldown,
            "bounces": self.bounces,
            "destinations": dict(self.destinations),
            "attractor": self.attractor,
        }


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def replacements_since(m: Migration) -> float:
    """The earliest ``creationTimestamp`` a replacement of ``m`` may carry: from the send time, not the
    (later) worst-case ``started`` the windows count from."""
    return math.floor(min(m.sent, m.started) if m.sent else m.started) - CREATION_SLACK


def match_replacements(
    migrations: Sequence[Migration], pods_by_workload: Mapping[str, Sequence[Pod]], now: float
) -> tuple[Migration, ...]:
    """``migrations`` with the replacements found this cycle recorded (``replacement``, ``landed``, and
    ``landed_at``: ``now``, the cycle that first saw it bound).

    ``pods_by_workload``: the snapshot's pods by workload identity (only the workloads of migrations
    without a replacement are needed). Terminating, terminal and unbound pods are never replacements.
    """
    taken = {m.replacement for m in migrations if m.replacement}
    evicted = {m.uid for m in migrations}
    out = list(migrations)
    order = sorted(
        (i for i, m in enumerate(migrations) if m.workload and not m.replacement and not m.unresolved),
        key=lambda i: (migrations[i].started, migrations[i].pod),
    )
    for i in order:
        m = migrations[i]
        earliest = replacements_since(m)
        found = min(
            (
                p
                for p in pods_by_workload.get(m.workload, ())
                if p.node_name
                and not p.terminating
                and not p.is_terminal
                and p.created >= earliest
                and p.uid not in evicted
                and p.key not in taken
            ),
            key=lambda p: (p.created, p.key),
            default=None,
        )
        if found is not None:
            taken.add(found.key)
            out[i] = replace(m, replacement=found.key, landed=found.node_name, landed_at=now)
    return tuple(out)


def mark_bounces(
    migrations: Sequence[Migration],
    hot: Iterable[str],
    now: float,
    *,
    within: float,
    runs: Callable[[str, str], bool],
) -> tuple[Migration, ...]:
    """Mark, at ``now``, the migrations whose replacement landed on one of the ``hot`` nodes at most
    ``within`` seconds ago and still runs there (``runs(pod key, node)``)."""
    nodes = set(hot)
    return tuple(
        replace(m, bounced=now)
        if m.landed
        and not m.bounced
        and m.landed in nodes
        and now - (m.landed_at or m.started) <= within
        and runs(m.replacement, m.landed)
        else m
        for m in migrations
    )


def backoffs(migrations: Iterable[Migration], now: float, base: float, cap: float) -> dict[str, Backoff]:
    """Every workload not forgiven, by identity (see the module docstring for the rules)."""
    by_workload: dict[str, list[Migration]] = {}
    for m in migrations:
        if m.bounced and m.workload:
            by_workload.setdefault(m.workload, []).append(m)
    out: dict[str, Backoff] = {}
    for workload, bounced in by_workload.items():
        bounced.sort(key=lambda m: (m.bounced, m.pod))
        found = _replay(bounced, base, cap)
        if found is not None and now <= max(found.until, found.last) + cap:
            out[workload] = found
    return out


def _replay(bounced: Sequence[Migration], base: float, cap: float) -> Backoff | None:
    level = pending = total = 0
    started = until = 0.0
    last = -math.inf
    nodes: Counter[str] = Counter()
    for m in bounced:
        t = m.bounced
        if t > max(until, last) + cap:  # forgiven: start from scratch
            level = pending = total = 0
            started = until = 0.0
            nodes = Counter()
        nodes[m.landed] += 1
        total += 1
        last = t
        if t < until:
            continue
        pending += 1
        if pending >= (BOUNCES_TO_BACK_OFF if level == 0 else 1):
            level += 1
            pending = 0
            started = t
            until = t + min(cap, base * 2 ** min(level - 1, 64))
    if total == 0:
        return None
    head = bounced[-1]
    return Backoff(
        workload=head.workload,
        kind=head.workload_kind,
        namespace=head.namespace,
        name=head.workload_name,
        level=level,
        started=started,
        until=until,
        bounces=total,
        destinations=tuple(sorted(nodes.items(), key=lambda kv: (-kv[1], kv[0]))),
        last=last,
    )
