"""Auth and TLS options against a real Prometheus configured with its own ``--web.config.file``.

One Prometheus demands TLS, a client certificate signed by the test CA, and basic auth all at once, so
each case proves exactly one option is needed. Prometheus has no bearer-token check of its own; a small
reverse proxy in front of a second, plain Prometheus plays kube-rbac-proxy's part for that option.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from descheduler.cluster.types import Node, UsageSnapshot
from descheduler.config.providers import PrometheusSettings
from descheduler.usage.prometheus import PrometheusSource
from tests.support.prometheus import (
    TEST_PASSWORD,
    TEST_USER,
    LocalHttpServer,
    Pki,
    PrometheusServer,
    Series,
    bearer_proxy,
    make_pki,
    node_exporter,
    running_prometheus,
    sample_times,
    tls_web_config,
)

pytestmark = pytest.mark.integration

Gi = 2**30
T = 1_700_000_000.0
NODE = Node(name="node-a", labels={}, allocatable={"cpu": 4000, "memory": 16 * Gi})


def _series() -> list[Series]:
    times = sample_times(T - 900 + 7.5, T - 7.5)
    return node_exporter(
        "node-a", times, cpus=2, mode_rates={"user": 0.25, "idle": 0.75}, mem_total=8 * Gi,
        mem_available=5 * Gi, mem_free=1 * Gi, cached=4 * Gi,
    )  # fmt: skip


@dataclass(frozen=True)
class Secured:
    prometheus: PrometheusServer
    pki: Pki
    password_file: Path
    wrong_password_file: Path


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    workdir = tmp_path_factory.mktemp("prometheus-tls")
    pki = make_pki(workdir / "pki")
    ready = ssl.create_default_context(cafile=str(pki.ca_cert))
    ready.load_cert_chain(str(pki.client_cert), str(pki.client_key))
    web = tls_web_config(pki, basic_auth=True, require_client_cert=True)
    (workdir / "password").write_text(TEST_PASSWORD + "\n")
    (workdir / "wrong").write_text("not-the-password\n")
    with running_prometheus(_series(), workdir / "server", web_config=web, ready_context=ready) as server:
        yield Secured(server, pki, workdir / "password", workdir / "wrong")


@dataclass(frozen=True)
class Proxied:
    proxy: LocalHttpServer
    token_file: Path


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    workdir = tmp_path_factory.mktemp("prometheus-bearer")
    token_file = workdir / "token"
    token_file.write_text("first-token\n")
    with running_prometheus(_series(), workdir / "server") as server:
        proxy = bearer_proxy(server.url, token_file)
        try:
            yield Proxied(proxy, token_file)
        finally:
            proxy.close()


def _fetch(settings: dict[str, Any]) -> UsageSnapshot:
    source = PrometheusSource(PrometheusSettings.model_validate(settings), clock=lambda: T)
    try:
        return source.fetch([NODE], [])
    finally:
        source.close()


def _assert_measured(snapshot: UsageSnapshot) -> None:
    assert snapshot.node_errors == {}
    assert snapshot.nodes["node-a"].resources == {"cpu": 500, "memory": 3 * Gi}


def _tls_settings(secured: Secured, case: str) -> dict[str, Any]:
    pki = secured.pki
    client = {"certFile": str(pki.client_cert), "keyFile": str(pki.client_key)}
    basic = {"username": TEST_USER, "passwordFile": str(secured.password_file)}
    cases: dict[str, dict[str, Any]] = {
        "ca-client-cert-basic-auth": {"tls": {"caFile": str(pki.ca_cert), **client}, "basicAuth": basic},
        "insecure-skip-verify": {"tls": {"insecureSkipVerify": True, **client}, "basicAuth": basic},
        "system-trust-only": {"tls": client, "basicAuth": basic},
        "wrong-ca": {"tls": {"caFile": str(pki.other_ca_cert), **client}, "basicAuth": basic},
        "no-client-cert": {"tls": {"caFile": str(pki.ca_cert)}, "basicAuth": basic},
        "wrong-password": {
            "tls": {"caFile": str(pki.ca_cert), **client},
            "basicAuth": {**basic, "passwordFile": str(secured.wrong_password_file)},
        },
        "no-basic-auth": {"tls": {"caFile": str(pki.ca_cert), **client}},
        "password-file-missing": {
            "tls": {"caFile": str(pki.ca_cert), **client},
            "basicAuth": {**basic, "passwordFile": str(secured.password_file) + ".missing"},
        },
    }
    return {"url": secured.prometheus.url, "timeout": "5s", **cases[case]}


@pytest.mark.parametrize("case", ["ca-client-cert-basic-auth", "insecure-skip-verify"])
def test_tls_with_client_certificate_and_basic_auth_reads_usage(secured: Secured, case: str) -> None:
    _assert_measured(_fetch(_tls_settings(secured, case)))


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("system-trust-only", "prometheus TLS error: [SSL: CERTIFICATE_VERIFY_FAILED]"),
        ("wrong-ca", "prometheus TLS error: [SSL: CERTIFICATE_VERIFY_FAILED]"),
        ("no-client-cert", "prometheus TLS error: "),  # the alert name depends on the TLS version
        ("wrong-password", "prometheus rejected the credentials: HTTP 401: Unauthorized"),
        ("no-basic-auth", "prometheus rejected the credentials: HTTP 401: Unauthorized"),
        ("password-file-missing", "cannot read basic auth password file"),
    ],
)
def test_a_missing_or_wrong_credential_skips_the_node_with_a_reason(
    secured: Secured, case: str, reason: str
) -> None:
    snapshot = _fetch(_tls_settings(secured, case))
    assert snapshot.nodes == {}
    assert reason in snapshot.node_errors["node-a"]


def test_a_bearer_token_from_its_file_is_sent_and_re_read_after_rotation(proxied: Proxied) -> None:
    proxied.token_file.write_text("first-token\n")
    source = PrometheusSource(
        PrometheusSettings.model_validate(
            {"url": proxied.proxy.url, "authToken": {"bearerTokenFile": str(proxied.token_file)}}
        ),
        clock=lambda: T,
    )
    try:
        _assert_measured(source.fetch([NODE], []))
        proxied.token_file.write_text("rotated-token\n")  # the proxy now wants only the new token
        _assert_measured(source.fetch([NODE], []))
    finally:
        source.close()


@pytest.mark.parametrize(
    ("token_file", "reason"),
    [
        ("wrong", "prometheus rejected the credentials: HTTP 401: Unauthorized"),
        ("missing", "cannot read bearer token file"),
        ("empty", "is empty"),
        (None, "prometheus rejected the credentials: HTTP 401: Unauthorized"),
    ],
)
def test_a_wrong_or_missing_bearer_token_skips_the_node_with_a_reason(
    proxied: Proxied, tmp_path: Path, token_file: str | None, reason: str
) -> None:
    (tmp_path / "wrong").write_text("guessed-token")
    (tmp_path / "empty").write_text("\n")
    settings: dict[str, Any] = {"url": proxied.proxy.url}
    if token_file is not None:
        settings["authToken"] = {"bearerTokenFile": str(tmp_path / token_file)}
    snapshot = _fetch(settings)
    assert snapshot.nodes == {}
    assert reason in snapshot.node_errors["node-a"]
