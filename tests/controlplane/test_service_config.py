"""An invalid configuration stops ``descheduler run`` before it touches the cluster: exit code 2 and the
field path on stderr (what ``kubectl logs`` of a crash-looping pod shows), never a traceback.

The kubeconfig points at the real kube-apiserver through a relay that counts connections
(``tests/controlplane/counting.py``): no connection, no request. The valid base configuration, run the
same way, does connect, so the count can fail."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.counting import counting_kubeconfig
from tests.support.service import (
    MANIFESTS,
    Ports,
    run_command,
    service_config,
    write_config,
)

pytestmark = pytest.mark.controlplane


def _valid() -> dict[str, Any]:
    return service_config(prometheus_url="http://127.0.0.1:9", ports=Ports(10258, 10259))


def _lnl_args(doc: dict[str, Any]) -> dict[str, Any]:
    args: dict[str, Any] = doc["profiles"][0]["pluginConfig"][0]["args"]
    return args


def _set(**fields: Any) -> Any:
    return lambda doc: doc.update(fields)


CASES = [
    (
        "a negative interval",
        _set(deschedulingInterval="-1s"),
        "deschedulingInterval: must be a positive duration",
    ),
    (
        "a misspelt threshold field",
        lambda doc: _lnl_args(doc).update(highThreshold={"cpu": 50}),
        "profiles[0].pluginConfig[0].args.highThreshold: unknown field 'highThreshold'; "
        "did you mean 'highThresholds'?",
    ),
    (
        "leader election timings in the wrong order",
        lambda doc: doc["leaderElection"].update(leaseDuration="1s", renewDeadline="2s"),
        "leaderElection: need leaseDuration > renewDeadline > retryPeriod > 0",
    ),
    (
        "a Prometheus URL that is not http",
        lambda doc: doc["metricsProviders"][0]["prometheus"].update(url="ftp://prometheus"),
        "metricsProviders[0].prometheus.url: must be an http:// or https:// URL",
    ),
    (
        "a bind address without a port",
        _set(healthzBindAddress="localhost"),
        "healthzBindAddress: expected HOST:PORT",
    ),
    ("a node selector that does not parse", _set(nodeSelector="pool in (a"), "nodeSelector: 'pool in (a'"),
    (
        "a low threshold above the high one",
        lambda doc: _lnl_args(doc).update(lowThresholds={"cpu": 80}),
        "lowThresholds.cpu (80) is above highThresholds.cpu (70)",
    ),
    (
        "a negative grace period in the delete options",
        lambda doc: _mc_args(doc).update(defaultDeleteOptions={"gracePeriodSeconds": -5}),
        "defaultDeleteOptions: gracePeriodSeconds must be between 0 and 31622400 (a year), got -5",
    ),
    (
        "two metrics providers",
        lambda doc: doc["metricsProviders"].append(doc["metricsProviders"][0]),
        "metricsProviders: only one metrics provider can be used, got 2",
    ),
    (
        "a watch timeout over an hour",
        _set(watchCache={"watchTimeout": "2h", "maxStaleness": "10s"}),
        "watchTimeout (7200s) must be between 1s and 3600s",
    ),
]


def _mc_args(doc: dict[str, Any]) -> dict[str, Any]:
    args: dict[str, Any] = doc["profiles"][0]["pluginConfig"][1]["args"]
    return args


def _run(config: Path, kubeconfig: Path, command: str = "run") -> subprocess.CompletedProcess[str]:
    arguments = (
        [str(config)] if command == "validate" else ["--config", str(config), "--kubeconfig", str(kubeconfig)]
    )
    return run_command(command, *arguments, timeout=30)


@pytest.mark.parametrize("command", ["run", "once", "validate"])
@pytest.mark.parametrize(("mutate", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_an_invalid_configuration_exits_2_naming_the_field_without_touching_the_cluster(
    mutate: Any, message: str, command: str, control_plane: ControlPlane, tmp_path: Path
) -> None:
    """``validate``, ``run`` and ``once`` share one validation path: what one rejects, all reject."""
    doc = _valid()
    mutate(doc)
    config = write_config(tmp_path / "config.yaml", doc)
    with counting_kubeconfig(control_plane, tmp_path / "kubeconfig") as relay:
        result = _run(config, tmp_path / "kubeconfig", command)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert result.stderr.startswith("error: invalid configuration in ")
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert relay.connections == 0, "an invalid configuration must not reach the cluster"


def test_the_shipped_configmap_with_a_broken_value_names_the_path_inside_the_configmap(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    shipped = (MANIFESTS / "base" / "config.yaml").read_text()
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "load-aware-descheduler-config"},
        "data": {"config.yaml": shipped.replace("deschedulingInterval: 60s", "deschedulingInterval: soon")},
    }
    config = tmp_path / "configmap.yaml"
    config.write_text(yaml.safe_dump(configmap))
    with counting_kubeconfig(control_plane, tmp_path / "kubeconfig") as relay:
        result = _run(config, tmp_path / "kubeconfig")
    assert result.returncode == 2
    assert "data.config.yaml.deschedulingInterval: 'soon' is not a duration" in result.stderr
    assert "Traceback" not in result.stderr
    assert relay.connections == 0


def test_the_valid_base_configuration_of_these_cases_is_accepted_and_reaches_the_cluster(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """The cases above fail because of their one change, not because the base is broken; and a command
    that does go to the cluster is counted by the relay, so the zero counts above mean something."""
    config = write_config(tmp_path / "config.yaml", _valid())
    result = _run(config, tmp_path / "kubeconfig", "validate")
    assert result.returncode == 0, result.stderr
    doc = _valid()
    doc["nodeSelector"] = {"matchLabels": {objects.GROUP_LABEL: namespace}}  # the test's (no) nodes
    once = write_config(tmp_path / "once.yaml", doc)
    with counting_kubeconfig(control_plane, tmp_path / "kubeconfig") as relay:
        done = run_command(
            "once", "--config", str(once), "--kubeconfig", str(tmp_path / "kubeconfig"), "--dry-run",
            timeout=60,
        )  # fmt: skip
    assert "Traceback" not in done.stderr
    assert relay.connections > 0, done.stderr


def test_run_with_its_health_port_taken_exits_1_naming_the_address(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        doc = service_config(prometheus_url="http://127.0.0.1:9", ports=Ports(port, port))
        result = _run(write_config(tmp_path / "config.yaml", doc), control_plane.kubeconfig)
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_run_without_a_reachable_kubeconfig_exits_1_with_one_line(tmp_path: Path) -> None:
    config = write_config(tmp_path / "config.yaml", _valid())
    result = _run(config, tmp_path / "missing-kubeconfig")
    assert result.returncode == 1
    assert f"error: kubeconfig {tmp_path / 'missing-kubeconfig'}: file not found" in result.stderr
    assert "Traceback" not in result.stderr
