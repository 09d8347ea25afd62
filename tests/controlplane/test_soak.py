"""The soak (``benchmarks/soak.py``) in short: 20 kwok nodes for under three minutes on a control plane of
its own (it kills kube-apiserver, etcd and kwok, which the session's shared one must not suffer), one fault
of each kind, bursts, a sustained step and churn. Fails on any safety violation, and on checks that did
not run: there must be evictions, cycles, a cache checkpoint, and every fault injected must be recovered.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from benchmarks import soak, soak_model
from benchmarks.peers import OURS_TAINT

pytestmark = pytest.mark.controlplane

PLAN = soak_model.Plan(
    seed=3, duration_s=160.0, nodes=20, interval_s=3.0, consecutive=5, warmup_s=20.0,
    step_every_s=40.0, step_s=(60.0, 90.0), burst_every_s=25.0, churn_every_s=15.0,
    checkpoint_every_s=80.0,
)  # fmt: skip


def test_a_short_soak_of_ours_breaks_no_safety_check_and_recovers_from_every_fault(tmp_path: Path) -> None:
    events = soak_model.make_schedule(PLAN)
    result = soak.run(OURS_TAINT, PLAN, events, tmp_path)
    timeline = result.pop("_timeline")
    print("\n" + soak.summary(result))
    assert not any(result["violations"].values()), (
        f"{result['violations']}\n{what_led_to(result, timeline, tmp_path)}"
    )
    assert result["faults_injected"] == len(soak_model.FAULTS) == result["faults_recovered"]
    assert result["measures"]["evictions"] > 0 and result["measures"]["steps_hot"] > 0
    assert result["cycles"] >= PLAN.duration_s / PLAN.interval_s / 2
    assert result["checkpoints"] and all(
        check["equal"]
        for point in result["checkpoints"]
        for check in point.values()
        if isinstance(check, dict)
    )
    assert result["pdb_samples"] > 100


def what_led_to(result: dict[str, Any], timeline: soak_model.Timeline, folder: Path) -> str:
    """For a failure to be read from CI's log alone: every eviction from a node an eviction violated on,
    that node's usage (calm and total, %) over the 40 s before each, our logs' lines naming the pod, and
    those naming the node or telling of leadership, state and usage (what the replicas believed)."""
    nodes = {v["node"] for found in result["violations"].values() for v in found if isinstance(v, dict)}
    logs = sorted(
        (
            f"{path.parent.name}: {line}"
            for path in folder.rglob("descheduler*.log")
            for line in path.read_text(errors="replace").splitlines()
        ),
        key=_stamp,
    )
    out = []
    for e in (e for e in result["evictions"] if e["node"] in nodes):
        calm = timeline.window(e["node"], e["t"] - 40, e["t"], calm=True)
        total = dict(timeline.window(e["node"], e["t"] - 40, e["t"]))
        out.append(f"eviction {e}")
        seen = " ".join(f"{t:.0f}:{v:.0f}/{total.get(t, float('nan')):.0f}" for t, v in calm)
        out.append(f"  usage % calm/total: {seen}")
        out += [f"  log: {line[:300]}" for line in logs if e["pod"] in line][:12]
    told = ("leadership_", "state_rebuilt", "usage_unknown", "usage_unavailable", "cycle_skipped")
    for node in sorted(nodes):
        out.append(f"lines naming {node} or telling of leadership, state and usage:")
        out += [f"  log: {line[:400]}" for line in logs if node in line or any(t in line for t in told)][-60:]
    return "\n".join(out)


def _stamp(line: str) -> str:
    """A log line's ISO timestamp (they sort as text), "" for a line without one."""
    found = re.search(r'"timestamp": "([^"]+)"', line)
    return found.group(1) if found else ""
