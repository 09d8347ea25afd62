"""What every usage source distrusts: NaN, infinite, negative, absurd amounts and future sample times."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from descheduler.cluster.types import UsageSample
from descheduler.usage.samples import (
    ABSURD_FACTOR,
    CLOCK_SKEW_S,
    amount_problem,
    build_sample,
    join_reasons,
    time_problem,
    trusted_sample,
)

ALLOCATABLE = {"cpu": 2000, "memory": 8 * 2**30}


@pytest.mark.parametrize(
    ("resource", "amount", "problem"),
    [
        ("cpu", 1500.0, None),
        ("cpu", 8000.0, None),  # exactly 4x allocatable is still believable
        ("cpu", 8001.0, "absurd cpu: 8001m is more than 4x allocatable 2000m"),
        ("memory", float("nan"), "NaN memory"),
        ("cpu", float("inf"), "infinite cpu"),
        ("memory", -1.0, "negative memory (-1 bytes)"),
        (
            "memory",
            33 * 2**30,
            "absurd memory: 35433480192 bytes is more than 4x allocatable 8589934592 bytes",
        ),
        ("ephemeral-storage", 10.0**15, None),  # no allocatable to compare with: only sign and finiteness
    ],
)
def test_an_amount_is_trusted_unless_it_is_not_a_plausible_measurement(
    resource: str, amount: float, problem: str | None
) -> None:
    assert amount_problem(resource, amount, ALLOCATABLE) == problem


@pytest.mark.parametrize(
    ("timestamp", "problem"),
    [
        (999.0, None),
        (1060.0, None),  # within the allowed clock skew
        (1061.0, "sample time is 61s in the future"),
        (0.0, "bad sample time 0.0"),
        (float("nan"), "bad sample time nan"),
    ],
)
def test_a_sample_time_in_the_future_or_invalid_is_distrusted(timestamp: float, problem: str | None) -> None:
    assert time_problem(timestamp, now=1000.0) == problem


def test_a_trusted_sample_has_whole_numbers_and_keeps_its_time() -> None:
    sample = build_sample({"cpu": 1234.6, "memory": 1e9}, 990.5, allocatable=ALLOCATABLE, now=1000.0)
    assert sample == UsageSample(resources={"cpu": 1235, "memory": 1_000_000_000}, timestamp=990.5)


def test_every_problem_of_a_sample_is_listed() -> None:
    problems = build_sample(
        {"cpu": -5.0, "memory": float("nan")}, 5000.0, allocatable=ALLOCATABLE, now=1000.0
    )
    assert problems == ["negative cpu (-5m)", "NaN memory", "sample time is 4000s in the future"]


def test_reasons_are_joined_once_each_in_order() -> None:
    assert join_reasons(["b", "a", "b", "c", "a"]) == "b; a; c"


_EDGES = [0.0, -0.0, -1.0, float("nan"), float("inf"), float("-inf"), 2.0**53 + 1]
_AMOUNTS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(_EDGES))
_LIMITS = st.sampled_from([0, 1, 2000, 8 * 2**30])


@given(
    cpu=_AMOUNTS,
    memory=_AMOUNTS,
    timestamp=st.one_of(st.floats(), st.sampled_from([1000.0 + CLOCK_SKEW_S, 1000.0 + CLOCK_SKEW_S + 1e-9])),
    cpu_limit=_LIMITS,
    memory_limit=_LIMITS,
)
def test_the_shortcut_builds_what_build_sample_builds_and_leaves_every_problem_to_it(
    cpu: float, memory: float, timestamp: float, cpu_limit: int, memory_limit: int
) -> None:
    allocatable = {"cpu": cpu_limit, "memory": memory_limit}
    full = build_sample({"cpu": cpu, "memory": memory}, timestamp, allocatable=allocatable, now=1000.0)
    quick = trusted_sample(cpu, memory, timestamp, allocatable=allocatable, now=1000.0)
    if isinstance(full, UsageSample):
        assert quick == full
        assert list(quick.resources) == list(full.resources)
    else:
        assert quick is None


@pytest.mark.parametrize(
    ("cpu", "memory", "timestamp"),
    [
        (ABSURD_FACTOR * 2000 + 1, 1.0, 999.0),  # absurd cpu
        (1.0, ABSURD_FACTOR * 8 * 2**30 + 1, 999.0),  # absurd memory
        (float("nan"), 1.0, 999.0),
        (1.0, float("inf"), 999.0),
        (-1.0, 1.0, 999.0),
        (1.0, 1.0, 1000.0 + CLOCK_SKEW_S + 1),  # from the future
        (1.0, 1.0, 0.0),
    ],
)
def test_the_shortcut_answers_nothing_for_a_sample_with_a_problem(
    cpu: float, memory: float, timestamp: float
) -> None:
    assert trusted_sample(cpu, memory, timestamp, allocatable=ALLOCATABLE, now=1000.0) is None
    assert not isinstance(
        build_sample({"cpu": cpu, "memory": memory}, timestamp, allocatable=ALLOCATABLE, now=1000.0),
        UsageSample,
    )
