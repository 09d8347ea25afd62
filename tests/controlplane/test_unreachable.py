"""The real kube-apiserver as an operator meets it when something is wrong around it: a certificate the
client does not trust, credentials it rejects, and a Prometheus that is down.

A TLS failure is told apart from the other causes and is not retried; a rejected token is named as such
(the real server answers 401); ``once`` exits 3 when no node had usable usage, so a CronJob notices a
Prometheus outage. The cases that need no server at all, or a server that never answers (a fault the
real server cannot be made to do), are in ``tests/integration/test_unreachable.py``.
"""

from __future__ import annotations

import time
from pathlib import Path

import kubernetes.client
import pytest

from descheduler.kube.api import KubeApi
from descheduler.kube.connection import connect, unreachable_reason
from descheduler.kube.errors import ApiConnectionError, KubeError
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane, write_kubeconfig
from tests.support.ports import free_port
from tests.support.service import (
    Ports,
    run_command,
    service_config,
    write_config,
)

pytestmark = pytest.mark.controlplane


def untrusting_api(plane: ControlPlane) -> KubeApi:
    """Our client for the real server without its CA: the server's certificate cannot be verified."""
    configuration = kubernetes.client.Configuration(host=plane.server)
    return KubeApi(configuration, qps=50, burst=50, connect_timeout=2.0, default_timeout=2.0)


def test_a_server_whose_certificate_is_not_trusted_is_called_a_tls_failure(
    control_plane: ControlPlane,
) -> None:
    api = untrusting_api(control_plane)
    try:
        with pytest.raises(KubeError) as info:
            api.get("/api/v1/nodes", timeout=1.5)
    finally:
        api.close()
    error = info.value
    assert isinstance(error, ApiConnectionError) and error.cause == "tls"
    assert "TLS failure" in str(error)
    assert error.sent is False


def test_the_reachability_check_passes_for_a_server_that_answers_and_names_rejected_credentials(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    wrong_path = write_kubeconfig(
        tmp_path / "wrong", control_plane.server, control_plane.pki.ca_crt, {"token": "nope"}
    )
    good = connect(str(control_plane.kubeconfig), qps=10, burst=10)
    wrong = connect(str(wrong_path), qps=10, burst=10)
    try:
        assert unreachable_reason(good, budget=5) is None
        assert unreachable_reason(wrong, budget=5) == (
            "GET /version: HTTP 401 Unauthorized: the server rejects these credentials"
        )
    finally:
        good.close()
        wrong.close()


def test_the_reachability_check_gives_up_on_a_tls_failure_without_retrying(
    control_plane: ControlPlane,
) -> None:
    api = untrusting_api(control_plane)
    started = time.monotonic()
    try:
        reason = unreachable_reason(api, budget=10)
    finally:
        api.close()
    assert reason is not None and "TLS failure" in reason
    assert time.monotonic() - started < 3


def test_once_exits_3_when_no_node_has_usable_usage_because_prometheus_is_down(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    down = [f"{namespace}-down-1", f"{namespace}-down-2"]
    control_plane.add_nodes(namespace, down)
    doc = service_config(
        prometheus_url=f"http://127.0.0.1:{free_port()}",  # nothing listens there
        ports=Ports.free(),
        consecutive_abnormalities=1,
        node_selector={"matchLabels": {objects.GROUP_LABEL: namespace}},
    )
    config = write_config(tmp_path / "config.yaml", doc)
    done = run_command(
        "once", "--config", str(config), "--kubeconfig", str(control_plane.kubeconfig), "--dry-run",
        timeout=90,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert "error: no node had a usable usage sample, so nothing was judged (exit 3)" in done.stderr
    assert all(node in done.stdout for node in down) and "usage-error" in done.stdout
    assert "Traceback" not in done.stderr
