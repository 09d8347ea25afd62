"""``MigrationControllerArgs``: the evictor's arguments, their defaults and their checks, side by side.

Field names and defaults follow Koordinator's ``MigrationControllerArgs``; the Reservation and
PodMigrationJob fields are accepted and reported as unused. The DeleteOptions keys are listed once,
here: the model refuses what the evictor (``kube/evict.py``) could not send.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, StrictInt, field_validator, model_validator

from descheduler.config.base import FieldProblem, StrictModel, path_key, quoted
from descheduler.config.controls import MAX_EVICTION_WINDOWS, ChurnBudget, EvictionWindow, window_overlap
from descheduler.config.selectors import LabelSelectorConfig, Namespaces
from descheduler.config.types import (
    MAX_CONFIG_DURATION,
    MAX_CONFIG_INT,
    Duration,
    FloatOrString,
    Int32,
    NonNegativeInt,
    ReplicasIntOrPercent,
)

DELETE_OPTION_KEYS = frozenset(
    {"gracePeriodSeconds", "propagationPolicy", "preconditions", "dryRun", "kind", "apiVersion"}
)
"""The DeleteOptions fields ``defaultDeleteOptions`` may hold."""
EVICTOR_OWNED_KEYS = frozenset({"kind", "apiVersion", "dryRun"})
"""Accepted but not sent as given: the evictor writes the envelope and decides dry-run itself."""
PROPAGATION_POLICIES = ("Orphan", "Background", "Foreground")

PAUSE_ANNOTATION = "load-aware-descheduler.io/paused"
"""Ours: on a Namespace, Node, workload or pod, stops evictions from it without a config change."""
DEFAULT_OPT_OUTS: Mapping[str, str] = {
    "karpenter.sh/do-not-disrupt": "true",
    "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
}
"""The ecosystem's marks that a pod must not be disrupted, honoured unless ``optOutAnnotations`` says
otherwise."""
KNOWN_OPT_OUT_ANNOTATIONS = frozenset(
    {*DEFAULT_OPT_OUTS, "descheduler.alpha.kubernetes.io/prefer-no-eviction"}
)
"""What ``optOutAnnotations`` may name: the pod parsers keep exactly these annotations (and the few
others the planner reads), so a listed opt-out is never lost to their memory-saving filter."""


def _grace_problem(value: object) -> str | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return f"gracePeriodSeconds must be a non-negative integer, got {repr(value)[:40]}"
    if not 0 <= value <= MAX_CONFIG_DURATION:
        shown = value if abs(value) < 10**20 else f"a number of {len(str(value))} digits"
        return f"gracePeriodSeconds must be between 0 and {int(MAX_CONFIG_DURATION)} (a year), got {shown}"
    return None


def delete_options_to_send(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The delete options sent with every eviction (without the keys the evictor owns).

    ``ValueError`` names the first bad field: the model calls this to refuse a configuration, the
    evictor to build its requests, so both accept exactly the same options."""
    out: dict[str, Any] = {}
    for key, value in (options or {}).items():
        if key not in DELETE_OPTION_KEYS:
            raise ValueError(f"unknown field {quoted(key)}; known: {', '.join(sorted(DELETE_OPTION_KEYS))}")
        if key in EVICTOR_OWNED_KEYS:
            continue
        problem = None
        if key == "gracePeriodSeconds":
            problem = _grace_problem(value)
        elif key == "propagationPolicy" and value not in PROPAGATION_POLICIES:
            problem = (
                f"propagationPolicy must be one of {', '.join(PROPAGATION_POLICIES)}, got {repr(value)[:40]}"
            )
        elif key == "preconditions" and not isinstance(value, Mapping):
            problem = "preconditions must be an object"
        if problem is not None:
            raise ValueError(problem)
        out[key] = dict(value) if isinstance(value, Mapping) else value
    return out


class PriorityThreshold(StrictModel):
    value: Int32 | None = None
    name: str = ""

    @model_validator(mode="after")
    def _value_xor_name(self) -> PriorityThreshold:
        if self.value is not None and self.name:
            raise ValueError("set either value or name, not both")
        return self


