"""What users of the Kubernetes descheduler expect of ``run``, on the real API server: ``--dry-run`` over the
configuration, logged at start; ``--log-level``; the kubeconfig order of kubectl; the conventional metric
names, ``process_*`` metrics and a leader gauge reading 1 when leader election is off."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from descheduler.kube.connection import connect
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.loop import fresh_namespace
from tests.support.ports import free_port
from tests.support.service import (
    REPO,
    Descheduler,
    Ports,
    descheduler_command,
    metric_samples,
    service_config,
    subprocess_env,
    write_config,
)

pytestmark = pytest.mark.controlplane


def start_run(workdir: Path, kubeconfig: Path, doc: dict[str, Any], *flags: str) -> Descheduler:
    workdir.mkdir(parents=True, exist_ok=True)
    config = write_config(workdir / "config.yaml", doc)
    err = (workdir / "run.stderr").open("wb")
    out = (workdir / "run.stdout").open("wb")
    process = subprocess.Popen(
        descheduler_command("run", "--config", str(config), "--kubeconfig", str(kubeconfig), *flags),
        cwd=REPO,
        env=subprocess_env(),
        stdout=out,
        stderr=err,
        stdin=subprocess.DEVNULL,
    )
    ports = Ports(
        int(doc["healthzBindAddress"].rsplit(":", 1)[1]), int(doc["metricsBindAddress"].rsplit(":", 1)[1])
    )
    return Descheduler(
        process, workdir / "run.stderr", workdir / "run.stdout", ports, "run", _closed=[err, out]
    )


def _wait_alive(proc: Descheduler) -> None:
    """/healthz answers 200: the process serves (/readyz may still say why it is not ready)."""
    proc.wait_for(lambda: proc.get("/healthz")[0] == 200, timeout=30, what="/healthz to answer 200")


def live_config(group: str) -> dict[str, Any]:
    """A configuration that evicts for real (dryRun false), without leader election, over ``group``'s
    nodes, with a Prometheus that is down."""
    doc = service_config(
        prometheus_url=f"http://127.0.0.1:{free_port()}",
        ports=Ports.free(),
        node_selector={"matchLabels": {objects.GROUP_LABEL: group}},
    )
    doc["dryRun"] = False
    doc["leaderElection"]["leaderElect"] = False
    return doc


@pytest.fixture(scope="module")
def group(control_plane: ControlPlane) -> Iterator[str]:
    """A namespace and one node of its own, shared by the module's processes."""
    name = fresh_namespace(control_plane, f"conventions-{time.monotonic_ns() % 100000}")
    control_plane.add_nodes(name, [f"{name}-1"])
    try:
        yield name
    finally:
        control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)
        control_plane.kubectl("delete", "nodes", "-l", f"{objects.GROUP_LABEL}={name}", "--wait=false")


@pytest.fixture(scope="module")
def started(
    control_plane: ControlPlane, group: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Descheduler]:
    workdir = tmp_path_factory.mktemp("conventions")
    proc = start_run(
        workdir, control_plane.kubeconfig, live_config(group), "--dry-run", "--log-level", "info"
    )
    try:
        _wait_alive(proc)  # not ready: Prometheus is down, and /readyz says so
        proc.wait_for(lambda: proc.events("cycle_summary"), timeout=30, what="a first cycle")
        yield proc
    finally:
        proc.terminate()
        proc.cleanup()


def test_the_dry_run_flag_overrides_a_live_configuration_and_says_so_at_start(started: Descheduler) -> None:
    (starting,) = started.events("starting")
    assert starting["dry_run"] is True and starting["dry_run_from"] == "--dry-run flag"
    assert all(s["dry_run"] is True for s in started.events("cycle_summary"))
    assert metric_samples(started.get("/metrics")[1], "descheduler_dry_run") == [({}, 1.0)]


def test_metrics_carry_the_conventional_names_process_metrics_and_a_leader_gauge_of_1_without_election(
    started: Descheduler,
) -> None:
    metrics = started.get("/metrics")[1]
    assert metric_samples(metrics, "descheduler_leader") == [({}, 1.0)]
    assert metric_samples(metrics, "descheduler_loop_duration_seconds_count")[0][1] >= 1
    assert metric_samples(metrics, "process_resident_memory_bytes")[0][1] > 0
    assert metric_samples(metrics, "descheduler_pods_evicted_total") == []  # nothing evicted, nothing shown
    assert metric_samples(metrics, "descheduler_usage_unavailable") == [({}, 1.0)]  # Prometheus is down


def test_a_cycle_without_any_usable_usage_logs_a_warning_every_cycle(started: Descheduler) -> None:
    started.wait_for(lambda: len(started.events("usage_unavailable")) >= 2, timeout=20, what="two warnings")
    warnings = started.events("usage_unavailable")
    assert all(w["level"] == "warning" and w["nodes"] == 1 for w in warnings)
    assert [w["cycle"] for w in warnings[:2]] == [1, 2]


def test_readyz_says_the_usage_source_is_down(started: Descheduler) -> None:
    # Before the cache syncs /readyz is 503 for that reason; once a cycle ran it must name the usage source.
    status, body = started.wait_for(
        lambda: "cache not synced" not in (answer := started.get("/readyz"))[1] and answer,
        timeout=10,
        what="/readyz past the cache sync",
    )
    assert status == 503 and "usage source unavailable in the last cycle" in body, body
    assert started.get("/healthz")[0] == 200, "alive all the same: a restart would not help"


def test_log_level_warning_keeps_info_lines_out(
    control_plane: ControlPlane, group: str, tmp_path: Path
) -> None:
    proc = start_run(tmp_path, control_plane.kubeconfig, live_config(group), "--log-level", "warning")
    try:
        _wait_alive(proc)
        proc.wait_for(lambda: proc.events("usage_unavailable"), timeout=30, what="a warning")
    finally:
        proc.terminate()
        proc.cleanup()
    levels = {r["level"] for r in proc.records()}
    assert "info" not in levels and "warning" in levels


# --- kubeconfig order: --kubeconfig, $KUBECONFIG, ~/.kube/config, in-cluster ------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "home"
    (folder / ".kube").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(folder))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return folder


def host_of(kubeconfig: str | None) -> str:
    api = connect(kubeconfig, qps=10, burst=10)
    try:
        return api.host
    finally:
        api.close()


def write_kubeconfig(path: Path, server: str) -> str:
    path.write_text(
        '{"apiVersion": "v1", "kind": "Config", "current-context": "c",'
        f' "clusters": [{{"name": "c", "cluster": {{"server": "{server}"}}}}],'
        ' "users": [{"name": "u", "user": {"token": "t"}}],'
        ' "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}'
    )
    return str(path)


def test_kubeconfig_is_found_in_kubectls_order(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No server is reached: only which file wins is the question (kept with its file's other tests)."""
    write_kubeconfig(home / ".kube" / "config", "http://home.example:1")
    env = write_kubeconfig(tmp_path / "env", "http://env.example:2")
    flag = write_kubeconfig(tmp_path / "flag", "http://flag.example:3")
    assert host_of(None) == "http://home.example:1"
    monkeypatch.setenv("KUBECONFIG", env)
    assert host_of(None) == "http://env.example:2"
    assert host_of(flag) == "http://flag.example:3"
