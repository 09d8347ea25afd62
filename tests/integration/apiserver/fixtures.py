"""pytest fixtures for the test API server; ``tests/integration/conftest.py`` imports them."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from descheduler.kube.api import KubeApi
from descheduler.kube.connection import connect
from tests.integration.apiserver.server import ApiServer


@pytest.fixture
def apiserver(tmp_path: Path) -> Iterator[ApiServer]:
    """A running server on a random 127.0.0.1 port, with ``kubeconfig_path`` written for it."""
    server = ApiServer(bookmark_interval=0.5).start()
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


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    """A throwaway CA and a server certificate for 127.0.0.1: (ca.crt, server.crt, server.key)."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("openssl is not installed: cannot make a TLS certificate for the test API server")
    d = tmp_path_factory.mktemp("tls")
    ca_key, ca_crt = d / "ca.key", d / "ca.crt"
    key, csr, crt, ext = d / "server.key", d / "server.csr", d / "server.crt", d / "ext.cnf"
    ext.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
    )

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, timeout=60)

    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(ca_key),
        "-out",
        str(ca_crt),
        "-days",
        "2",
        "-subj",
        "/CN=test-apiserver-ca",
    )
    run(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(key),
        "-out",
        str(csr),
        "-subj",
        "/CN=127.0.0.1",
    )
    run(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca_crt),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-out",
        str(crt),
        "-days",
        "2",
        "-extfile",
        str(ext),
    )
    return str(ca_crt), str(crt), str(key)


@pytest.fixture
def tls_apiserver(tmp_path: Path, tls_files: tuple[str, str, str]) -> Iterator[ApiServer]:
    """Like ``apiserver`` but over HTTPS, CA in its kubeconfig (kubectl sends tokens only over TLS)."""
    ca, crt, key = tls_files
    server = ApiServer(tls=(crt, key), bookmark_interval=0.5).start()
    server.write_kubeconfig(tmp_path / "kubeconfig", ca_file=ca)
    try:
        yield server
    finally:
        server.stop()
    assert not server.errors, f"the test API server hit unexpected errors: {server.errors}"
