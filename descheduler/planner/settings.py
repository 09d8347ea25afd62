"""The configuration, compiled once into plain values the planner reads on its hot paths.

Compiling resolves inheritance (node pools take unset fields from the plugin args), turns selectors
into the snapshot's selector type and applies this product's documented rules for unset values, so the
decision code never has to know how the YAML was written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from descheduler.cluster.types import LabelSelector, LabelSelectorRequirement
from descheduler.config.load import EffectiveConfig
from descheduler.config.lownodeload import (
    LowNodeLoadArgs,
    NodePool,
    effective_anomaly_condition,
    pool_name,
    pool_thresholds,
)
from descheduler.config.models import LOW_NODE_LOAD, LabelSelectorConfig, MigrationControllerArgs, Namespaces
from descheduler.config.providers import credential_warnings, usage_window
from descheduler.config.selectors import parse_selector_text
from descheduler.planner.controls import Budget, compile_budget
from descheduler.planner.pingpong import BOUNCE_INTERVALS
from descheduler.units import format_duration

BASE_RESOURCES = ("cpu", "memory")
FULL = 100.0
DEFAULT_TIMEOUT = 60.0
"""What Koordinator's ``NewBasicDetector`` uses for an ``anomalyCondition.timeout`` of 0 or less."""


@dataclass(frozen=True, slots=True)
class PoolSettings:
    """One node pool: which nodes, their thresholds (percent) and how hotspots are confirmed."""

    name: str
    selector: LabelSelector | None
    """None: every node not taken by an earlier pool."""
    use_deviation: bool
    resources: tuple[str, ...]
    """Resources considered, sorted: the configured keys plus cpu and memory."""
    low: Mapping[str, float]
    high: Mapping[str, float]
    prod_resources: tuple[str, ...]
    """Resources of the prod pass; empty when prodLowThresholds and prodHighThresholds are both unset."""
    prod_low: Mapping[str, float]
    prod_high: Mapping[str, float]
    weights: Mapping[str, int]
    """1 for every threshold resource unless ``resourceWeights`` says otherwise (``default_weights``)."""
    consecutive_abnormalities: int
    consecutive_normalities: int
    """Normal cycles a confirmed hotspot may have in a row and still be one (``anomaly.py``)."""
    anomaly_timeout: float
    """How long a confirmed hotspot stays confirmed, in seconds (``anomalyCondition.timeout``)."""
    configured: tuple[str, ...] = ()
    """Resources with both thresholds set and a low one above 0: in deviation mode only these can make a
    node low or over (Koordinator reads a low deviation of 0 as unset: that resource is 100% / 100%)."""
    prod_configured: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ObjectLimit:
    duration: float
    max_migrating: int | str | None


@dataclass(frozen=True, slots=True)
class PingPong:
    """The ping-pong guard's cooldowns (``LowNodeLoadArgs.pingPongGuard``), in seconds."""

    base: float
    cap: float
    within: float
    """How long after a replacement landed its node being over counts as a bounce: the usage window
    plus ``BOUNCE_INTERVALS`` deschedulingIntervals (its load shows in the sample, then confirms)."""


