"""Bounded polling for conditions that become true asynchronously (watches, elections)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(check: Callable[[], T], *, timeout: float = 5.0, interval: float = 0.02, what: str = "") -> T:
    """Poll ``check`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: T = check()
    while not last:
        if time.monotonic() >= deadline:
            raise AssertionError(
                f"timed out after {timeout}s waiting for {what or check!r}; last value {last!r}"
            )
        time.sleep(interval)
        last = check()
    return last
