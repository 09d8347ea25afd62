"""Checks every source applies before a measured amount becomes a :class:`UsageSample`.

One place decides what "untrustworthy" means (NaN, infinite, negative, absurdly large, a sample time in
the future), so Prometheus and metrics-server skip the same nodes for the same reasons, and the reason
text reads the same in both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

from descheduler.cluster.types import Node, ResourceList, UsageSample, UsageSnapshot

ABSURD_FACTOR = 4
"""A node or pod measured above this multiple of its node's allocatable is a broken series, not load."""

CLOCK_SKEW_S = 60.0
"""How far in the future a sample time may lie before it is distrusted (it would never go stale)."""


SCRAPE_GAP = "scrape gap"
"""How a node's reason starts when its window has a scrape gap: its usage is unknown this cycle, not low
(``prometheus.ScrapeGaps``); the service counts these apart (``descheduler_usage_unknown_nodes``)."""

GAP_SHARE = 0.75
"""A window holding fewer than this share of the samples the node's window held lately has a gap."""

GAP_MEMORY = 10
"""How many of a node's recent cycles "lately" is: a slower scrape interval is learned after as many."""


class ScrapeGaps:
    """Per node, the sample counts of its last ``GAP_MEMORY`` windows. After a scrape gap (a Prometheus
    restart, a target down) a ``rate()`` over a window that overlaps it under-reports, so a node then
    reads low although it is not; a count well below the node's recent best says so."""

    def __init__(self) -> None:
        self._seen: dict[str, list[float]] = {}

    def check(self, node: str, count: float | None, window: float) -> str:
        """Why the node's reading is unknown this cycle ("" when its window looks whole or the count is
        unknown: no series, e.g. an overridden query that has none, leaves the reading as it is)."""
        if count is None or not math.isfinite(count):
            return ""
        seen = self._seen.setdefault(node, [])
        lately = max(seen, default=0.0)
        seen.append(count)
        del seen[:-GAP_MEMORY]
        if lately <= 0 or count >= GAP_SHARE * lately:
            return ""
        return (
            f"{SCRAPE_GAP}: {count:.0f} samples in the {window:.0f}s window, {lately:.0f} lately; "
            "a rate over it under-reports, so usage is unknown this cycle"
        )

    def forget(self, keep: Iterable[str]) -> None:
        """Drop nodes no longer in the cluster."""
        kept = set(keep)
        for node in [n for n in self._seen if n not in kept]:
            del self._seen[node]


def _show(resource: str, amount: float) -> str:
    text = str(amount) if isinstance(amount, int) else f"{amount:.0f}"  # an int may be beyond any float
    return f"{text}m" if resource == "cpu" else f"{text} bytes"


def amount_problem(resource: str, amount: float, allocatable: ResourceList) -> str | None:
    """Why ``amount`` (millicores for cpu, bytes for memory) cannot be trusted, or None."""
    if not isinstance(amount, int) and math.isnan(amount):  # (math.isnan of a huge int overflows)
        return f"NaN {resource}"
    if not isinstance(amount, int) and math.isinf(amount):
        return f"infinite {resource}"
    if amount < 0:
        return f"negative {resource} ({_show(resource, amount)})"
    limit = allocatable.get(resource, 0)
    if limit > 0 and amount > ABSURD_FACTOR * limit:
        return (
            f"absurd {resource}: {_show(resource, amount)} is more than {ABSURD_FACTOR}x "
            f"allocatable {_show(resource, limit)}"
        )
    return None


def time_problem(timestamp: float, now: float) -> str | None:
    if not math.isfinite(timestamp) or timestamp <= 0:
        return f"bad sample time {timestamp!r}"
    if timestamp > now + CLOCK_SKEW_S:
        return f"sample time is {timestamp - now:.0f}s in the future"
    return None


def build_sample(
    amounts: Mapping[str, float], timestamp: float, *, allocatable: ResourceList, now: float
) -> UsageSample | list[str]:
    """A sample with integer amounts, or the list of reasons it cannot be trusted."""
    problems = [p for r, a in amounts.items() if (p := amount_problem(r, a, allocatable)) is not None]
    if (problem := time_problem(timestamp, now)) is not None:
        problems.append(problem)
    if problems:
        return problems
    return UsageSample(resources={r: round(a) for r, a in amounts.items()}, timestamp=timestamp)


def join_reasons(reasons: Iterable[str]) -> str:
    """One line per node: duplicates dropped (a down server fails every query the same way), order kept."""
    return "; ".join(dict.fromkeys(reasons))


def trusted_sample(
    cpu: float, memory: float, timestamp: float, *, allocatable: ResourceList, now: float
) -> UsageSample | None:
    """``build_sample`` for the common case, in a few comparisons: the sample it would build when cpu
    (millicores), memory and the time pass every check, else None, and the caller asks ``build_sample``,
    which finds the problem and words it. A cycle builds one sample per node and per fetched pod."""
    if not (0 <= cpu < math.inf and 0 <= memory < math.inf and 0 < timestamp <= now + CLOCK_SKEW_S):
        return None  # NaN fails every comparison; infinities and negatives fail one
    cpu_limit = allocatable.get("cpu", 0)
    memory_limit = allocatable.get("memory", 0)
    if (cpu_limit > 0 and cpu > ABSURD_FACTOR * cpu_limit) or (
        memory_limit > 0 and memory > ABSURD_FACTOR * memory_limit
    ):
        return None
    return UsageSample(resources={"cpu": round(cpu), "memory": round(memory)}, timestamp=timestamp)


def node_snapshot(nodes: Sequence[Node], judge: Callable[[Node], UsageSample | str]) -> UsageSnapshot:
    """Each node's sample, or why it has none (``judge`` answers one or the other): what every usage
    source hands the cycle after its first step."""
    samples: dict[str, UsageSample] = {}
    errors: dict[str, str] = {}
    for node in nodes:
        found = judge(node)
        if isinstance(found, UsageSample):
            samples[node.name] = found
        else:
            errors[node.name] = found
    return UsageSnapshot(nodes=samples, node_errors=errors)
