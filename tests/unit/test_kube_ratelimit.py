"""The client-side token bucket, on a fake clock."""

from __future__ import annotations

import pytest

from descheduler.kube.ratelimit import TokenBucket


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def bucket(qps: float, burst: int) -> tuple[TokenBucket, FakeTime]:
    t = FakeTime()
    return TokenBucket(qps, burst, clock=t.clock, sleep=t.sleep), t


def test_a_full_bucket_serves_its_burst_without_waiting() -> None:
    b, t = bucket(2, 3)
    assert all(b.acquire() for _ in range(3))
    assert t.slept == []


def test_after_the_burst_requests_are_spaced_at_one_over_qps() -> None:
    b, t = bucket(4, 1)
    for _ in range(4):
        b.acquire()
    assert t.slept == pytest.approx([0.25, 0.25, 0.25])


def test_idle_time_refills_up_to_the_burst_only() -> None:
    b, t = bucket(10, 2)
    b.acquire()
    b.acquire()
    t.now += 60
    assert b.delay() == 0
    b.acquire()
    b.acquire()
    assert t.slept == []
    assert b.delay() == pytest.approx(0.1)


def test_a_wait_past_the_deadline_is_refused_and_takes_no_token() -> None:
    b, t = bucket(1, 1)
    b.acquire()
    assert b.acquire(deadline=t.now + 0.5) is False
    assert t.slept == []
    assert b.acquire(deadline=t.now + 1.0) is True
    assert t.slept == pytest.approx([1.0])


@pytest.mark.parametrize("qps", [0, -1])
def test_zero_or_negative_qps_means_unlimited(qps: float) -> None:
    b, t = bucket(qps, 1)
    assert all(b.acquire(deadline=t.now) for _ in range(100))
    assert b.unlimited and t.slept == []


def test_burst_below_one_is_rejected() -> None:
    with pytest.raises(ValueError, match="burst"):
        TokenBucket(1, 0)
