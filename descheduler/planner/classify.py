"""Node usage, thresholds and classes (low / normal / over), per node pool.

Thresholds are percentages of a node's allocatable (Koordinator's raw-allocatable annotation wins);
the absolute threshold is ``int(percent * 0.01 * allocatable)`` computed in floating point exactly as
Koordinator does, cpu in millicores, so both products draw the line at the same milli.
With ``useDeviationThresholds`` the percentages are ``mean - low`` and ``mean + high`` (clamped to
0..100), the mean of usage percentages over the pool's nodes that have fresh usage, cordoned included.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache

from descheduler.cluster.selectors import selector_matches
from descheduler.cluster.types import LabelSelector, Node, Pod, UsageSnapshot
from descheduler.planner import reasons
from descheduler.planner.estimate import UsageEstimator
from descheduler.planner.model import HOTSPOT, LOW, NORMAL, OVER, ResourceReport
from descheduler.planner.order import is_prod, weighted_mean
from descheduler.planner.settings import PoolSettings, Settings

REQUIRED_BASE = ("cpu", "memory")


def absolute_threshold(percent: float, base: int) -> int:
    """Koordinator's ``int64(float64(threshold) * 0.01 * float64(capacity))``."""
    return int(float(percent) * 0.01 * float(base))


def clamp_percent(value: float) -> float:
    return min(100.0, max(0.0, value))


@dataclass(slots=True)
class Levels:
    """Usage against low/high thresholds for one set of resources (overall, or prod pods only)."""

    base: dict[str, int]
    usage: dict[str, int]
    low: dict[str, int] = field(default_factory=dict)
    high: dict[str, int] = field(default_factory=dict)
    low_percent: dict[str, float] = field(default_factory=dict)
    high_percent: dict[str, float] = field(default_factory=dict)

    def set_thresholds(
        self,
        low_percent: Mapping[str, float],
        high_percent: Mapping[str, float],
        known: dict[tuple[object, ...], Levels] | None = None,
    ) -> None:
        """Absolute thresholds from the percentages. ``known``: levels already given these percentages,
        by resources and base: a node of the same shape takes their figures (read only, so shared; a
        pool's nodes come in a few shapes)."""
        if known is not None:
            bases = self.base
            key = (*self.usage, *[bases.get(name, 0) for name in self.usage])
            same = known.get(key)
            if same is not None:
                self.low, self.high = same.low, same.high
                self.low_percent, self.high_percent = same.low_percent, same.high_percent
                return
            known[key] = self
        # Fresh dicts: these may have been shared with other levels before.
        self.low, self.high, self.low_percent, self.high_percent = {}, {}, {}, {}
        for name in self.usage:
            base = self.base.get(name, 0)
            self.low_percent[name] = low_percent[name]
            self.high_percent[name] = high_percent[name]
            self.low[name] = absolute_threshold(low_percent[name], base)
            self.high[name] = absolute_threshold(high_percent[name], base)

    def over_resources(self) -> list[str]:
        return [name for name, used in self.usage.items() if used > self.high[name]]

    def is_over(self) -> bool:
        return any(used > self.high[name] for name, used in self.usage.items())

    def is_under_low(self) -> bool:
        return all(used <= self.low[name] for name, used in self.usage.items())

    def usage_percent(self) -> dict[str, float]:
        return {name: reasons.percent(used, self.base.get(name, 0)) for name, used in self.usage.items()}

    def excess(self) -> dict[str, int]:
        return {name: used - self.high[name] for name, used in self.usage.items() if used > self.high[name]}

    def headroom(self) -> dict[str, int]:
        return {name: self.high[name] - used for name, used in self.usage.items()}

    def report(
        self,
        usage: Mapping[str, int] | None = None,
        sampled: Mapping[str, int] | None = None,
        other: Mapping[str, int] | None = None,
        running: Mapping[str, int] | None = None,
    ) -> tuple[ResourceReport, ...]:
        shown = usage if usage is not None else self.usage
        base, low, high = self.base, self.low, self.high
        low_percent, high_percent = self.low_percent, self.high_percent
        out = []
        for name in sorted(shown):
            amount = shown[name]
            of = base.get(name, 0)
            # Positional: a frozen dataclass is built twice as fast so (one per resource and node).
            out.append(
                ResourceReport(
                    name,  # resource
                    of,  # base
                    amount,  # usage
                    low[name],
                    high[name],
                    reasons.percent(amount, of),  # usage_percent
                    low_percent[name],
                    high_percent[name],
                    sampled.get(name) if sampled is not None else None,  # sample
                    other.get(name) if other is not None else None,
                    running[name] if running is not None and running.get(name, amount) != amount else None,
                )
            )
        return tuple(out)


