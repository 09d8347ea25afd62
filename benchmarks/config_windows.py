"""Does checking many eviction windows stay cheap? The overlap check, a whole ``validate`` and the
per-eviction ``window_state`` at growing numbers of windows.

Run from the repository root::

    python -m benchmarks.config_windows                       # 1,000, 2,000 and 10,080 windows
    python -m benchmarks.config_windows --sizes 100,1000 --runs 3

Every window is one minute long, all in one zone, spread over the week without touching (10,080 is
one per minute of the week, the most that fit): the case the overlap check has to compare the most.
``overlap_N`` times ``window_overlap`` alone on N windows (the loader refuses lists longer than
``MAX_EVICTION_WINDOWS``, so larger sizes are timed on the function directly); ``validate_M`` the
whole ``load_config_document`` at the limit M; ``state_M`` one ``window_state`` over M windows, which
the service asks before every eviction. ``growth`` is the fitted exponent of the overlap check's time
between the smallest and the largest size (1 is linear, 2 quadratic). Seconds per call, medians of
``--runs`` (each repeating the call for at least 20 ms).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable
from typing import Any

from benchmarks.common import median, summary_line, verdict
from descheduler.config import controls
from descheduler.config.controls import DAY_NAMES, MINUTES_PER_DAY, EvictionWindow, window_overlap
from descheduler.config.load import load_config_document
from descheduler.planner.controls import compile_windows, window_state

MAX_WINDOWS: int = getattr(controls, "MAX_EVICTION_WINDOWS", 1000)
WEEK = 7 * MINUTES_PER_DAY


def spread(count: int, zone: str = "Europe/Berlin") -> list[dict[str, Any]]:
    """``count`` one-minute windows spread evenly over the week, none touching another's minute."""
    out = []
    for i in range(count):
        minute = i * WEEK // count
        day, start = divmod(minute, MINUTES_PER_DAY)
        end = (start + 1) % MINUTES_PER_DAY
        out.append({
            "days": [DAY_NAMES[day]],
            "start": f"{start // 60:02d}:{start % 60:02d}",
            "end": f"{end // 60:02d}:{end % 60:02d}",
            "timeZone": zone,
        })  # fmt: skip
    return out


def config(windows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerConfiguration",
        "profiles": [
            {
                "name": "p",
                "plugins": {"balance": {"enabled": [{"name": "LowNodeLoad"}]}},
                "pluginConfig": [{"name": "MigrationController", "args": {"evictionWindows": windows}}],
            }
        ],
    }


def timed(work: Callable[[], object], runs: int) -> float:
    """Seconds per call, the median of ``runs``; each run repeats the call for at least 20 ms, so a small
    size is not lost in the clock's noise."""
    times = []
    for _ in range(runs):
        calls, began = 0, time.perf_counter()
        while True:
            work()
            calls += 1
            elapsed = time.perf_counter() - began
            if elapsed >= 0.02:
                break
        times.append(elapsed / calls)
    return median(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000,2000,10080", help="numbers of windows for the overlap check")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    figures: dict[str, str] = {}
    overlap: dict[int, float] = {}
    for size in sizes:
        models = [EvictionWindow.model_validate(w) for w in spread(size)]
        assert window_overlap(models) is None
        overlap[size] = timed(lambda models=models: window_overlap(models), args.runs)
        print(f"overlap check, {size:>6} windows: {overlap[size] * 1000:9.1f} ms")
        figures[f"overlap_{size}"] = f"{overlap[size]:.6f}s"
    limit = min(MAX_WINDOWS, max(sizes))
    doc = config(spread(limit))
    validate = timed(lambda: load_config_document(doc), args.runs)
    compiled = compile_windows(load_config_document(doc).migration)
    state = timed(lambda: window_state(compiled, time.time()), args.runs)
    print(f"whole validate, {limit:>6} windows: {validate * 1000:9.1f} ms")
    print(f"window_state,   {limit:>6} windows: {state * 1000:9.1f} ms (asked before each eviction)")
    small, large = sizes[0], sizes[-1]
    growth = math.log(overlap[large] / overlap[small]) / math.log(large / small) if large > small else 1.0
    print(f"growth of the overlap check {small} -> {large} windows: n^{growth:.2f} {verdict(growth < 1.5)}")
    print(f"validate at the limit under 2 s: {verdict(validate < 2.0)}")
    figures |= {
        f"validate_{limit}": f"{validate:.4f}s",
        f"state_{limit}": f"{state:.4f}s",
        "growth": f"{max(growth, 0.0):.2f}x",  # a summary figure is never negative
    }
    print(summary_line(figures))


if __name__ == "__main__":
    main()
