"""Token-bucket rate limiting, like client-go's ``flowcontrol`` limiter (qps refill, burst capacity)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    """Thread-safe token bucket. ``qps <= 0`` means unlimited.

    A caller that has to wait reserves its token first (the bucket may go negative), so waiters are served
    in arrival order and the long-run rate never exceeds ``qps``.
    """

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if burst < 1:
            raise ValueError(f"burst must be at least 1, got {burst}")
        self.qps = float(qps)
        self.burst = int(burst)
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    @property
    def unlimited(self) -> bool:
        return self.qps <= 0

    def _refill(self, now: float) -> None:
        elapsed = max(0.0, now - self._last)
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)
        self._last = now

    def delay(self) -> float:
        """How long a request made now would wait (without taking a token)."""
        if self.unlimited:
            return 0.0
        with self._lock:
            self._refill(self._clock())
            return 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.qps

    def acquire(self, deadline: float | None = None) -> bool:
        """Take a token, sleeping as needed. False (and nothing taken) if that would pass ``deadline``."""
        if self.unlimited:
            return True
        with self._lock:
            now = self._clock()
            self._refill(now)
            wait = 0.0 if self._tokens >= 1 else (1 - self._tokens) / self.qps
            if deadline is not None and now + wait > deadline:
                return False
            self._tokens -= 1
        if wait > 0:
            self._sleep(wait)
        return True