JOURNAL_RECORDS = 1_200
"""Migration records the journal's ConfigMap is sure to hold: with long real-world names a record takes
about 475 bytes after its eviction and 680 once its replacement is matched and bounced, so 1,320 fully
grown ones fit (``benchmarks/journal_capacity.py``); kept below that for restarts in flight."""


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
    """Ours: pods holding DRA devices (spec.resourceClaims) stay put unless this is true; then they move
    only to a low node with free devices their claims match (``planner/devices.py``)."""
    opt_out_annotations: dict[str, str] = Field(
        default_factory=lambda: dict(DEFAULT_OPT_OUTS), alias="optOutAnnotations"
    )
    """Ours: a pod annotated with one of these keys and its value (compared without case) is never evicted,
    even with the evict annotation. ``{}`` turns the defaults off."""
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
    surge_single_replica: bool = Field(default=False, alias="surgeSingleReplica")
    """Ours: a single-replica Deployment's pod on a hotspot is moved by a rollout restart, only when the
    rollout creates the new pod before it stops the old one (``planner/surge.py``); off: never moved."""
    object_limiters: dict[str, ObjectLimiter] = Field(
        default_factory=lambda: {"workload": ObjectLimiter()}, alias="objectLimiters"
    )
    evict_qps: FloatOrString = Field(default=10.0, alias="evictQPS")
    evict_burst: StrictInt = Field(default=1, ge=1, le=MAX_CONFIG_INT, alias="evictBurst")
    eviction_policy: Literal["Eviction", "Delete"] = Field(default="Eviction", alias="evictionPolicy")
    default_delete_options: dict[str, Any] | None = Field(default=None, alias="defaultDeleteOptions")
    skip_eviction_gates: bool = Field(default=False, alias="skipEvictionGates")
    eviction_windows: list[EvictionWindow] | None = Field(default=None, alias="evictionWindows")
    """Ours: weekly windows in which live evictions may happen; unset: always (``controls.py``)."""
    churn_budget: ChurnBudget | None = Field(default=None, alias="churnBudget")
    """Ours: at most N evictions per rolling period, cluster-wide and per namespace."""
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
                raise ValueError(f"unknown object limiter {quoted(name)}; the only kind is 'workload'")
        return value

    @field_validator("opt_out_annotations")
    @classmethod
    def _known_opt_outs(cls, value: dict[str, str]) -> dict[str, str]:
        for key, wanted in value.items():
            if key not in KNOWN_OPT_OUT_ANNOTATIONS:
                raise FieldProblem(
                    path_key(key),
                    f"not an opt-out annotation this descheduler reads; known: "
                    f"{', '.join(sorted(KNOWN_OPT_OUT_ANNOTATIONS))} (pause with {PAUSE_ANNOTATION})",
                )
            if not wanted.strip():
                raise FieldProblem(path_key(key), "needs the value that opts a pod out")
        return value

    @field_validator("eviction_windows", mode="before")
    @classmethod
    def _few_windows(cls, value: Any) -> Any:
        """Refused before each window is read: a generated list of thousands costs seconds to check."""
        if isinstance(value, list) and len(value) > MAX_EVICTION_WINDOWS:
            raise ValueError(
                f"{len(value)} windows, at most {MAX_EVICTION_WINDOWS}: merge adjacent ones (a window may "
                "list several days)"
            )
        return value

    @field_validator("eviction_windows")
    @classmethod
    def _windows(cls, value: list[EvictionWindow] | None) -> list[EvictionWindow] | None:
        if value is not None and not value:
            raise ValueError("an empty list never opens: leave evictionWindows unset to evict at any time")
        return value

    @model_validator(mode="after")
    def _windows_apart(self) -> MigrationControllerArgs:
        problem = window_overlap(self.eviction_windows or [])
        if problem is not None:
            raise problem
        return self

    @model_validator(mode="after")
    def _journal_holds_the_budget(self) -> MigrationControllerArgs:
        """Records are kept for the longer of the workload window and the budget's period: a budget that
        allows more evictions in that time than the journal holds would stall every eviction later."""
        budget = self.churn_budget
        if budget is None or budget.max_evictions is None:
            return self
        limiter = self.object_limiters.get("workload")
        periods = max(1, math.ceil((limiter.duration if limiter is not None else 0.0) / budget.period))
        kept = budget.max_evictions * periods
        if kept > JOURNAL_RECORDS:
            spans = f" over {periods} periods (objectLimiters.workload.duration)" if periods > 1 else ""
            raise FieldProblem(
                "churnBudget.maxEvictions",
                f"allows {kept} migration records{spans}; the migration journal holds {JOURNAL_RECORDS} "
                "with long names: lower maxEvictions or the objectLimiters window",
            )
        return self

    @model_validator(mode="after")
    def _surge_needs_protection(self) -> MigrationControllerArgs:
        if self.surge_single_replica and self.skip_check_expected_replicas:
            raise ValueError(
                "surgeSingleReplica cannot be combined with skipCheckExpectedReplicas: true (that evicts "
                "single-replica pods outright, so no restart would ever be chosen)"
            )
        return self

    @field_validator("default_delete_options")
    @classmethod
    def _delete_options(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        delete_options_to_send(value)
        return value