@dataclass(slots=True)
class NodeView:
    """A node taking part in a cycle: its levels, class, anomaly counts and what was done there."""

    node: Node
    pool: PoolSettings
    pods: list[Pod]
    levels: Levels
    measured: dict[str, int]
    """Usage estimated at the start of the cycle, every pod bound to the node counted (the upper bound;
    ``levels.usage`` starts from it, or from ``running`` on an over node, and drops as pods are planned
    away)."""
    running: dict[str, int] = field(default_factory=dict)
    """The estimate without the pods that have not started yet (the lower bound): what makes it over."""
    sampled: dict[str, int] = field(default_factory=dict)
    """The node's raw usage sample (the estimate's input), for the audit."""
    other: dict[str, int] = field(default_factory=dict)
    """Usage outside the pods: the sample minus the pods' parts in it."""
    prod: Levels | None = None
    prod_measured: dict[str, int] | None = None
    over: bool = False
    low: bool = False
    anomaly_count: int = 0
    hotspot: bool = False
    prod_over: bool = False
    prod_low: bool = False
    prod_anomaly_count: int = 0
    prod_hotspot: bool = False
    evicted: int = 0
    stop_code: str = ""
    stop_message: str = ""
    requested: dict[str, int] | None = None
    """Requests of the node's pods plus those reserved this cycle; summed on first use as a destination."""
    reserved_pods: int = 0

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def node_class(self) -> str:
        if self.hotspot:
            return HOTSPOT
        if self.over:
            return OVER
        return LOW if self.low else NORMAL

    @property
    def prod_class(self) -> str:
        if self.prod is None:
            return ""
        if self.prod_hotspot:
            return HOTSPOT
        if self.prod_over:
            return OVER
        return LOW if self.prod_low else NORMAL

    def requested_now(self) -> dict[str, int]:
        if self.requested is None:
            total: dict[str, int] = {}
            for pod in self.pods:
                for name, amount in pod.requests.items():
                    total[name] = total.get(name, 0) + amount
            self.requested = total
        return self.requested

    def stop(self, code: str, message: str) -> None:
        if not self.stop_code:
            self.stop_code, self.stop_message = code, message


def weighted_score(usage: Mapping[str, int], base: Mapping[str, int], weights: Mapping[str, int]) -> float:
    """Weighted mean usage fraction: orders hotspots hottest first and destinations coolest first."""
    return weighted_mean(usage, base, weights, float)


def node_selected(node: Node, selectors: Sequence[LabelSelector]) -> bool:
    return all(selector_matches(sel, node.labels) for sel in selectors)


def pool_of(node: Node, settings: Settings) -> PoolSettings | None:
    """The first pool whose selector matches: a node belongs to one pool only."""
    for pool in settings.pools:
        if pool.selector is None or selector_matches(pool.selector, node.labels):
            return pool
    return None


@cache
def _needing_base(resources: tuple[str, ...]) -> tuple[str, ...]:
    """The resources whose thresholds need a base (allocatable) above zero."""
    return tuple(r for r in resources if r in (*REQUIRED_BASE, "pods"))


def usage_problem(
    node: Node, usage: UsageSnapshot, pool: PoolSettings, expiration: float, now: float
) -> tuple[str, str] | None:
    """Why this node's usage cannot be trusted this cycle (a skip, never fatal)."""
    error = usage.node_errors.get(node.name)
    if error:
        return reasons.NODE_USAGE_ERROR, error
    sample = usage.nodes.get(node.name)
    if sample is None:
        return reasons.NODE_NO_USAGE, "no usage sample for this node"
    age = now - sample.timestamp
    if age > expiration:
        return (
            reasons.NODE_STALE_USAGE,
            f"usage sample is {age:.0f}s old, older than nodeMetricExpirationSeconds ({expiration:.0f}s)",
        )
    base = node.threshold_base
    missing = [r for r in _needing_base(pool.resources) if base.get(r, 0) <= 0]
    if missing:
        return reasons.NODE_NO_ALLOCATABLE, f"allocatable {', '.join(missing)} is zero or missing"
    for name in ("cpu", "memory"):
        value = sample.resources.get(name)
        if value is None:
            return reasons.NODE_USAGE_ERROR, f"usage sample has no {name}"
        if value < 0:
            return reasons.NODE_USAGE_ERROR, f"usage sample has negative {name} ({value})"
    return None


