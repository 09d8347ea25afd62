"""Koordinator-compatible configuration models (``descheduler/v1alpha2``).

Field names and defaults follow Koordinator's ``DeschedulerConfiguration``, ``LowNodeLoadArgs`` and
``MigrationControllerArgs`` so a team can apply its existing ConfigMap unchanged. Fields that mean
nothing for this product are accepted and listed in ``ignored_fields`` so the loader can say so once.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Discriminator, Field, Tag, field_validator, model_validator

from descheduler.config.base import StrictModel
from descheduler.config.providers import MetricsProviders
from descheduler.config.types import (
    MAX_CONFIG_DURATION,
    MAX_CONFIG_INT,
    MAX_CONFIG_RATE,
    Duration,
    FloatOrString,
    Int32,
    NonNegativeInt,
    ReplicasIntOrPercent,
    ResourceThresholds,
    ResourceWeights,
    dns1123_label_problem,
    dns1123_subdomain_problem,
)

LOW_NODE_LOAD = "LowNodeLoad"
MIGRATION_CONTROLLER = "MigrationController"
KNOWN_PLUGINS = (LOW_NODE_LOAD, MIGRATION_CONTROLLER)


class LabelSelectorRequirementConfig(StrictModel):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_match_operator(self) -> LabelSelectorRequirementConfig:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class LabelSelectorConfig(StrictModel):
    """metav1.LabelSelector as written in YAML."""

    match_labels: dict[str, str] = Field(default_factory=dict, alias="matchLabels")
    match_expressions: list[LabelSelectorRequirementConfig] = Field(
        default_factory=list, alias="matchExpressions"
    )


class Namespaces(StrictModel):
    include: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _include_xor_exclude(self) -> Namespaces:
        if self.include and self.exclude:
            raise ValueError("set either include or exclude, not both")
        return self


class LoadAnomalyCondition(StrictModel):
    consecutive_abnormalities: int = Field(
        default=5, ge=1, le=MAX_CONFIG_INT, alias="consecutiveAbnormalities"
    )
    """A node over its high threshold this many cycles in a row is a hotspot (1 = at once)."""
    consecutive_normalities: int = Field(default=3, ge=0, le=MAX_CONFIG_INT, alias="consecutiveNormalities")
    """Accepted for Koordinator compatibility: here one normal cycle already resets the count."""
    timeout: Duration = 60.0
    """Accepted for Koordinator compatibility: here counts expire with ``detectorCacheTimeout``."""


class PodSelector(StrictModel):
    name: str = ""
    selector: LabelSelectorConfig | None = None


def _check_thresholds(low: dict[str, float], high: dict[str, float], where: str) -> None:
    for resource, value in low.items():
        if resource in high and value > high[resource]:
            raise ValueError(
                f"{where}lowThresholds.{resource} ({value:g}) is above highThresholds.{resource} "
                f"({high[resource]:g})"
            )


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
    remove_after_cycles: int = Field(default=3, ge=1, le=1000, alias="removeAfterCycles")
    """Consecutive cycles without a reason for the taint (normal or low) after which it is removed."""


class LowNodeLoadArgs(StrictModel):
    """Arguments of the LowNodeLoad balance plugin: which nodes are hot and which are targets."""

    ignored_fields: ClassVar[frozenset[str]] = frozenset({"apiVersion", "kind"})

    paused: bool = False
    dry_run: bool = Field(default=False, alias="dryRun")
    number_of_nodes: NonNegativeInt = Field(default=0, alias="numberOfNodes")
    node_metric_expiration_seconds: int = Field(
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
    detector_cache_timeout: Duration = Field(default=300.0, alias="detectorCacheTimeout")
    node_pools: list[NodePool] = Field(default_factory=list, alias="nodePools")
    hotspot_taint: HotspotTaint = Field(default_factory=HotspotTaint, alias="hotspotTaint")

    @field_validator("detector_cache_timeout")
    @classmethod
    def _positive_detector_timeout(cls, value: float) -> float:
        # 0 forgets every count before the next cycle: no node would ever be confirmed hot, silently.
        if value <= 0:
            raise ValueError("must be a positive duration such as 5m (0 would confirm no hotspot, ever)")
        return value

    @model_validator(mode="after")
    def _thresholds_consistent(self) -> LowNodeLoadArgs:
        _check_thresholds(self.low_thresholds, self.high_thresholds, "")
        _check_thresholds(self.prod_low_thresholds, self.prod_high_thresholds, "")
        for i, pool in enumerate(self.node_pools):
            low = pool.low_thresholds if pool.low_thresholds is not None else self.low_thresholds
            high = pool.high_thresholds if pool.high_thresholds is not None else self.high_thresholds
            _check_thresholds(low, high, f"nodePools[{i}].")
            plow = (
                pool.prod_low_thresholds if pool.prod_low_thresholds is not None else self.prod_low_thresholds
            )
            phigh = (
                pool.prod_high_thresholds
                if pool.prod_high_thresholds is not None
                else self.prod_high_thresholds
            )
            _check_thresholds(plow, phigh, f"nodePools[{i}].")
        return self


class PriorityThreshold(StrictModel):
    value: Int32 | None = None
    name: str = ""

    @model_validator(mode="after")
    def _value_xor_name(self) -> PriorityThreshold:
        if self.value is not None and self.name:
            raise ValueError("set either value or name, not both")
        return self


class ObjectLimiter(StrictModel):
    duration: Duration = 300.0
    max_migrating: ReplicasIntOrPercent | None = Field(default=None, alias="maxMigrating")


class ArbitrationArgs(StrictModel):
    enabled: bool = True
    interval: Duration = 0.5


class MigrationControllerArgs(StrictModel):
    """Arguments of the MigrationController evictor: filters, limits and how pods are evicted."""

    ignored_fields: ClassVar[frozenset[str]] = frozenset({"apiVersion", "kind"})
    reservation_fields: ClassVar[tuple[str, ...]] = (
        "defaultJobMode",
        "defaultJobTTL",
        "schedulerNames",
        "maxConcurrentReconciles",
        "arbitrationArgs",
        "flowControlQPS",
        "flowControlBurst",
    )

    dry_run: bool = Field(default=False, alias="dryRun")
    evict_failed_bare_pods: bool = Field(default=False, alias="evictFailedBarePods")
    evict_all_bare_pods: bool = Field(default=False, alias="evictAllBarePods")
    evict_local_storage_pods: bool = Field(default=False, alias="evictLocalStoragePods")
    evict_system_critical_pods: bool = Field(default=False, alias="evictSystemCriticalPods")
    evict_resource_claim_pods: bool = Field(default=False, alias="evictResourceClaimPods")
    """Ours: pods holding DRA devices (spec.resourceClaims) stay put unless this is true."""
    ignore_pvc_pods: bool = Field(default=False, alias="ignorePvcPods")
    priority_threshold: PriorityThreshold | None = Field(default=None, alias="priorityThreshold")
    label_selector: LabelSelectorConfig | None = Field(default=None, alias="labelSelector")
    namespaces: Namespaces | None = None
    max_migrating_globally: NonNegativeInt | None = Field(default=None, alias="maxMigratingGlobally")
    max_migrating_per_node: NonNegativeInt | None = Field(default=2, alias="maxMigratingPerNode")
    max_migrating_per_namespace: NonNegativeInt | None = Field(default=None, alias="maxMigratingPerNamespace")
    max_migrating_per_workload: ReplicasIntOrPercent | None = Field(
        default=None, alias="maxMigratingPerWorkload"
    )
    max_unavailable_per_workload: ReplicasIntOrPercent | None = Field(
        default=None, alias="maxUnavailablePerWorkload"
    )
    skip_check_expected_replicas: bool = Field(default=False, alias="skipCheckExpectedReplicas")
    object_limiters: dict[str, ObjectLimiter] = Field(
        default_factory=lambda: {"workload": ObjectLimiter()}, alias="objectLimiters"
    )
    evict_qps: FloatOrString = Field(default=10.0, alias="evictQPS")
    evict_burst: int = Field(default=1, ge=1, le=MAX_CONFIG_INT, alias="evictBurst")
    eviction_policy: Literal["Eviction", "Delete"] = Field(default="Eviction", alias="evictionPolicy")
    default_delete_options: dict[str, Any] | None = Field(default=None, alias="defaultDeleteOptions")
    skip_eviction_gates: bool = Field(default=False, alias="skipEvictionGates")
    # Reservation / PodMigrationJob fields: accepted, not used (this product evicts directly).
    default_job_mode: str | None = Field(default=None, alias="defaultJobMode")
    default_job_ttl: Duration | None = Field(default=None, alias="defaultJobTTL")
    scheduler_names: list[str] | None = Field(default=None, alias="schedulerNames")
    max_concurrent_reconciles: Int32 | None = Field(default=None, alias="maxConcurrentReconciles")
    arbitration_args: ArbitrationArgs | None = Field(default=None, alias="arbitrationArgs")
    flow_control_qps: FloatOrString | None = Field(default=None, alias="flowControlQPS")
    flow_control_burst: Int32 | None = Field(default=None, alias="flowControlBurst")

    @field_validator("object_limiters")
    @classmethod
    def _known_limiters(cls, value: dict[str, ObjectLimiter]) -> dict[str, ObjectLimiter]:
        for name in value:
            if name != "workload":
                raise ValueError(f"unknown object limiter {name!r}; the only kind is 'workload'")
        return value

    @field_validator("default_delete_options")
    @classmethod
    def _delete_options(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        allowed = {"gracePeriodSeconds", "propagationPolicy", "preconditions", "dryRun", "kind", "apiVersion"}
        for key in value or {}:
            if key not in allowed:
                raise ValueError(f"unknown DeleteOptions field {key!r}; known: {', '.join(sorted(allowed))}")
        grace = (value or {}).get("gracePeriodSeconds")
        if isinstance(grace, int) and not isinstance(grace, bool) and not 0 <= grace <= MAX_CONFIG_DURATION:
            raise ValueError(
                f"gracePeriodSeconds must be between 0 and {int(MAX_CONFIG_DURATION)} (a year), "
                f"got {grace if abs(grace) < 10**20 else 'a number of ' + str(len(str(grace))) + ' digits'}"
            )
        return value


class OtherPluginArgs(StrictModel):
    """Arguments of plugins this product does not implement: kept verbatim and reported as ignored."""

    model_config = StrictModel.model_config | {"extra": "allow"}

    @model_validator(mode="before")
    @classmethod
    def _reject_unknown(cls, data: Any) -> Any:
        return data


def _args_tag(value: Any) -> str:
    if isinstance(value, dict):
        kind = value.get("kind")
        if kind in ("LowNodeLoadArgs", "MigrationControllerArgs"):
            return str(kind)
        return "Other"
    if isinstance(value, LowNodeLoadArgs):
        return "LowNodeLoadArgs"
    if isinstance(value, MigrationControllerArgs):
        return "MigrationControllerArgs"
    return "Other"


PluginArgs = Annotated[
    Annotated[LowNodeLoadArgs, Tag("LowNodeLoadArgs")]
    | Annotated[MigrationControllerArgs, Tag("MigrationControllerArgs")]
    | Annotated[OtherPluginArgs, Tag("Other")],
    Discriminator(_args_tag),
]


class PluginConfig(StrictModel):
    name: str
    args: PluginArgs = Field(default_factory=OtherPluginArgs)

    @model_validator(mode="before")
    @classmethod
    def _kind_from_name(cls, data: Any) -> Any:
        """Args are typed by the plugin's name, as Koordinator decodes ``<Name>Args``."""
        if not isinstance(data, dict):
            return data
        name = data.get("name")
        args = data.get("args")
        if args is None:
            args = {}
        if isinstance(args, dict) and name in KNOWN_PLUGINS:
            kind = args.get("kind")
            if kind is not None and kind != f"{name}Args":
                raise ValueError(f"args.kind is {kind!r} but plugin {name} takes {name}Args")
            data = {**data, "args": {**args, "kind": f"{name}Args"}}
        return data


