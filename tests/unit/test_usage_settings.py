"""``metricsProviders`` configuration: kube-prometheus defaults, every option parsed, mistakes named."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from descheduler.config.providers import (
    DEFAULT_PROMETHEUS_URL,
    MetricsProvider,
    MetricsProviders,
    PrometheusSettings,
    default_providers,
)


def test_the_default_provider_is_kube_prometheus_with_a_five_minute_window() -> None:
    [provider] = default_providers()
    settings = provider.prometheus_settings
    assert provider.source == "Prometheus"
    assert settings.url == DEFAULT_PROMETHEUS_URL == "http://prometheus-k8s.monitoring.svc:9090"
    assert settings.window == 300.0
    assert settings.timeout == 10.0
    assert settings.node_label == "instance"
    assert settings.node_relabel is not None and settings.node_relabel.regex == "(.*):[0-9]+"
    assert 'container!="POD"' in settings.queries.pod_memory
    assert "container_memory_rss" in settings.queries.pod_memory


def test_a_prometheus_provider_without_settings_means_the_defaults() -> None:
    provider = MetricsProvider.model_validate({"source": "Prometheus"})
    assert provider.prometheus is None
    assert provider.prometheus_settings == PrometheusSettings()


def test_every_option_is_read_from_its_camel_case_key() -> None:
    provider = MetricsProvider.model_validate(
        {
            "source": "Prometheus",
            "prometheus": {
                "url": "https://prometheus.monitoring.svc:9091/",
                "basicAuth": {"username": "u", "passwordFile": "/etc/p"},
                "tls": {"caFile": "/ca", "certFile": "/c", "keyFile": "/k", "insecureSkipVerify": True},
                "timeout": "2.5s",
                "window": "10m",
                "nodeLabel": "node",
                "nodeRelabel": {"regex": "ip-(.*)", "replacement": "${1}.internal"},
                "queries": {"nodeCpu": "my_cpu", "podMemory": "my_pod_memory"},
            },
        }
    )
    settings = provider.prometheus_settings
    assert settings.url == "https://prometheus.monitoring.svc:9091"  # trailing slash dropped
    assert settings.basic_auth is not None and settings.basic_auth.password_file == "/etc/p"
    assert (settings.tls.ca_file, settings.tls.cert_file, settings.tls.key_file) == ("/ca", "/c", "/k")
    assert settings.tls.insecure_skip_verify is True
    assert (settings.timeout, settings.window, settings.node_label) == (2.5, 600.0, "node")
    assert settings.node_relabel is not None and settings.node_relabel.replacement == "${1}.internal"
    assert (settings.queries.node_cpu, settings.queries.pod_memory) == ("my_cpu", "my_pod_memory")
    assert "node_memory_MemAvailable_bytes" in settings.queries.node_memory  # not overridden: default


def test_durations_print_back_the_way_go_writes_them() -> None:
    settings = PrometheusSettings.model_validate({"timeout": "90s", "window": "5m"})
    dumped = settings.model_dump(by_alias=True)
    assert (dumped["timeout"], dumped["window"]) == ("1m30s", "5m0s")
    assert PrometheusSettings.model_validate(dumped) == settings


def test_a_bearer_token_file_is_accepted_and_secret_reference_gets_advice() -> None:
    settings = PrometheusSettings.model_validate({"authToken": {"bearerTokenFile": "/var/run/token"}})
    assert settings.auth_token is not None and settings.auth_token.bearer_token_file == "/var/run/token"
    with pytest.raises(ValidationError, match="mount the Secret into the pod and set bearerTokenFile"):
        PrometheusSettings.model_validate({"authToken": {"secretReference": {"namespace": "x", "name": "y"}}})


@pytest.mark.parametrize(
    ("prometheus", "message"),
    [
        ({"windw": "5m"}, "unknown field 'windw'; did you mean 'window'?"),
        ({"url": "prometheus:9090"}, "must be an http:// or https:// URL"),
        ({"timeout": "0s"}, "must be a positive duration"),
        ({"timeout": 10}, "duration must be written with a unit"),
        ({"window": "1500ms"}, "whole number of seconds"),
        ({"nodeLabel": "node-name"}, "not a Prometheus label name"),
        ({"nodeRelabel": {"regex": "(unclosed"}}, "not a valid regular expression"),
        ({"tls": {"certFile": "/c"}}, "certFile and keyFile must be set together"),
        ({"queries": {"podCpu": "  "}}, "a query must not be empty"),
        ({"queries": {"nodeCPU": "x"}}, "did you mean 'nodeCpu'?"),
        (
            {"authToken": {"bearerTokenFile": "/t"}, "basicAuth": {"username": "u", "passwordFile": "/p"}},
            "either authToken or basicAuth, not both",
        ),
    ],
)
def test_a_mistake_in_the_prometheus_settings_is_named(prometheus: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message.replace("(", r"\(").replace("?", r"\?")):
        MetricsProvider.model_validate({"source": "Prometheus", "prometheus": prometheus})


@pytest.mark.parametrize(
    ("provider", "message"),
    [
        ({"source": "prometheus"}, "'Prometheus' or 'KubernetesMetrics'"),
        ({"source": "KubernetesMetrics", "prometheus": {}}, "only valid with source: Prometheus"),
        ({}, "source"),
    ],
)
def test_a_provider_names_a_known_source_and_only_its_settings(
    provider: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        MetricsProvider.model_validate(provider)


def test_the_provider_list_allows_none_or_one_provider() -> None:
    adapter = TypeAdapter(MetricsProviders)
    assert adapter.validate_python([]) == []
    assert adapter.validate_python([{"source": "KubernetesMetrics"}])[0].source == "KubernetesMetrics"
    with pytest.raises(ValidationError, match="only one metrics provider can be used, got 2"):
        adapter.validate_python([{"source": "Prometheus"}, {"source": "KubernetesMetrics"}])
