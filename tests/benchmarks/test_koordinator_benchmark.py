"""The pure parts of running Koordinator's descheduler beside ours (``benchmarks/koordinator.py``)."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from benchmarks import koordinator as k
from descheduler.config.load import load_config_document


def test_a_node_metric_reports_system_usage_and_each_pod_as_koordlet_does() -> None:
    pods = [k.PodUsage("b", "p2", 0.25, 2**20), k.PodUsage("a", "p1", 1.5, 3 * 2**30)]
    status = k.node_metric_status(0.3, 2**30, pods, datetime(2026, 11, 26, 12, 0, 1, 500, tzinfo=UTC))
    assert status["updateTime"] == "2026-11-26T12:00:01Z"
    assert status["nodeMetric"] == {"systemUsage": {"resources": {"cpu": "300m", "memory": str(2**30)}}}
    assert status["podsMetric"] == [
        {
            "namespace": "a",
            "name": "p1",
            "podUsage": {"resources": {"cpu": "1500m", "memory": str(3 * 2**30)}},
        },
        {"namespace": "b", "name": "p2", "podUsage": {"resources": {"cpu": "250m", "memory": str(2**20)}}},
    ]
    assert k.node_metric("n1", status)["metadata"] == {"name": "n1"}


@pytest.mark.parametrize("dry_run", [True, False])
def test_koordinators_config_is_the_guides_evicting_directly_outside_a_cluster(dry_run: bool) -> None:
    config = k.koord_config(
        Path("/tmp/kubeconfig"),
        dry_run=dry_run,
        interval="2s",
        health_port=1234,
        low_node_load={"anomalyCondition": {"consecutiveAbnormalities": 1}},
        migration={"maxMigratingPerNode": 3},
    )
    guide = k.guide_configuration()
    args = {pc["name"]: pc["args"] for pc in config["profiles"][0]["pluginConfig"]}
    assert config["clientConnection"]["kubeconfig"] == "/tmp/kubeconfig"
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["healthzBindAddress"] == "127.0.0.1:1234"
    assert config["deschedulingInterval"] == "2s" and config["dryRun"] is dry_run
    assert args["MigrationController"]["defaultJobMode"] == "EvictDirectly"
    assert args["MigrationController"]["maxMigratingPerNode"] == 3
    assert args["LowNodeLoad"]["anomalyCondition"] == {"consecutiveAbnormalities": 1}
    guide_args = {pc["name"]: pc["args"] for pc in guide["profiles"][0]["pluginConfig"]}
    assert args["LowNodeLoad"]["highThresholds"] == guide_args["LowNodeLoad"]["highThresholds"]
    # The same document is one our product accepts too: a team's ConfigMap works for both.
    load_config_document(config, "<koordinator>")


def test_a_checkout_at_another_commit_is_refused_before_building(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(
        ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
         "--allow-empty", "-m", "x"],
        check=True,
    )  # fmt: skip
    with pytest.raises(k.BuildError, match="checkout " + k.KOORD_COMMIT):
        k.build(tmp_path, cache=tmp_path / "cache")
    with pytest.raises(k.BuildError, match="not a git checkout"):
        k.build(tmp_path / "missing", cache=tmp_path / "cache")
