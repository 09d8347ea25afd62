"""Integration fixtures: the stand-in API server (plain and TLS) and our client pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from descheduler.kube.api import KubeApi
from descheduler.kube.connection import connect
from tests.apiserver.server import ApiServer


@pytest.fixture
def apiserver(tmp_path: Path) -> Iterator[ApiServer]:
    """A running server on a random 127.0.0.1 port, with ``kubeconfig_path`` written for it."""
    server = ApiServer().start()
    server.write_kubeconfig(tmp_path / "kubeconfig")
    try:
        yield server
    finally:
        server.stop()
    assert not server.errors, f"the test API server hit unexpected errors: {server.errors}"


@pytest.fixture
def kube_api(apiserver: ApiServer) -> Iterator[KubeApi]:
    """Our client, connected through the kubeconfig file (generous rate limit)."""
    assert apiserver.kubeconfig_path is not None
    api = connect(str(apiserver.kubeconfig_path), qps=1000, burst=1000)
    try:
        yield api
    finally:
        api.close()


TLS_DIR = Path(__file__).resolve().parents[1] / "apiserver" / "tls"


@pytest.fixture(scope="session")
def tls_files() -> tuple[str, str, str]:
    """A test-only CA and a server certificate for 127.0.0.1 (tests/apiserver/tls/README.md)."""
    return str(TLS_DIR / "ca.crt"), str(TLS_DIR / "server.crt"), str(TLS_DIR / "server.key")


@pytest.fixture
def tls_apiserver(tmp_path: Path, tls_files: tuple[str, str, str]) -> Iterator[ApiServer]:
    """Like ``apiserver`` but over HTTPS, CA in its kubeconfig (kubectl sends tokens only over TLS)."""
    ca, crt, key = tls_files
    server = ApiServer(tls=(crt, key)).start()
    server.write_kubeconfig(tmp_path / "kubeconfig", ca_file=ca)
    try:
        yield server
    finally:
        server.stop()
    assert not server.errors, f"the test API server hit unexpected errors: {server.errors}"
