"""The real kube-scheduler judges our destination check (``judge.py``): on a CI-sized sample of seeded
shapes, no node where we say the pod fits may be one where the scheduler leaves it Pending."""

from __future__ import annotations

import pytest

from tests.controlplane import judge
from tests.controlplane.cluster import ControlPlane

pytestmark = pytest.mark.controlplane

SHAPES = 40
FEATURES = {
    "init", "sidecar", "overhead", "nodeSelector", "nodeAffinity", "tolerations", "podAntiAffinity",
    "topologySpread", "hostPort",
}  # fmt: skip
DRA_SHAPES = (1, 2, 5, 7, 8, 12, 14)
DRA_FEATURES = {
    "dra-template", "dra-shared", "dra-held", "dra-cel", "dra-firstAvailable", "dra-all", "dra-toleration",
    "dra-matchAttribute", "dra-distinctAttribute",
}  # fmt: skip
"""A few DRA shapes (``judge_dra.py``): the full run is ``benchmarks/scheduler_agreement.py --dra``."""


def test_no_node_we_say_fits_is_refused_by_the_real_scheduler(control_plane: ControlPlane) -> None:
    shapes = [judge.random_shape(seed, "ci") for seed in range(1, SHAPES + 1)]
    assert {f for s in shapes for f in s.features} == FEATURES  # the sample covers every kind of shape
    try:
        verdicts = judge.judge(control_plane, shapes)
    finally:
        judge.cleanup(control_plane, shapes)
    result = judge.table(verdicts)
    assert result["probes"] == sum(len(s.nodes) for s in shapes)
    assert result["both_fit"] > 0 and result["both_refuse"] > 0  # the sample judges both answers
    assert result["we_fit_scheduler_refuses_cases"] == []


def test_no_node_we_say_fits_a_device_pod_is_refused_by_the_real_scheduler(
    control_plane: ControlPlane,
) -> None:
    shapes = [judge.random_shape(seed, "cidra", dra=True) for seed in DRA_SHAPES]
    assert {f for s in shapes for f in s.features} >= DRA_FEATURES  # every kind of device shape
    try:
        verdicts = judge.judge(control_plane, shapes)
    finally:
        judge.cleanup(control_plane, shapes)
    result = judge.table(verdicts)
    assert result["both_fit"] > 0 and result["both_refuse_classes"].get("1 cannot allocate all claims")
    assert result["we_fit_scheduler_refuses_cases"] == []
