"""Consecutive-over counting: a node becomes a hotspot on its N-th consecutive over cycle.

This product's rule (simpler than Koordinator's detector, and stated in the README): a cycle in which
the node is over adds one; a cycle in which it is not over resets the count to 0, and so does a cycle in
which pods were evicted from it (``record.commit``). A cycle in which the node is skipped (stale or
missing usage) changes nothing, but a count not written for ``detectorCacheTimeout`` expires.
"""

from __future__ import annotations

from descheduler.planner.state import AnomalyCount


def next_count(previous: AnomalyCount | None, over: bool, now: float, timeout: float) -> AnomalyCount:
    if not over:
        return AnomalyCount(0, now)
    carried = 0
    if previous is not None and now - previous.updated <= timeout:
        carried = previous.count
    return AnomalyCount(carried + 1, now)


def is_hotspot(count: int, consecutive_abnormalities: int) -> bool:
    return count >= max(1, consecutive_abnormalities)
