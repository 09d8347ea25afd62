"""The top-level ``DeschedulerConfiguration`` (``descheduler/v1alpha2``): profiles, plugins, leader
election, the watch cache, the endpoints, and the checks that span them.

Field names and defaults follow Koordinator's ``DeschedulerConfiguration`` so a team can apply its
existing ConfigMap unchanged. Each plugin's arguments live with their own checks in their own module
(``lownodeload.py``, ``migration.py``), as the Kubernetes descheduler keeps each plugin's types,
defaults and validation together; they are re-exported here for the callers that read the whole file.
"""

from __future__ import annotations

import difflib
from functools import partial
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Discriminator, Field, StrictFloat, StrictInt, Tag, field_validator, model_validator

from descheduler.config.base import StrictModel, quoted
from descheduler.config.lownodeload import (
    HotspotTaint,
    LoadAnomalyCondition,
    LowNodeLoadArgs,
    NodePool,
    PodSelector,
)
from descheduler.config.migration import (
    ArbitrationArgs,
    MigrationControllerArgs,
    ObjectLimiter,
    PriorityThreshold,
)
from descheduler.config.providers import MetricsProviders
from descheduler.config.selectors import (
    LabelSelectorConfig,
    LabelSelectorRequirementConfig,
    Namespaces,
    parse_selector_text,
)
from descheduler.config.types import (
    MAX_CONFIG_INT,
    MAX_CONFIG_RATE,
    Duration,
    NonNegativeInt,
    at_least,
    checked,
    dns1123_label_problem,
    dns1123_subdomain_problem,
)

__all__ = [
    "EXTENSION_POINTS",
    "KNOWN_PLUGINS",
    "LOW_NODE_LOAD",
    "MIGRATION_CONTROLLER",
    "ArbitrationArgs",
    "ClientConnection",
    "DeschedulerConfiguration",
    "HotspotTaint",
    "LabelSelectorConfig",
    "LabelSelectorRequirementConfig",
    "LeaderElection",
    "LoadAnomalyCondition",
    "LowNodeLoadArgs",
    "MigrationControllerArgs",
    "Namespaces",
    "NodePool",
    "ObjectLimiter",
    "OtherPluginArgs",
    "PodSelector",
    "PriorityThreshold",
    "Profile",
    "WatchCache",
]

LOW_NODE_LOAD = "LowNodeLoad"
MIGRATION_CONTROLLER = "MigrationController"
KNOWN_PLUGINS = (LOW_NODE_LOAD, MIGRATION_CONTROLLER)
EXTENSION_POINTS = ("deschedule", "balance", "evict", "filter")


def plugin_name_typo(name: str) -> str | None:
    """The known plugin ``name`` is a likely typo of, or None (an unknown plugin is only a notice)."""
    if name in KNOWN_PLUGINS:
        return None
    close = difflib.get_close_matches(name, KNOWN_PLUGINS, n=1, cutoff=0.75)
    return close[0] if close else None


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
                raise ValueError(f"args.kind is {quoted(kind)} but plugin {name} takes {name}Args")
            data = {**data, "args": {**args, "kind": f"{name}Args"}}
        return data


class Plugin(StrictModel):
    name: str


class EnabledPlugin(Plugin):
    """A plugin switched on: a near miss of a known name is an error (it would silently do nothing)."""

    @field_validator("name")
    @classmethod
    def _not_a_typo(cls, name: str) -> str:
        close = plugin_name_typo(name)
        if close is not None:
            raise ValueError(f"unknown plugin {quoted(name)}; did you mean {close!r}?")
        return name


class PluginSet(StrictModel):
    enabled: list[EnabledPlugin] = Field(default_factory=list)
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
    # The migration journal is a ConfigMap named after the Lease (kube/journal.py): both must be valid.
    resource_name: Annotated[
        str,
        checked(partial(dns1123_subdomain_problem, max_length=253 - len("-migrations")), "the Lease name "),
    ] = Field(default="load-aware-descheduler", alias="resourceName")
    resource_namespace: Annotated[str, checked(dns1123_label_problem)] = Field(
        default="kube-system", alias="resourceNamespace"
    )

    @model_validator(mode="after")
    def _timings(self) -> LeaderElection:
        if self.leader_elect and not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise ValueError("need leaseDuration > renewDeadline > retryPeriod > 0")
        return self