def ping_pong_settings(config: EffectiveConfig) -> PingPong | None:
    """None when the guard is off; an unset base is the larger of the objectLimiters window and 10
    deschedulingIntervals (never above the cap): long enough that the replacements have landed and run."""
    args = config.low_node_load
    if args is None or not args.ping_pong_guard.enabled:
        return None
    guard = args.ping_pong_guard
    base = guard.base_cooldown
    if base is None:
        limiter = config.migration.object_limiters.get("workload")
        window = limiter.duration if limiter is not None else 0.0
        base = min(guard.max_cooldown, max(window, 10 * config.config.descheduling_interval))
    cfg = config.config
    within = usage_window(cfg.metrics_providers) + BOUNCE_INTERVALS * cfg.descheduling_interval
    return PingPong(base=float(base), cap=float(guard.max_cooldown), within=float(within))


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything ``plan`` needs from the configuration."""

    enabled: bool
    paused: bool
    node_selectors: tuple[LabelSelector, ...]
    pools: tuple[PoolSettings, ...]
    explicit_pools: bool
    number_of_nodes: int
    metric_expiration: float
    detector_timeout: float
    node_fit: bool
    # filters
    evictable_namespaces: Namespaces | None
    namespaces: Namespaces | None
    pod_selectors: tuple[LabelSelector, ...]
    label_selector: LabelSelector | None
    evict_failed_bare_pods: bool
    evict_all_bare_pods: bool
    evict_local_storage_pods: bool
    evict_system_critical_pods: bool
    evict_resource_claim_pods: bool
    opt_outs: Mapping[str, str]
    """Pod annotation -> the value (lower case, stripped) that keeps the pod from being evicted."""
    ignore_pvc_pods: bool
    priority_threshold_value: int | None
    priority_threshold_name: str
    skip_check_expected_replicas: bool
    # per-cycle limits (None: no limit; 0: nothing may be evicted)
    max_per_node: int | None
    max_per_namespace: int | None
    max_total: int | None
    # migration limits (None or 0: no limit, as Koordinator's MigrationController)
    max_migrating_per_node: int | None
    max_migrating_per_namespace: int | None
    max_migrating_globally: int | None
    max_migrating_per_workload: int | str | None
    max_unavailable_per_workload: int | str | None
    object_limit: ObjectLimit | None
    usage_window: float = 0.0
    """Seconds each usage sample averages over (``metricsProviders``): how long an evicted pod's load
    stays in its old node's sample."""
    budget: Budget | None = None
    """``churnBudget``: evictions per rolling period (``controls.py``)."""

    @property
    def migration_memory(self) -> float:
        """How long a settled migration still counts against a limit: the longest of the object
        limiter's window and the churn budget's period (``plan`` keeps migrations that long)."""
        window = self.object_limit.duration if self.object_limit is not None else 0.0
        return max(window, self.budget.period if self.budget is not None else 0.0)

    ping_pong: PingPong | None = None
    """The ping-pong guard (``pingpong.py``); None: off."""
    surge_single_replica: bool = False
    """``surgeSingleReplica``: a single-replica Deployment's pod moves by a rollout restart that surges
    first (``surge.py``) instead of being left alone."""


def convert_selector(config: LabelSelectorConfig) -> LabelSelector:
    return LabelSelector(
        match_labels=dict(config.match_labels),
        match_expressions=tuple(
            LabelSelectorRequirement(e.key, e.operator, tuple(e.values)) for e in config.match_expressions
        ),
    )


def parse_selector_string(text: str) -> LabelSelector:
    """A selector written as kubectl takes it (``tier=web,zone in (a,b),!spot``); the configuration's
    model has already refused one that does not parse (``config/selectors.py``)."""
    return LabelSelector(
        match_expressions=tuple(
            LabelSelectorRequirement(key, operator, values)
            for key, operator, values in parse_selector_text(text)
        )
    )


def _resources(*maps: Mapping[str, float]) -> tuple[str, ...]:
    names = set(BASE_RESOURCES)
    for mapping in maps:
        names.update(mapping)
    return tuple(sorted(names))


def _pool_thresholds(
    low: Mapping[str, float], high: Mapping[str, float], resources: Sequence[str], deviation: bool
) -> tuple[dict[str, float], dict[str, float]]:
    """Per-resource low/high percentages with this product's rules for unset values.

    An unset threshold counts as 100% (in deviation mode a resource without both deviations never
    triggers; ``LowNodeLoadArgs`` refuses one with only one of them). A low threshold above the high
    one (possible only when one of them is unset) is lowered to the high one, so a node can never be
    both a destination and over.
    """
    out_low: dict[str, float] = {}
    out_high: dict[str, float] = {}
    for name in resources:
        h = high.get(name, FULL)
        out_low[name] = low.get(name, FULL) if deviation else min(low.get(name, FULL), h)
        out_high[name] = h
    return out_low, out_high


def default_weights(
    resources: Sequence[str], prod_resources: Sequence[str], explicit: Mapping[str, int]
) -> dict[str, int]:
    """Weight 1 for cpu, memory and every resource named in the pool's thresholds, unless
    ``resourceWeights`` gives it one (0 included: that resource then plays no part in the ordering).

    Koordinator defaults the same way, so a ``pods`` or extended-resource threshold weighs as much as cpu
    when it orders hotspots, destinations and pods.
    """
    weights = dict.fromkeys((*resources, *prod_resources), 1)
    weights.update(explicit)
    return weights


