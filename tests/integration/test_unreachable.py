"""An API server that cannot be reached, as an operator meets it.

Connection refused, DNS failure, TLS failure and timeout are told apart in the message; ``once`` gives
up within 30 s with exit 1 and one line saying why. Every case runs against real sockets on 127.0.0.1
with no API server behind them (a silent listener is the one fault a real server cannot be made to
do); the cases with the real kube-apiserver are in ``tests/controlplane/test_unreachable.py``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import kubernetes.client
import pytest

from descheduler.kube.api import KubeApi
from descheduler.kube.errors import ApiConnectionError, ApiTimeoutError, KubeError
from tests.support.ports import free_port
from tests.support.prometheus import LocalHttpServer, canned_server
from tests.support.service import (
    Ports,
    run_command,
    service_config,
    write_config,
)

pytestmark = pytest.mark.integration

ONCE_GIVES_UP_WITHIN = 30.0


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP server that accepts connections and never answers: the request times out."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(2)
        for conn in accepted:
            conn.close()
        listener.close()


@pytest.fixture
def plain_http() -> Iterator[LocalHttpServer]:
    """A plain-HTTP server on 127.0.0.1: not an API server, and no TLS."""
    server = canned_server()
    try:
        yield server
    finally:
        server.close()


def api_for(url: str) -> KubeApi:
    configuration = kubernetes.client.Configuration(host=url)
    return KubeApi(configuration, qps=50, burst=50, connect_timeout=2.0, default_timeout=2.0)


def failure_of(url: str) -> KubeError:
    api = api_for(url)
    try:
        with pytest.raises(KubeError) as info:
            api.get("/api/v1/nodes", timeout=1.5)
    finally:
        api.close()
    return info.value


def test_a_refused_connection_is_called_refused_not_a_timeout() -> None:
    error = failure_of(f"http://127.0.0.1:{free_port()}")
    assert isinstance(error, ApiConnectionError) and error.cause == "refused"
    assert "connection refused" in str(error) and "timed out" not in str(error)
    assert error.sent is False


def test_a_host_that_does_not_resolve_is_called_a_dns_failure() -> None:
    error = failure_of("https://api.does-not-exist.invalid:6443")
    assert isinstance(error, ApiConnectionError) and error.cause == "dns"
    assert "DNS lookup failed" in str(error)


def test_talking_tls_to_a_plain_http_server_is_called_a_tls_failure(plain_http: LocalHttpServer) -> None:
    error = failure_of(plain_http.url.replace("http://", "https://"))
    assert isinstance(error, ApiConnectionError) and error.cause == "tls"
    assert "TLS failure" in str(error)


def test_a_server_that_accepts_but_never_answers_is_called_a_timeout(silent_server: str) -> None:
    started = time.monotonic()
    error = failure_of(silent_server)
    assert time.monotonic() - started < 5
    assert isinstance(error, ApiTimeoutError) and error.cause == "timeout"
    assert "no answer within 1.5s" in str(error)


# --- descheduler once ---------------------------------------------------------------------------------


def kubeconfig_for(path: Path, server: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "test-token"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path.write_text(json.dumps(config))
    return path


def run_once(
    workdir: Path, server: str, prometheus_url: str
) -> tuple[subprocess.CompletedProcess[str], float]:
    doc = service_config(prometheus_url=prometheus_url, ports=Ports.free(), consecutive_abnormalities=1)
    config = write_config(workdir / "config.yaml", doc)
    kubeconfig = kubeconfig_for(workdir / "kubeconfig", server)
    started = time.monotonic()
    done = run_command(
        "once", "--config", str(config), "--kubeconfig", str(kubeconfig), "--dry-run", timeout=90
    )
    return done, time.monotonic() - started


@pytest.mark.parametrize(
    ("server", "words"),
    [
        ("refused", "connection refused"),
        ("https://api.does-not-exist.invalid:6443", "DNS lookup failed"),
        ("silent", "no answer within"),
    ],
    ids=["refused", "dns", "timeout"],
)
def test_once_gives_up_on_an_unreachable_api_server_within_30s_saying_why(
    tmp_path: Path, silent_server: str, server: str, words: str
) -> None:
    url = {"refused": f"http://127.0.0.1:{free_port()}", "silent": silent_server}.get(server, server)
    done, elapsed = run_once(tmp_path, url, f"http://127.0.0.1:{free_port()}")
    assert done.returncode == 1, done.stderr
    assert elapsed < ONCE_GIVES_UP_WITHIN
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert (
        errors == [errors[0]] and f"cannot reach the API server at {url}" in errors[0] and words in errors[0]
    )
    assert "Traceback" not in done.stderr
    warnings = [line for line in done.stderr.splitlines() if '"level": "warning"' in line]
    assert len(warnings) <= 1, "one clear error, not a warning per retry"
