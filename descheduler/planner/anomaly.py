"""The anomaly detector: when an over node becomes a hotspot, and how long it stays one.

Koordinator's ``BasicDetector`` (``pkg/descheduler/utils/anomaly``) as used by LowNodeLoad, over plain
data. Per node (and apart from it, per node for the prod pass), one ``AnomalyCount``:

- A cycle in which the node is over adds one to ``count``. On the N-th consecutive one (N =
  ``consecutiveAbnormalities``) the node is **confirmed**: a hotspot this cycle and in every later cycle
  in which it is over, without a new round of N. Koordinator confirms on the (N+1)-th; we keep the ACK
  page's "N consecutive cycles" (``planner/README.md``, departures).
- A cycle in which a confirmed node is not over (but not low) is a normal cycle: it is not a source, and
  after **more than** ``consecutiveNormalities`` consecutive normal cycles it is back to normal and must
  be confirmed again (N over cycles). A cycle in which an unconfirmed node is not over resets its count.
- A cycle in which the node is low resets it (Koordinator's ``resetNodesAsNormal`` of the low nodes). A
  cycle in which pods were evicted from it (``record.commit``) sets its count to 0 but keeps a confirmed
  node confirmed, from then: its next round waits only for the previous one (``cure.py``).
- With ``consecutiveAbnormalities`` 1 every over cycle is a hotspot (Koordinator skips the detector).
- The confirmed state lasts ``anomalyCondition.timeout`` from the cycle that confirmed it (0 or unset: 60
  s, the detector's own default); a cycle that finds it expired starts counting afresh, as Koordinator's
  ``currentState`` clears the counter. The boundary counts as expired (a cycle exactly ``timeout`` later
  finds it expired), so ``simulate``'s exact clock and the live service's agree.
- A confirmation kept by a round of its cure (``AnomalyCount.cure``) does not lapse by ``timeout`` while
  that round is in motion (``cure.in_motion``), and stands ``timeout`` plus one usage window (the readings
  hold the evicted pods that long) from the first cycle that found the round over. It still ends on
  more than ``consecutiveNormalities`` normal cycles or a low one; with 60 s cycles and the 60 s timeout
  the next round would otherwise wait N fresh over cycles (5 minutes by default).
- A count not written for ``detectorCacheTimeout`` is forgotten (Koordinator's detector cache). A cycle in
  which the node is skipped (stale or missing usage) or LowNodeLoad is paused changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from descheduler.planner.state import AnomalyCount


@dataclass(frozen=True, slots=True)
class Rule:
    """One pool's ``anomalyCondition`` and the plugin's ``detectorCacheTimeout``, in seconds."""

    consecutive_abnormalities: int
    consecutive_normalities: int
    timeout: float
    cache_timeout: float
    window: float = 0.0
    """The usage window (``Settings.usage_window``): how long after its round a cure's readings may
    still hold the evicted pods."""


def trusted(
    previous: AnomalyCount | None, now: float, rule: Rule, moving: bool = False
) -> AnomalyCount | None:
    """``previous`` if it still stands at ``now``: written within ``detectorCacheTimeout``, and, if
    confirmed, confirmed less than ``timeout`` ago, or a cure whose round is ``moving`` or was found over
    less than ``timeout`` plus a usage window ago. None: counting starts afresh."""
    if previous is None or now - previous.updated > rule.cache_timeout:
        return None
    # With consecutiveAbnormalities 1 Koordinator skips the detector: no timeout, the count goes on.
    if previous.confirmed is None or rule.consecutive_abnormalities <= 1:
        return previous
    if previous.cure:
        expired = not moving and now - (previous.settled or now) >= rule.timeout + rule.window
    else:
        expired = now - previous.confirmed >= rule.timeout
    return None if expired else previous


def next_count(
    previous: AnomalyCount | None, over: bool, low: bool, now: float, rule: Rule, moving: bool = False
) -> AnomalyCount:
    """The node's detector after one cycle in which it was over, low or neither (normal); ``moving``:
    the node's cure has its latest round in motion."""
    standing = trusted(previous, now, rule, moving)
    cure = standing is not None and standing.cure
    settled = 0.0 if not cure or moving or standing is None else standing.settled or now
    if standing is not None and standing.confirmed is not None:  # the cure's own fields go on with it
        if over:
            return replace(
                standing, count=standing.count + 1, updated=now, normal=0, settled=settled, cooled=0.0
            )
        normal = standing.normal + 1
        if low or normal > rule.consecutive_normalities:
            return AnomalyCount(0, now)
        cooled = standing.cooled or now
        return replace(standing, count=0, updated=now, normal=normal, settled=settled, cooled=cooled)
    if not over:
        return AnomalyCount(0, now)
    count = standing.count + 1 if standing is not None else 1
    confirmed = now if count >= max(1, rule.consecutive_abnormalities) else None
    return AnomalyCount(count, now, 0, confirmed)


def is_hotspot(count: AnomalyCount | None, over: bool) -> bool:
    """A node is a source only in a cycle in which it is over, and only once confirmed."""
    return over and count is not None and count.confirmed is not None