def build_view(
    node: Node,
    pool: PoolSettings,
    pods: list[Pod],
    usage: UsageSnapshot,
    expiration: float,
    now: float,
    estimator: UsageEstimator,
) -> NodeView:
    """Levels of one node with fresh usage (thresholds are set later, per pool).

    The levels start from the migration-aware estimate (``estimate.py``), not the raw sample.
    """
    sample = usage.nodes[node.name]
    base = {name: node.threshold_base.get(name, 0) for name in pool.resources}
    estimate = estimator.estimate(node.name, sample.resources, sample.timestamp, pods, pool.resources)
    measured = estimate.usage
    view = NodeView(
        node=node,
        pool=pool,
        pods=pods,
        levels=Levels(base, dict(measured)),
        measured=measured,
        running=estimate.running,
        sampled=estimate.sample,
        other=estimate.other,
    )
    if pool.prod_resources:
        prod_usage = dict.fromkeys(pool.prod_resources, 0)
        for pod in pods:
            if not is_prod(pod) or pod.terminating:
                continue
            pod_sample = usage.pods.get(pod.key)
            if "pods" in prod_usage:
                prod_usage["pods"] += 1
            if pod_sample is None or now - pod_sample.timestamp > expiration:
                continue
            for name in pool.prod_resources:
                if name != "pods":
                    prod_usage[name] += int(pod_sample.resources.get(name, 0))
        prod_base = {name: node.threshold_base.get(name, 0) for name in pool.prod_resources}
        view.prod = Levels(prod_base, dict(prod_usage))
        view.prod_measured = prod_usage
    return view


def _mean_percent(levels: Iterable[Levels], resources: Sequence[str]) -> dict[str, float]:
    rows = list(levels)
    means: dict[str, float] = {}
    for name in resources:
        values = [reasons.percent(lv.usage[name], lv.base.get(name, 0)) for lv in rows]
        means[name] = sum(values) / len(values) if values else 0.0
    return means


def _percents(
    low: Mapping[str, float],
    high: Mapping[str, float],
    resources: Sequence[str],
    deviation: bool,
    means: Mapping[str, float],
    configured: Iterable[str],
) -> tuple[dict[str, float], dict[str, float]]:
    if not deviation:
        return {r: low[r] for r in resources}, {r: high[r] for r in resources}
    chosen = set(configured)
    lows: dict[str, float] = {}
    highs: dict[str, float] = {}
    for name in resources:
        if name in chosen:
            lows[name] = clamp_percent(means[name] - low[name])
            highs[name] = clamp_percent(means[name] + high[name])
        else:
            lows[name] = highs[name] = 100.0
    return lows, highs


def set_pool_thresholds(pool: PoolSettings, views: Sequence[NodeView]) -> None:
    """Absolute thresholds for every node of the pool; deviation mode first takes the pool's means."""
    means = _mean_percent((v.levels for v in views), pool.resources) if pool.use_deviation else {}
    lows, highs = _percents(pool.low, pool.high, pool.resources, pool.use_deviation, means, pool.configured)
    prod_lows: dict[str, float] = {}
    prod_highs: dict[str, float] = {}
    if pool.prod_resources:
        prod_levels = [v.prod for v in views if v.prod is not None]
        prod_means = _mean_percent(prod_levels, pool.prod_resources) if pool.use_deviation else {}
        prod_lows, prod_highs = _percents(
            pool.prod_low,
            pool.prod_high,
            pool.prod_resources,
            pool.use_deviation,
            prod_means,
            pool.prod_configured,
        )
    known: dict[tuple[object, ...], Levels] = {}
    known_prod: dict[tuple[object, ...], Levels] = {}
    for view in views:
        view.levels.set_thresholds(lows, highs, known)
        if view.prod is not None:
            view.prod.set_thresholds(prod_lows, prod_highs, known_prod)


def classify(view: NodeView) -> None:
    """Over: some resource strictly above high. Low: schedulable and every resource at or below low.

    Each on the bound that errs on the safe side (``estimate.py``): over on the usage of the pods that run
    (pods merely bound there do not make a node a source of evictions), low on the usage of every pod bound
    there (they will take their room). An over node then gives pods away from its ``running`` figure.
    """
    running = view.running or view.levels.usage
    view.over = any(
        running.get(name, used) > view.levels.high[name] for name, used in view.levels.usage.items()
    )
    if view.over:
        view.levels.usage = {name: running.get(name, used) for name, used in view.levels.usage.items()}
    view.low = not view.node.unschedulable and not view.over and view.levels.is_under_low()
    if view.prod is not None:
        view.prod_over = view.prod.is_over()
        view.prod_low = not view.node.unschedulable and not view.prod_over and view.prod.is_under_low()
