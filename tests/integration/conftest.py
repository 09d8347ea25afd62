"""Integration fixtures: the stand-in API server and our client pointed at it."""

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
