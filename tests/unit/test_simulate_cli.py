"""``descheduler simulate`` as users run it: the seed scenario, the bundled example, the contract."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SEED = REPO / "tests" / "scenarios" / "seed-stress-demo"
EXAMPLE = REPO / "config" / "examples" / "hotspot"


def simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "descheduler", "simulate", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def scenario_args(folder: Path, cycles: int, output: str) -> list[str]:
    return [
        "--config", str(folder / "config.yaml"),
        "--cluster", str(folder / "cluster.yaml"),
        "--usage", str(folder / "usage.yaml"),
        "--cycles", str(cycles),
        "--output", output,
    ]  # fmt: skip


def contract(document: dict[str, Any]) -> list[dict[str, Any]]:
    """The keys users script against: per cycle, the evictions' pod, node and reason."""
    return [
        {
            "cycle": c["cycle"],
            "evictions": [{k: e[k] for k in ("pod", "node", "reason")} for e in c["evictions"]],
        }
        for c in document["cycles"]
    ]


def test_the_seed_scenario_evicts_the_stress_pod_at_the_fifth_consecutive_cycle() -> None:
    expected = json.loads((SEED / "expected.json").read_text())
    done = simulate(*scenario_args(SEED, 6, "json"))
    assert done.returncode == 0, done.stderr
    assert contract(json.loads(done.stdout)) == contract(expected)


def test_the_bundled_example_prints_exactly_the_output_shown_in_the_readme() -> None:
    done = simulate(*scenario_args(EXAMPLE, 6, "text"))
    assert done.returncode == 0, done.stderr
    assert done.stdout == (EXAMPLE / "expected-output.txt").read_text()


def test_the_bundled_example_is_what_its_generator_writes(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(EXAMPLE / "generate.py"), str(tmp_path)], check=True, timeout=60)
    for name in ("cluster.yaml", "usage.yaml"):
        assert (tmp_path / name).read_text() == (EXAMPLE / name).read_text(), name


def test_the_bundled_example_is_a_few_hundred_pods_on_a_realistic_cluster() -> None:
    text = (EXAMPLE / "cluster.yaml").read_text()
    kinds = [line.removeprefix("kind: ") for line in text.splitlines() if line.startswith("kind: ")]
    assert 200 <= kinds.count("Pod") <= 400
    assert 10 <= kinds.count("Node") <= 20
    assert {"Deployment", "StatefulSet", "DaemonSet", "PodDisruptionBudget", "ReplicaSet"} <= set(kinds)


DAEMONSET_SKIP = {
    "pod": "monitoring/node-exporter-0",
    "node": "cn-beijing.10.0.0.53",
    "code": "filtered-daemonset",
    "message": "owned by DaemonSet node-exporter: it runs on every node",
    "pass": "load",
}


@pytest.mark.parametrize(
    ("explain", "form", "skips", "summaries"),
    [
        # The hotspot is cured by its one eviction: its DaemonSet pod is counted, not listed...
        (
            [],
            "summarised",
            [],
            [
                {
                    **{k: v for k, v in DAEMONSET_SKIP.items() if k != "pod"},
                    "count": 1,
                    "examples": ["monitoring/node-exporter-0"],
                    "stop": "no-longer-over",
                }
            ],
        ),
        # ...unless every pod is asked for.
        (["--explain", "all"], "detailed", [DAEMONSET_SKIP], None),
    ],
    ids=["summary", "all"],
)
def test_json_output_carries_node_classes_usage_and_skips_beside_the_contract(
    explain: list[str], form: str, skips: list[dict[str, Any]], summaries: list[dict[str, Any]] | None
) -> None:
    done = simulate(*scenario_args(SEED, 5, "json"), *explain)
    cycle = json.loads(done.stdout)["cycles"][4]
    assert cycle["time"] == "2026-01-01T00:09:00Z"  # one 5m metrics window after the pods, then 4 intervals
    hot = next(n for n in cycle["nodes"] if n["node"] == "cn-beijing.10.0.0.53")
    assert (hot["class"], hot["anomalyCount"]) == ("hotspot", 5)
    assert cycle["evictions"][0]["destination"] == "cn-beijing.10.0.0.215"
    assert cycle["skipForm"] == form
    assert cycle["skips"] == skips
    assert cycle.get("skipSummaries") == summaries


def test_text_output_has_a_node_table_evictions_and_skips_per_cycle() -> None:
    done = simulate(*scenario_args(SEED, 5, "text"))
    assert done.returncode == 0
    cycle5 = done.stdout.split("Cycle 5")[1]
    assert "cn-beijing.10.0.0.53   default  hotspot  5/5      68.53 (20-50)" in cycle5
    assert "node is overutilized, node cpu usage(68.53%)>threshold(50.00%)" in cycle5
    assert "filtered-daemonset" in cycle5
    assert done.stdout.endswith("5 cycle(s), 1 eviction(s)\n")


def test_help_explains_the_command_with_an_example() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "descheduler", "simulate", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0
    assert "--reschedule" in done.stdout
    assert "descheduler simulate --config config/examples/hotspot/config.yaml" in done.stdout


@pytest.mark.parametrize("cycles", ["0", "-1", "two"])
def test_a_bad_cycle_count_is_a_usage_error(cycles: str) -> None:
    args = scenario_args(SEED, 1, "json")
    args[args.index("--cycles") + 1] = cycles
    done = simulate(*args)
    assert done.returncode == 2
    assert "--cycles" in done.stderr
    assert "Traceback" not in done.stderr