class Plugin(StrictModel):
    name: str


class PluginSet(StrictModel):
    enabled: list[Plugin] = Field(default_factory=list)
    disabled: list[Plugin] = Field(default_factory=list)

    def names(self) -> list[str]:
        return [p.name for p in self.enabled]


class Plugins(StrictModel):
    deschedule: PluginSet = Field(default_factory=PluginSet)
    balance: PluginSet = Field(default_factory=PluginSet)
    evict: PluginSet = Field(default_factory=PluginSet)
    filter: PluginSet = Field(default_factory=PluginSet)


class Profile(StrictModel):
    name: str
    plugins: Plugins = Field(default_factory=Plugins)
    plugin_config: list[PluginConfig] = Field(default_factory=list, alias="pluginConfig")
    node_selector: LabelSelectorConfig | None = Field(default=None, alias="nodeSelector")


class LeaderElection(StrictModel):
    leader_elect: bool = Field(default=False, alias="leaderElect")
    lease_duration: Duration = Field(default=15.0, alias="leaseDuration")
    renew_deadline: Duration = Field(default=10.0, alias="renewDeadline")
    retry_period: Duration = Field(default=2.0, alias="retryPeriod")
    resource_lock: Literal["leases", "endpointsleases", "configmapsleases"] = Field(
        default="leases", alias="resourceLock"
    )
    resource_name: str = Field(default="load-aware-descheduler", alias="resourceName")
    resource_namespace: str = Field(default="kube-system", alias="resourceNamespace")

    @field_validator("resource_name")
    @classmethod
    def _lease_name(cls, value: str) -> str:
        # The migration journal is a ConfigMap named after the Lease (kube/journal.py): both must be valid.
        problem = dns1123_subdomain_problem(value, 253 - len("-migrations"))
        if problem is not None:
            raise ValueError(f"the Lease name {problem}")
        return value

    @field_validator("resource_namespace")
    @classmethod
    def _lease_namespace(cls, value: str) -> str:
        problem = dns1123_label_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _timings(self) -> LeaderElection:
        if self.leader_elect and not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise ValueError("need leaseDuration > renewDeadline > retryPeriod > 0")
        return self


