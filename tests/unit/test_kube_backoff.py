"""The reflector's backoff: exponential, capped, jittered, reset only by a watch that stayed healthy."""

from __future__ import annotations

import pytest

from descheduler.kube.cache import Backoff


def middle() -> float:
    """A random source at the middle of its range: no jitter."""
    return 0.5


@pytest.mark.parametrize(
    ("events", "delays"),
    [
        (["fail"] * 6, [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]),
        (["fail", "fail", "ran 1", "fail"], [0.5, 1.0, 2.0]),
        (["fail", "fail", "ran 10", "fail"], [0.5, 1.0, 0.5]),
        (["fail", "ran 60", "ran 1", "fail", "fail"], [0.5, 0.5, 1.0]),
    ],
    ids=["doubles-up-to-the-cap", "a-short-watch-does-not-reset", "a-healthy-watch-resets", "reset-once"],
)
def test_the_backoff_sequence(events: list[str], delays: list[float]) -> None:
    backoff = Backoff(0.5, 4.0, healthy_after=10.0, rand=middle)
    got = []
    for event in events:
        if event == "fail":
            got.append(backoff.failed())
        else:
            backoff.ran(float(event.split()[1]))
    assert got == delays


@pytest.mark.parametrize(("rand", "delay"), [(0.0, 0.8), (1.0, 1.2)])
def test_jitter_spreads_each_delay_by_twenty_percent(rand: float, delay: float) -> None:
    assert Backoff(1.0, 4.0, 10.0, rand=lambda: rand).failed() == pytest.approx(delay)