def _build_pool(args: LowNodeLoadArgs, pool: NodePool | None, index: int) -> PoolSettings:
    low, high, prod_low, prod_high = pool_thresholds(args, pool)
    deviation = args.use_deviation_thresholds
    if pool is not None and pool.use_deviation_thresholds is not None:
        deviation = pool.use_deviation_thresholds
    explicit = (
        dict(pool.resource_weights)
        if pool and pool.resource_weights is not None
        else dict(args.resource_weights)
    )
    condition = effective_anomaly_condition(args, pool)[0]
    resources = _resources(low, high)
    lows, highs = _pool_thresholds(low, high, resources, deviation)
    prod_resources: tuple[str, ...] = ()
    prod_lows: dict[str, float] = {}
    prod_highs: dict[str, float] = {}
    if prod_low or prod_high:
        prod_resources = tuple(sorted(set(prod_low) | set(prod_high)))
        prod_lows, prod_highs = _pool_thresholds(prod_low, prod_high, prod_resources, deviation)
    weights = default_weights(resources, prod_resources, explicit)
    name = pool_name(pool, index)
    selector = None
    if pool is not None and pool.node_selector is not None:
        selector = convert_selector(pool.node_selector)
    return PoolSettings(
        name=name,
        selector=selector,
        use_deviation=deviation,
        resources=resources,
        low=lows,
        high=highs,
        prod_resources=prod_resources,
        prod_low=prod_lows,
        prod_high=prod_highs,
        weights=weights,
        consecutive_abnormalities=condition.consecutive_abnormalities,
        consecutive_normalities=condition.consecutive_normalities,
        anomaly_timeout=condition.timeout if condition.timeout > 0 else DEFAULT_TIMEOUT,
        configured=_deviation_resources(low, high),
        prod_configured=_deviation_resources(prod_low, prod_high),
    )


def _deviation_resources(low: Mapping[str, float], high: Mapping[str, float]) -> tuple[str, ...]:
    """Resources a deviation pool judges by: both deviations given, the low one not 0 (Koordinator's
    ``getNodeThresholds`` treats a low of 0 as unset and sets that resource's thresholds to 100%)."""
    return tuple(sorted(name for name in set(low) & set(high) if low[name] != 0))


def _positive_or_none(value: int | None) -> int | None:
    return value if value else None


def _workload_limit(value: int | str | None) -> int | str | None:
    """0 (or 0%) means no limit; unset means Koordinator's default table."""
    if value in (0, "0%"):
        return 0
    return value


def compile_settings(config: EffectiveConfig) -> Settings:
    """Compile the effective configuration. Never refuses one: whatever ``load_config`` accepts compiles
    (``tests/unit/test_fuzz_config.py`` holds it to that)."""
    args = config.low_node_load
    mc: MigrationControllerArgs = config.migration
    enabled = args is not None
    args = args or LowNodeLoadArgs()
    selectors: list[LabelSelector] = []
    top = config.config.node_selector
    if isinstance(top, str):
        if top.strip():
            selectors.append(parse_selector_string(top))
    elif top is not None:
        selectors.append(convert_selector(top))
    for profile in config.config.profiles:
        if LOW_NODE_LOAD in profile.plugins.balance.names() and profile.node_selector is not None:
            selectors.append(convert_selector(profile.node_selector))
    if args.node_selector is not None:
        selectors.append(convert_selector(args.node_selector))
    if args.node_pools:
        pools = tuple(_build_pool(args, pool, i) for i, pool in enumerate(args.node_pools))
    else:
        pools = (_build_pool(args, None, 0),)
    threshold = mc.priority_threshold
    limiter = mc.object_limiters.get("workload")
    object_limit = None
    if limiter is not None and limiter.duration > 0:
        object_limit = ObjectLimit(limiter.duration, _workload_limit(limiter.max_migrating))
    cfg = config.config
    return Settings(
        enabled=enabled,
        paused=args.paused,
        node_selectors=tuple(selectors),
        pools=pools,
        explicit_pools=bool(args.node_pools),
        number_of_nodes=args.number_of_nodes,
        metric_expiration=float(args.node_metric_expiration_seconds),
        detector_timeout=float(args.detector_cache_timeout),
        node_fit=args.node_fit,
        evictable_namespaces=args.evictable_namespaces,
        namespaces=mc.namespaces,
        pod_selectors=tuple(
            convert_selector(s.selector) for s in args.pod_selectors if s.selector is not None
        ),
        label_selector=convert_selector(mc.label_selector) if mc.label_selector is not None else None,
        evict_failed_bare_pods=mc.evict_failed_bare_pods,
        evict_all_bare_pods=mc.evict_all_bare_pods,
        evict_local_storage_pods=mc.evict_local_storage_pods,
        evict_system_critical_pods=mc.evict_system_critical_pods,
        evict_resource_claim_pods=mc.evict_resource_claim_pods,
        opt_outs={key: value.strip().lower() for key, value in mc.opt_out_annotations.items()},
        ignore_pvc_pods=mc.ignore_pvc_pods,
        priority_threshold_value=threshold.value if threshold is not None else None,
        priority_threshold_name=threshold.name if threshold is not None else "",
        skip_check_expected_replicas=mc.skip_check_expected_replicas,
        max_per_node=cfg.max_no_of_pods_to_evict_per_node,
        max_per_namespace=cfg.max_no_of_pods_to_evict_per_namespace,
        max_total=cfg.max_no_of_pods_to_evict_total,
        max_migrating_per_node=_positive_or_none(mc.max_migrating_per_node),
        max_migrating_per_namespace=_positive_or_none(mc.max_migrating_per_namespace),
        max_migrating_globally=_positive_or_none(mc.max_migrating_globally),
        max_migrating_per_workload=_workload_limit(mc.max_migrating_per_workload),
        max_unavailable_per_workload=_workload_limit(mc.max_unavailable_per_workload),
        object_limit=object_limit,
        usage_window=usage_window(cfg.metrics_providers),
        budget=compile_budget(mc),
        ping_pong=ping_pong_settings(config),
        surge_single_replica=mc.surge_single_replica,
    )


