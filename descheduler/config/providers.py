"""Configuration of where usage comes from, shaped like the Kubernetes descheduler's ``metricsProviders``.

A config model like the others, so it lives in ``config/``: ``usage/`` reads it, config never imports usage.

The defaults fit kube-prometheus, the most common installation, so an empty ``metricsProviders`` works
there unchanged. Everything a real installation may do differently (URL, auth, TLS, the label that names
the node, the PromQL itself) can be set, because a wrong mapping silently yields "no sample" for every node.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import AfterValidator, Field, field_validator, model_validator

from descheduler.config.base import StrictModel, quoted
from descheduler.config.types import Duration, positive

DEFAULT_PROMETHEUS_URL = "http://prometheus-k8s.monitoring.svc:9090"
"""The ``prometheus-k8s`` service that kube-prometheus creates in the ``monitoring`` namespace."""

_BUSY_CPU = 'mode!~"idle|iowait|steal"'
_WORKLOAD_CONTAINERS = 'container!="", container!="POD"${podNodeMatcher}'

DEFAULT_QUERIES: dict[str, str] = {
    "nodeCpu": "sum by (${nodeLabel}) (rate(node_cpu_seconds_total{" + _BUSY_CPU + "}[${window}]))",
    "nodeMemory": (
        "sum by (${nodeLabel}) (avg_over_time(node_memory_MemTotal_bytes[${window}]))"
        " - sum by (${nodeLabel}) (avg_over_time(node_memory_MemAvailable_bytes[${window}]))"
    ),
    "nodeSampleTime": "max by (${nodeLabel}) (timestamp(node_memory_MemAvailable_bytes))",
    "nodeSampleCount": (
        'max by (${nodeLabel}) (count_over_time(node_cpu_seconds_total{mode="idle"}[${window}]))'
    ),
    "podCpu": (
        "sum by (namespace, pod) (rate(container_cpu_usage_seconds_total{"
        + _WORKLOAD_CONTAINERS
        + "}[${window}]))"
    ),
    "podMemory": (
        "sum by (namespace, pod) (avg_over_time(container_memory_rss{"
        + _WORKLOAD_CONTAINERS
        + "}[${window}]))"
    ),
    "podSampleTime": "max by (namespace, pod) (timestamp(container_memory_rss{"
    + _WORKLOAD_CONTAINERS
    + "}))",
}
"""PromQL sent each cycle. ``${window}`` and ``${nodeLabel}`` are filled in from the settings.

``${podNodeMatcher}`` (pod queries only) becomes ``, node=~"a|b"`` (the ``podNodeLabel`` setting) so
Prometheus only evaluates the series of the nodes whose pods the cycle needs, or nothing when it needs all
of them. A pod query without it still works: every pod is fetched and the rest left out here.

CPU is busy time (every mode but idle, iowait and steal: iowait is idle time, steal went to another
guest) in cores; memory is ``MemTotal - MemAvailable``, which leaves reclaimable page cache out. Pod
series skip the pod-level aggregate (``container=""``) and the pause container so nothing counts twice;
pod memory is RSS, not ``container_memory_usage_bytes`` (which includes page cache).
"""


def _non_empty_query(value: str) -> str:
    if not value.strip():
        raise ValueError("a query must not be empty")
    return value


Query = Annotated[str, AfterValidator(_non_empty_query)]


class PrometheusQueries(StrictModel):
    """Per-resource PromQL overrides.

    Node queries must return one series per node carrying the ``nodeLabel`` label; pod queries one series
    per pod carrying ``namespace`` and ``pod``. CPU queries return cores, memory queries bytes, sample-time
    queries the epoch seconds of the newest raw sample (used to tell stale data from fresh).
    """

    node_cpu: Query = Field(default=DEFAULT_QUERIES["nodeCpu"], alias="nodeCpu")
    node_memory: Query = Field(default=DEFAULT_QUERIES["nodeMemory"], alias="nodeMemory")
    node_sample_time: Query = Field(default=DEFAULT_QUERIES["nodeSampleTime"], alias="nodeSampleTime")
    node_sample_count: Query = Field(default=DEFAULT_QUERIES["nodeSampleCount"], alias="nodeSampleCount")
    """Samples of a node's cpu series in the window: fewer than lately is a scrape gap (usage unknown)."""
    pod_cpu: Query = Field(default=DEFAULT_QUERIES["podCpu"], alias="podCpu")
    pod_memory: Query = Field(default=DEFAULT_QUERIES["podMemory"], alias="podMemory")
    pod_sample_time: Query = Field(default=DEFAULT_QUERIES["podSampleTime"], alias="podSampleTime")