class WatchCache(StrictModel):
    """Ours: how fresh the watch cache must be to act on it (see ``descheduler/kube/cache.py``)."""

    max_staleness: Duration = Field(default=30.0, alias="maxStaleness")
    """No cycle (live or dry-run) while any watched resource last heard from the API server longer ago."""
    watch_timeout: Duration = Field(default=10.0, alias="watchTimeout")
    """``timeoutSeconds`` asked for each watch (+ up to 25% jitter); a silent connection is replaced after
    this plus 5 s."""

    @model_validator(mode="after")
    def _bounds(self) -> WatchCache:
        if self.watch_timeout < 1:
            raise ValueError("watchTimeout must be at least 1s")
        if self.max_staleness <= self.watch_timeout * 1.25:
            raise ValueError(
                f"maxStaleness ({self.max_staleness:g}s) must exceed watchTimeout plus its 25% jitter "
                f"({self.watch_timeout * 1.25:g}s): a quiet but healthy watch is heard from only that often"
            )
        return self


class ClientConnection(StrictModel):
    kubeconfig: str = ""
    accept_content_types: str = Field(default="", alias="acceptContentTypes")
    content_type: str = Field(default="application/json", alias="contentType")
    qps: float = Field(default=50.0, gt=0, le=MAX_CONFIG_RATE)
    burst: int = Field(default=100, ge=1, le=MAX_CONFIG_INT)


