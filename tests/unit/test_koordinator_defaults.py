"""Koordinator's defaulting of 0 (``apis/config/v1alpha2/defaults.go``) holds for a ConfigMap written for it.

In Koordinator an anomaly count of 0 means "unset": at top level ``consecutiveAbnormalities: 0`` becomes 5,
in a node pool it becomes the top-level value. A team's ConfigMap with 0 must keep working here, and the
notices must say what 0 became.
"""

from __future__ import annotations

from typing import Any

import pytest

from descheduler.config.load import load_config_document
from descheduler.planner.settings import compile_settings
from tests.unit.test_config import config_with

Condition = dict[str, int]

CASES: list[tuple[str, Condition | None, list[Condition | None], list[int], list[str]]] = [
    # (case, top-level anomalyCondition, pools' anomalyCondition, expected count per pool, notices)
    ("top-level 0 becomes Koordinator's 5", {"consecutiveAbnormalities": 0}, [], [5], ["0 read as 5"]),
    ("an unset condition is 5", None, [], [5], []),
    ("a top-level 2 is kept", {"consecutiveAbnormalities": 2}, [], [2], []),
    (
        "a pool's 0 takes the top-level value",
        {"consecutiveAbnormalities": 3},
        [{"consecutiveAbnormalities": 0}],
        [3],
        ["nodePools[0].anomalyCondition.consecutiveAbnormalities: 0 read as 3"],
    ),
    (
        "a pool's 0 under a top-level 0 takes 5",
        {"consecutiveAbnormalities": 0},
        [{"consecutiveAbnormalities": 0}],
        [5],
        ["anomalyCondition.consecutiveAbnormalities: 0 read as 5", "nodePools[0]"],
    ),
    ("a pool without a condition inherits", {"consecutiveAbnormalities": 4}, [None], [4], []),
    (
        "each pool on its own",
        {"consecutiveAbnormalities": 4},
        [{"consecutiveAbnormalities": 1}, {"consecutiveAbnormalities": 0}],
        [1, 4],
        ["nodePools[1].anomalyCondition.consecutiveAbnormalities: 0 read as 4"],
    ),
]


def pools_config(top: Condition | None, pools: list[Condition | None]) -> dict[str, Any]:
    lnl: dict[str, Any] = {}
    if top is not None:
        lnl["anomalyCondition"] = top
    if pools:
        lnl["nodePools"] = [
            {"name": f"pool-{i}", "nodeSelector": {"matchLabels": {"pool": str(i)}}}
            | ({"anomalyCondition": condition} if condition is not None else {})
            for i, condition in enumerate(pools)
        ]
    return config_with(lnl=lnl)


@pytest.mark.parametrize(
    ("case", "top", "pools", "expected", "notices"), CASES, ids=[case for case, *_ in CASES]
)
def test_zero_anomaly_counts_are_read_as_koordinator_defaults_them(
    case: str, top: Condition | None, pools: list[Condition | None], expected: list[int], notices: list[str]
) -> None:
    effective = load_config_document(pools_config(top, pools))
    settings = compile_settings(effective)
    assert [pool.consecutive_abnormalities for pool in settings.pools] == expected
    said = [n for n in effective.notices if "0 read as" in n]
    assert len(said) == len(notices)
    for fragment in notices:
        assert any(fragment in notice for notice in said), (fragment, said)


def test_a_negative_count_is_still_an_error_naming_the_field() -> None:
    with pytest.raises(Exception, match=r"anomalyCondition\.consecutiveAbnormalities"):
        load_config_document(config_with(lnl={"anomalyCondition": {"consecutiveAbnormalities": -1}}))