class Relabel(StrictModel):
    """Rewrites the node label's value to a node name, as Prometheus' ``replace`` relabel action does.

    ``regex`` is anchored at both ends; a value it does not match is used unchanged. ``replacement`` may
    refer to groups as ``$1``, ``${1}`` or ``${name}``.
    """

    regex: str
    replacement: str = "$1"

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as error:
            raise ValueError(f"not a valid regular expression: {error}") from None
        return value


DEFAULT_NODE_RELABEL = Relabel(regex=r"(.*):[0-9]+", replacement="$1")
"""Strips a ``:port`` from ``instance``; a node name can never contain a colon, so this is always safe."""


class BearerToken(StrictModel):
    """A token sent as ``Authorization: Bearer``; the file is re-read every cycle so rotation just works."""

    bearer_token_file: str = Field(alias="bearerTokenFile")

    @model_validator(mode="before")
    @classmethod
    def _no_secret_reference(cls, data: Any) -> Any:
        """The upstream descheduler reads the token from a Secret; say what to write instead."""
        if isinstance(data, dict) and "secretReference" in data:
            raise ValueError(
                "secretReference is not supported: mount the Secret into the pod and set bearerTokenFile "
                "to the mounted file"
            )
        return data


class BasicAuth(StrictModel):
    username: str
    password_file: str = Field(alias="passwordFile")


class TLSSettings(StrictModel):
    ca_file: str | None = Field(default=None, alias="caFile")
    cert_file: str | None = Field(default=None, alias="certFile")
    key_file: str | None = Field(default=None, alias="keyFile")
    insecure_skip_verify: bool = Field(default=False, alias="insecureSkipVerify")

    @model_validator(mode="after")
    def _cert_and_key_together(self) -> TLSSettings:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("certFile and keyFile must be set together (a client certificate needs its key)")
        return self


class PrometheusSettings(StrictModel):
    url: str = DEFAULT_PROMETHEUS_URL
    auth_token: BearerToken | None = Field(default=None, alias="authToken")
    basic_auth: BasicAuth | None = Field(default=None, alias="basicAuth")
    tls: TLSSettings = Field(default_factory=TLSSettings)
    timeout: Annotated[Duration, positive("must be a positive duration such as 10s")] = 10.0
    """Per HTTP request (connect and read each); a cycle stops querying at the first transport failure."""
    window: Duration = 300.0
    """Usage is averaged over this window (Koordinator's NodeMetric default is 5m too)."""
    node_label: str = Field(default="instance", alias="nodeLabel")
    node_relabel: Relabel | None = Field(default=DEFAULT_NODE_RELABEL, alias="nodeRelabel")
    pod_node_label: str = Field(default="node", alias="podNodeLabel")
    """The label of the pod (cAdvisor) series holding the node name, as kube-prometheus' kubelet job sets it;
    pod queries match on it to fetch only the pods of the nodes that need them."""
    queries: PrometheusQueries = Field(default_factory=PrometheusQueries)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"must be an http:// or https:// URL, got {quoted(value)}")
        return value.rstrip("/")

    @field_validator("window")
    @classmethod
    def _whole_seconds_window(cls, value: float) -> float:
        if value < 1 or value != int(value):
            raise ValueError("must be a whole number of seconds, at least 1s (for example 5m)")
        return value

    @field_validator("node_label", "pod_node_label")
    @classmethod
    def _label_name(cls, value: str) -> str:
        if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", value):
            raise ValueError(f"not a Prometheus label name: {quoted(value)}")
        return value

    @model_validator(mode="after")
    def _one_auth(self) -> PrometheusSettings:
        if self.auth_token is not None and self.basic_auth is not None:
            raise ValueError("set either authToken or basicAuth, not both")
        return self