class DeschedulerConfiguration(StrictModel):
    """The top-level configuration file (or the content of the ConfigMap's single data key)."""

    ignored_fields: ClassVar[frozenset[str]] = frozenset()

    api_version: Literal["descheduler/v1alpha2"] = Field(default="descheduler/v1alpha2", alias="apiVersion")
    kind: Literal["DeschedulerConfiguration"] = "DeschedulerConfiguration"
    descheduling_interval: Duration = Field(default=60.0, alias="deschedulingInterval")
    dry_run: bool = Field(default=False, alias="dryRun")
    node_selector: LabelSelectorConfig | str | None = Field(default=None, alias="nodeSelector")
    max_no_of_pods_to_evict_per_node: NonNegativeInt | None = Field(
        default=None, alias="maxNoOfPodsToEvictPerNode"
    )
    max_no_of_pods_to_evict_per_namespace: NonNegativeInt | None = Field(
        default=None, alias="maxNoOfPodsToEvictPerNamespace"
    )
    max_no_of_pods_to_evict_total: NonNegativeInt | None = Field(
        default=None, alias="maxNoOfPodsToEvictTotal"
    )
    leader_election: LeaderElection = Field(default_factory=LeaderElection, alias="leaderElection")
    client_connection: ClientConnection = Field(default_factory=ClientConnection, alias="clientConnection")
    watch_cache: WatchCache = Field(default_factory=WatchCache, alias="watchCache")
    """Ours: freshness bound of the watch cache."""
    healthz_bind_address: str = Field(default="0.0.0.0:10258", alias="healthzBindAddress")
    metrics_bind_address: str = Field(default="0.0.0.0:10259", alias="metricsBindAddress")
    enable_profiling: bool = Field(default=False, alias="enableProfiling")
    """Accepted for Koordinator compatibility; this product serves no profiling endpoints."""
    enable_contention_profiling: bool = Field(default=False, alias="enableContentionProfiling")
    """Accepted for Koordinator compatibility; ignored."""
    metrics_providers: MetricsProviders = Field(default_factory=list, alias="metricsProviders")
    """Ours, in the Kubernetes descheduler's shape: where usage comes from (empty: Prometheus defaults)."""
    profiles: list[Profile] = Field(default_factory=list)

    @field_validator("descheduling_interval")
    @classmethod
    def _positive_interval(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be a positive duration such as 60s")
        return value

    @field_validator("healthz_bind_address", "metrics_bind_address")
    @classmethod
    def _bind_address(cls, value: str) -> str:
        if value == "":
            return value
        _, sep, port = value.rpartition(":")
        if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"expected HOST:PORT such as 0.0.0.0:10258, got {value!r}")
        return value
