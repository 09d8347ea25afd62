"""The soak (``benchmarks/soak.py``) in short: 20 kwok nodes for under three minutes on a control plane of
its own (it kills kube-apiserver, etcd and kwok, which the session's shared one must not suffer), one fault
of each kind, bursts, a sustained step and churn. Fails on any safety violation, and on checks that did
not run: there must be evictions, cycles, a cache checkpoint, and every fault injected must be recovered.
"""

from __future__ import annotations

from pathlib import Path

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
    result.pop("_timeline")
    print("\n" + soak.summary(result))
    assert not any(result["violations"].values()), result["violations"]
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