MAX_WATCH_TIMEOUT = 3600.0
"""The longest watch asked for (client-go asks 5-10 min); longer only delays noticing a dead connection."""


class WatchCache(StrictModel):
    """Ours: how fresh the watch cache must be to act on it (see ``descheduler/kube/cache.py``)."""

    max_staleness: Duration = Field(default=30.0, alias="maxStaleness")
    """Nothing is evicted, tainted or restarted on a resource that last heard from the API server longer
    ago: its watch is re-opened first (bounded), and if the server does not answer the cycle is skipped."""
    watch_list: Literal["auto", "on", "off"] = Field(default="auto", alias="watchList")
    """Sync (and re-sync after 410 Gone) by a streaming list, a watch with ``sendInitialEvents``: auto uses
    it where the server offers it and falls back to paginated LIST (remembered per resource); on never
    falls back; off always LISTs."""
    encoding: Literal["json", "protobuf"] = "protobuf"
    """What pods and nodes are asked for in. protobuf costs the API server a third of the CPU JSON costs it
    (issue 40: about the Go peer's) and us more (a pure-Python reader); a page it does not reproduce is
    asked for again in JSON, a watch event it does not reproduce relists that resource in JSON. A server
    that answers JSON anyway is read as JSON."""
    watch_timeout: Duration = Field(default=600.0, alias="watchTimeout")
    """``timeoutSeconds`` asked for each watch (+ up to 25% jitter): how often an idle cache re-opens its
    watches. A silent connection is replaced after this plus 5 s, or at once when a cycle is about to act."""

    @model_validator(mode="after")
    def _bounds(self) -> WatchCache:
        if not 1 <= self.watch_timeout <= MAX_WATCH_TIMEOUT:
            raise ValueError(
                f"watchTimeout ({self.watch_timeout:g}s) must be between 1s and {MAX_WATCH_TIMEOUT:g}s"
            )
        if self.max_staleness < 1:
            raise ValueError(
                f"maxStaleness ({self.max_staleness:g}s) must be at least 1s: a fresher cache "
                "cannot be proven before every action"
            )
        return self


class ClientConnection(StrictModel):
    kubeconfig: str = ""
    accept_content_types: str = Field(default="", alias="acceptContentTypes")
    content_type: str = Field(default="application/json", alias="contentType")
    qps: StrictFloat = Field(default=50.0, gt=0, le=MAX_CONFIG_RATE)
    burst: StrictInt = Field(default=100, ge=1, le=MAX_CONFIG_INT)


class DeschedulerConfiguration(StrictModel):
    """The top-level configuration file (or the content of the ConfigMap's single data key)."""

    ignored_fields: ClassVar[frozenset[str]] = frozenset()

    api_version: Literal["descheduler/v1alpha2"] = Field(default="descheduler/v1alpha2", alias="apiVersion")
    kind: Literal["DeschedulerConfiguration"] = "DeschedulerConfiguration"
    descheduling_interval: Annotated[Duration, at_least(1, "must be a positive duration such as 60s")] = (
        Field(default=60.0, alias="deschedulingInterval")
    )
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

    @field_validator("node_selector")
    @classmethod
    def _selector_text_parses(
        cls, value: LabelSelectorConfig | str | None
    ) -> LabelSelectorConfig | str | None:
        if isinstance(value, str):
            parse_selector_text(value)
        return value

    @field_validator("profiles")
    @classmethod
    def _one_balancing_profile(cls, profiles: list[Profile]) -> list[Profile]:
        balancing = [p for p in profiles if LOW_NODE_LOAD in p.plugins.balance.names()]
        if len(balancing) > 1:
            raise ValueError(
                "LowNodeLoad is enabled in more than one profile; run one instance per profile instead "
                "(each with its own nodeSelector and lease name)"
            )
        return profiles

    @field_validator("healthz_bind_address", "metrics_bind_address")
    @classmethod
    def _bind_address(cls, value: str) -> str:
        if value == "":
            return value
        _, sep, port = value.rpartition(":")
        if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"expected HOST:PORT such as 0.0.0.0:10258, got {quoted(value)}")
        return value
