"""``LowNodeLoadArgs``: the balance plugin's arguments, their defaults and their checks, side by side.

Field names and defaults follow Koordinator's ``LowNodeLoadArgs``. Everything the planner would
otherwise find only when it compiles these arguments (a low threshold above its high one, a deviation
without its pair, two pools of one name) is refused here, at load time, with the field's path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, ClassVar

from pydantic import Field, StrictInt, field_validator, model_validator

from descheduler.config.base import FieldProblem, StrictModel
from descheduler.config.selectors import LabelSelectorConfig, Namespaces
from descheduler.config.types import (
    MAX_CONFIG_DURATION,
    MAX_CONFIG_INT,
    Duration,
    NonNegativeInt,
    ResourceThresholds,
    ResourceWeights,
    positive,
)


class LoadAnomalyCondition(StrictModel):
    consecutive_abnormalities: StrictInt = Field(
        default=5, ge=0, le=MAX_CONFIG_INT, alias="consecutiveAbnormalities"
    )
    """A node over its high threshold this many cycles in a row is a hotspot (1 = at once; 0 is
    Koordinator's "unset": see ``effective_anomaly_condition``)."""
    consecutive_normalities: StrictInt = Field(
        default=3, ge=0, le=MAX_CONFIG_INT, alias="consecutiveNormalities"
    )
    """A confirmed hotspot that has more than this many normal cycles in a row must be confirmed again
    (``planner/anomaly.py``). 0 is Koordinator's unset value: 3 at top level, the top level's in a pool."""
    timeout: Duration = 60.0
    """How long a confirmed hotspot stays confirmed; 0 means 60s, as in Koordinator's detector."""


class PodSelector(StrictModel):
    name: str = ""
    selector: LabelSelectorConfig | None = None


class NodePool(StrictModel):
    """A group of nodes with its own thresholds; unset fields inherit from the plugin args."""

    name: str = ""
    node_selector: LabelSelectorConfig | None = Field(default=None, alias="nodeSelector")
    use_deviation_thresholds: bool | None = Field(default=None, alias="useDeviationThresholds")
    low_thresholds: ResourceThresholds | None = Field(default=None, alias="lowThresholds")
    high_thresholds: ResourceThresholds | None = Field(default=None, alias="highThresholds")
    prod_low_thresholds: ResourceThresholds | None = Field(default=None, alias="prodLowThresholds")
    prod_high_thresholds: ResourceThresholds | None = Field(default=None, alias="prodHighThresholds")
    resource_weights: ResourceWeights | None = Field(default=None, alias="resourceWeights")
    anomaly_condition: LoadAnomalyCondition | None = Field(default=None, alias="anomalyCondition")


class HotspotTaint(StrictModel):
    """**Ours**: keep the stock kube-scheduler off hot nodes with a ``PreferNoSchedule`` taint of our own key.

    The kube-scheduler places pods by requests, so a node hot by usage (often the one with the most free
    requests) would otherwise get the replacements of the pods evicted from it. Tainted: hotspots, nodes
    over by the usage estimate, and, while pods are in motion, nodes with less room than one of them uses
    (``planner/steer.py``). Needs the node ``patch`` permission of ``manifests/components/hotspot-taint``.
    """

    enabled: bool = False
    remove_after_cycles: StrictInt = Field(default=3, ge=1, le=1000, alias="removeAfterCycles")
    """Consecutive cycles without a reason for the taint (normal or low) after which it is removed."""


_POSITIVE_COOLDOWN = positive("must be a positive duration such as 10m")


class PingPongGuard(StrictModel):
    """**Ours**: back off a workload whose replacements keep landing on nodes over their high threshold.

    The stock kube-scheduler places a replacement by requests, so the pod evicted from a hot node often
    comes back to it (or makes another node hot): moving it again only churns. After a workload's second
    such replacement it is left alone for ``baseCooldown``, twice as long at each further one, at most
    ``maxCooldown`` (``planner/pingpong.py``). ``hotspotTaint`` or a load-aware scheduler is the fix.
    """

    enabled: bool = True
    base_cooldown: Annotated[Duration | None, _POSITIVE_COOLDOWN] = Field(default=None, alias="baseCooldown")
    """The first back-off; unset: the larger of the ``objectLimiters`` window and 10 deschedulingIntervals."""
    max_cooldown: Annotated[Duration, _POSITIVE_COOLDOWN] = Field(default=3600.0, alias="maxCooldown")
    """No back-off is longer; a workload with no bounce for this long after its last is forgiven."""

    @model_validator(mode="after")
    def _ordered(self) -> PingPongGuard:
        if self.base_cooldown is not None and self.base_cooldown > self.max_cooldown:
            raise ValueError(
                f"baseCooldown ({self.base_cooldown:g}s) is longer than maxCooldown ({self.max_cooldown:g}s)"
            )
        return self


class LowNodeLoadArgs(StrictModel):
    """Arguments of the LowNodeLoad balance plugin: which nodes are hot and which are targets."""

    ignored_fields: ClassVar[frozenset[str]] = frozenset({"apiVersion", "kind"})

    paused: bool = False
    dry_run: bool = Field(default=False, alias="dryRun")
    number_of_nodes: NonNegativeInt = Field(default=0, alias="numberOfNodes")
    node_metric_expiration_seconds: StrictInt = Field(
        default=180, ge=1, le=int(MAX_CONFIG_DURATION), alias="nodeMetricExpirationSeconds"
    )
    evictable_namespaces: Namespaces | None = Field(default=None, alias="evictableNamespaces")
    node_selector: LabelSelectorConfig | None = Field(default=None, alias="nodeSelector")
    pod_selectors: list[PodSelector] = Field(default_factory=list, alias="podSelectors")
    node_fit: bool = Field(default=True, alias="nodeFit")
    use_deviation_thresholds: bool = Field(default=False, alias="useDeviationThresholds")
    low_thresholds: ResourceThresholds = Field(default_factory=dict, alias="lowThresholds")
    high_thresholds: ResourceThresholds = Field(default_factory=dict, alias="highThresholds")
    prod_low_thresholds: ResourceThresholds = Field(default_factory=dict, alias="prodLowThresholds")
    prod_high_thresholds: ResourceThresholds = Field(default_factory=dict, alias="prodHighThresholds")
    resource_weights: ResourceWeights = Field(
        default_factory=lambda: {"cpu": 1, "memory": 1}, alias="resourceWeights"
    )
    anomaly_condition: LoadAnomalyCondition = Field(
        default_factory=LoadAnomalyCondition, alias="anomalyCondition"
    )
    # 0 forgets every count before the next cycle: no node would ever be confirmed hot, silently.
    detector_cache_timeout: Annotated[
        Duration, positive("must be a positive duration such as 5m (0 would confirm no hotspot, ever)")
    ] = Field(default=300.0, alias="detectorCacheTimeout")
    node_pools: list[NodePool] = Field(default_factory=list, alias="nodePools")
    hotspot_taint: HotspotTaint = Field(default_factory=HotspotTaint, alias="hotspotTaint")
    ping_pong_guard: PingPongGuard = Field(default_factory=PingPongGuard, alias="pingPongGuard")

    @field_validator("node_pools")
    @classmethod
    def _distinct_pool_names(cls, pools: list[NodePool]) -> list[NodePool]:
        """The audit and the metrics tell pools apart by name; an unnamed pool is ``nodePools[i]``."""
        names = [pool_name(pool, i) for i, pool in enumerate(pools)]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate pool names {duplicates}")
        return pools

    @model_validator(mode="after")
    def _thresholds_consistent(self) -> LowNodeLoadArgs:
        _check_order(self.low_thresholds, self.high_thresholds, "")
        _check_order(self.prod_low_thresholds, self.prod_high_thresholds, "")
        for i, pool in enumerate(self.node_pools):
            low, high, prod_low, prod_high = pool_thresholds(self, pool)
            _check_order(low, high, f"nodePools[{i}].")
            _check_order(prod_low, prod_high, f"nodePools[{i}].")
        return self

    @model_validator(mode="after")
    def _deviations_paired(self) -> LowNodeLoadArgs:
        """In deviation mode a resource needs both deviations (below and above the mean) or neither.

        Checked as the planner reads the pools: each pool with what it inherits, or the args alone
        when there are no pools."""
        pools: list[tuple[NodePool | None, str]] = [(None, "")]
        if self.node_pools:
            pools = [(pool, f"nodePools[{i}].") for i, pool in enumerate(self.node_pools)]
        for pool, where in pools:
            deviation = self.use_deviation_thresholds
            if pool is not None and pool.use_deviation_thresholds is not None:
                deviation = pool.use_deviation_thresholds
            if not deviation:
                continue
            low, high, prod_low, prod_high = pool_thresholds(self, pool)
            _check_pairs(low, high, where, ("lowThresholds", "highThresholds"))
            _check_pairs(prod_low, prod_high, where, ("prodLowThresholds", "prodHighThresholds"))
        return self


Thresholds = dict[str, float]


def pool_name(pool: NodePool | None, index: int) -> str:
    """The name the audit gives a pool: its own, ``nodePools[i]`` without one, ``default`` without pools."""
    if pool is None:
        return "default"
    return pool.name or f"nodePools[{index}]"


def pool_thresholds(
    args: LowNodeLoadArgs, pool: NodePool | None
) -> tuple[Thresholds, Thresholds, Thresholds, Thresholds]:
    """A pool's low, high, prod-low and prod-high thresholds, unset ones inherited from the args."""

    def pick(own: Thresholds | None, inherited: Thresholds) -> Thresholds:
        return dict(own) if own is not None else dict(inherited)

    if pool is None:
        return (
            dict(args.low_thresholds),
            dict(args.high_thresholds),
            dict(args.prod_low_thresholds),
            dict(args.prod_high_thresholds),
        )
    return (
        pick(pool.low_thresholds, args.low_thresholds),
        pick(pool.high_thresholds, args.high_thresholds),
        pick(pool.prod_low_thresholds, args.prod_low_thresholds),
        pick(pool.prod_high_thresholds, args.prod_high_thresholds),
    )


def _check_order(low: Mapping[str, float], high: Mapping[str, float], where: str) -> None:
    for resource, value in low.items():
        if resource in high and value > high[resource]:
            raise ValueError(
                f"{where}lowThresholds.{resource} ({value:g}) is above highThresholds.{resource} "
                f"({high[resource]:g})"
            )


def _check_pairs(
    low: Mapping[str, float], high: Mapping[str, float], where: str, names: tuple[str, str]
) -> None:
    """The prod pass considers only its named resources; the main pass adds cpu and memory, which
    need no pair when neither threshold names them."""
    low_name, high_name = names
    for name in sorted(set(low) | set(high)):
        if (name in low) != (name in high):
            missing = high_name if name in low else low_name
            raise FieldProblem(
                f"{where}{missing}.{name}",
                f"with useDeviationThresholds set both {low_name}.{name} and {high_name}.{name} "
                "(the allowed deviation below and above the mean), or neither",
            )


DEFAULT_CONSECUTIVE_ABNORMALITIES = 5
DEFAULT_CONSECUTIVE_NORMALITIES = 3


def effective_anomaly_condition(
    args: LowNodeLoadArgs, pool: NodePool | None
) -> tuple[LoadAnomalyCondition, list[str]]:
    """The anomaly condition a pool (None: the top level) runs with, 0 read as Koordinator's defaulting
    reads it, and a notice for each 0 of that level replaced (a team's Koordinator ConfigMap with 0 keeps
    working, and says what 0 became).

    Top level: ``consecutiveAbnormalities: 0`` becomes 5; otherwise ``consecutiveNormalities: 0`` becomes
    3 (Koordinator's ``SetDefaults_LowNodeLoadArgs`` checks the second only when the first was set, so
    with both 0 the normalities stay 0). A pool without a condition takes the top-level one; a pool's 0
    takes the top-level value (``SetDefaults_LowNodeLoadNodePools``).
    """
    top = args.anomaly_condition
    notices: list[str] = []
    where = "LowNodeLoadArgs.anomalyCondition"
    if top.consecutive_abnormalities == 0:
        top = top.model_copy(update={"consecutive_abnormalities": DEFAULT_CONSECUTIVE_ABNORMALITIES})
        notices.append(
            f"{where}.consecutiveAbnormalities: 0 read as {DEFAULT_CONSECUTIVE_ABNORMALITIES}, "
            "Koordinator's default (0 means unset there)"
        )
    elif top.consecutive_normalities == 0:
        top = top.model_copy(update={"consecutive_normalities": DEFAULT_CONSECUTIVE_NORMALITIES})
        notices.append(
            f"{where}.consecutiveNormalities: 0 read as {DEFAULT_CONSECUTIVE_NORMALITIES}, "
            "Koordinator's default (0 means unset there)"
        )
    if pool is None:
        return top, notices
    if pool.anomaly_condition is None:
        return top, []
    own = pool.anomaly_condition
    notices = []
    index = args.node_pools.index(pool)
    inherited: dict[str, int] = {}
    for name, alias in (
        ("consecutive_abnormalities", "consecutiveAbnormalities"),
        ("consecutive_normalities", "consecutiveNormalities"),
    ):
        if getattr(own, name) == 0:
            value = getattr(top, name)
            inherited[name] = value
            notices.append(
                f"LowNodeLoadArgs.nodePools[{index}].anomalyCondition.{alias}: 0 read as {value}, "
                "the top-level value (0 means unset in Koordinator)"
            )
    return own.model_copy(update=inherited) if inherited else own, notices


def anomaly_condition_notices(args: LowNodeLoadArgs) -> list[str]:
    """What ``effective_anomaly_condition`` replaced, top level once, then each pool."""
    notices = effective_anomaly_condition(args, None)[1]
    for pool in args.node_pools:
        notices += effective_anomaly_condition(args, pool)[1]
    return notices