def surge_warnings(config: EffectiveConfig) -> list[str]:
    """A restarted pod is placed by the scheduler like any new pod: without the hotspot taint nothing
    steers it off the node it left, so the restart may cure nothing."""
    args = config.low_node_load
    if not config.migration.surge_single_replica or args is None or args.hotspot_taint.enabled:
        return []
    return [
        "MigrationControllerArgs.surgeSingleReplica is on and LowNodeLoadArgs.hotspotTaint is off: the "
        "scheduler places a restarted pod by its requests alone, so it may land back on the hotspot it "
        "left (turn hotspotTaint on to steer it away)"
    ]


def loop_warnings(config: EffectiveConfig) -> list[str]:
    """Settings that confirm a hotspot faster than the usage window moves: worth a warning, not an error.

    When ``consecutiveAbnormalities x deschedulingInterval`` is shorter than the window the usage queries
    average over, a node is confirmed hot again while its sample still holds pods moved away less than a
    window ago. The planner corrects for its own evictions (``estimate.py``); anything else that moved
    pods (a rollout, another descheduler, a restart that lost the record) is still in the sample.

    Also credentials sent over plain ``http://`` (``credential_warnings``) and ``surgeSingleReplica``
    without ``hotspotTaint`` (``surge_warnings``): ``validate`` prints these warnings, ``run`` and ``once``
    log them at start.
    """
    credentials = credential_warnings(config.config.metrics_providers) + surge_warnings(config)
    args = config.low_node_load
    if args is None:
        return credentials
    window = usage_window(config.config.metrics_providers)
    if window <= 0:
        return credentials
    providers = config.config.metrics_providers
    where = (
        "metricsProviders[0].prometheus.window"
        if providers and providers[0].prometheus is not None
        else "the default Prometheus window"
    )
    interval = config.config.descheduling_interval
    checks = [
        (
            "LowNodeLoadArgs.anomalyCondition.consecutiveAbnormalities",
            effective_anomaly_condition(args, None)[0],
        )
    ]
    checks += [
        (
            f"LowNodeLoadArgs.nodePools[{i}].anomalyCondition.consecutiveAbnormalities",
            effective_anomaly_condition(args, pool)[0],
        )
        for i, pool in enumerate(args.node_pools)
        if pool.anomaly_condition is not None
    ]
    warnings: list[str] = list(credentials)
    for field, condition in checks:
        count = condition.consecutive_abnormalities
        if count * interval < window:
            warnings.append(
                f"{field} ({count}) x deschedulingInterval ({format_duration(interval)}) = "
                f"{format_duration(count * interval)} is shorter than {where} ({format_duration(window)}): "
                "a node can be confirmed hot again while its usage sample still holds pods moved away "
                "less than a window ago; evictions by this descheduler are corrected for, other moves "
                f"are not (raise it to {math.ceil(window / interval)} or lengthen deschedulingInterval)"
            )
    return warnings