class MetricsProvider(StrictModel):
    """One entry of ``metricsProviders``: ``Prometheus`` or ``KubernetesMetrics`` (metrics-server)."""

    source: Literal["Prometheus", "KubernetesMetrics"]
    prometheus: PrometheusSettings | None = None
    """Settings for ``source: Prometheus``; omitted means the kube-prometheus defaults."""

    @model_validator(mode="after")
    def _settings_match_source(self) -> MetricsProvider:
        if self.source == "KubernetesMetrics" and self.prometheus is not None:
            raise ValueError("prometheus settings are only valid with source: Prometheus")
        return self

    @property
    def prometheus_settings(self) -> PrometheusSettings:
        return self.prometheus if self.prometheus is not None else PrometheusSettings()


def default_providers() -> list[MetricsProvider]:
    """Prometheus at :data:`DEFAULT_PROMETHEUS_URL` with kube-prometheus queries."""
    return [MetricsProvider(source="Prometheus", prometheus=PrometheusSettings())]


METRICS_SERVER_WINDOW = 0.0
"""metrics-server averages over its own resolution (15-60 s): treated as an instantaneous reading."""


def usage_window(providers: Sequence[MetricsProvider]) -> float:
    """Seconds a usage sample averages over: a pod that left this long ago is out of its node's sample."""
    chosen = list(providers) or default_providers()
    provider = chosen[0]
    if provider.source == "KubernetesMetrics":
        return METRICS_SERVER_WINDOW
    return float(provider.prometheus_settings.window)


def _at_most_one(providers: list[MetricsProvider]) -> list[MetricsProvider]:
    if len(providers) > 1:
        raise ValueError(
            f"only one metrics provider can be used, got {len(providers)}: mixing sources would mix memory "
            "measures (Prometheus excludes page cache, metrics-server does not)"
        )
    return providers


MetricsProviders = Annotated[list[MetricsProvider], AfterValidator(_at_most_one)]
"""The field type for ``metricsProviders``: empty means :func:`default_providers`."""


REDACTED = "***"


def redact_url(url: str) -> str:
    """``url`` with the password of its userinfo replaced by ``***`` (``validate`` prints URLs)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{user}:{REDACTED}@{host}"))


def redact_document(doc: dict[str, Any]) -> dict[str, Any]:
    """The effective-configuration document with every secret a user may write inline redacted.

    Only a URL's userinfo can hold one: tokens and passwords are read from files (``bearerTokenFile``,
    ``passwordFile``), whose paths are not secret."""
    for provider in doc.get("metricsProviders") or []:
        prometheus = provider.get("prometheus") if isinstance(provider, dict) else None
        if isinstance(prometheus, dict) and isinstance(prometheus.get("url"), str):
            prometheus["url"] = redact_url(prometheus["url"])
    return doc


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def credential_warnings(providers: Sequence[MetricsProvider]) -> list[str]:
    """Credentials that would cross the network in clear text: ``http://`` to a host other than loopback.

    A warning, not an error: inside a cluster a plain-HTTP Prometheus behind a NetworkPolicy is common,
    but whoever can see that traffic can reuse the credentials."""
    warnings: list[str] = []
    for i, provider in enumerate(providers):
        settings = provider.prometheus
        if provider.source != "Prometheus" or settings is None:
            continue
        parts = urlsplit(settings.url)
        if parts.scheme != "http" or _is_loopback(parts.hostname or ""):
            continue
        userinfo = parts.username is not None or parts.password is not None
        sent = [
            what
            for what, present in (
                ("the user and password in the URL", userinfo),
                ("basicAuth", settings.basic_auth is not None),
                ("authToken (a bearer token)", settings.auth_token is not None),
            )
            if present
        ]
        if sent:
            warnings.append(
                f"metricsProviders[{i}].prometheus: {' and '.join(sent)} will be sent in clear text over "
                f"plain http:// to {parts.hostname}; use https:// so they cannot be read or reused on the way"
            )
    return warnings
