"""Small helpers the benchmark scripts share: memory readings, medians, the summary line."""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence

SUMMARY_PREFIX = "SUMMARY"
_TOKEN = re.compile(r"^([a-z][a-z0-9_]*)=(-?[0-9]+(?:\.[0-9]+)?)(s|MiB|x|%)?$")


def proc_status_kib(field: str) -> int:
    """A ``/proc/self/status`` field in KiB (``VmHWM`` is the peak RSS, ``VmRSS`` the current one)."""
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def quiet_logs() -> None:
    """Keep the product's info logs (one per LIST, eviction, cycle) out of the figures; warnings stay."""
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def summary_line(figures: Mapping[str, str]) -> str:
    """``SUMMARY key=value ...``: one line a script prints last; values carry their unit (s, MiB, x, %)."""
    for key, value in figures.items():
        if not _TOKEN.match(f"{key}={value}"):
            raise ValueError(f"summary figure {key}={value!r} is not NAME=NUMBER[UNIT]")
    return " ".join([SUMMARY_PREFIX, *(f"{k}={v}" for k, v in figures.items())])


def parse_summary(line: str) -> dict[str, tuple[float, str]]:
    """The figures of a summary line as ``{name: (number, unit)}``; raises ``ValueError`` if malformed."""
    parts = line.split()
    if not parts or parts[0] != SUMMARY_PREFIX:
        raise ValueError(f"not a summary line: {line!r}")
    out: dict[str, tuple[float, str]] = {}
    for token in parts[1:]:
        match = _TOKEN.match(token)
        if match is None:
            raise ValueError(f"malformed summary figure {token!r}")
        out[match.group(1)] = (float(match.group(2)), match.group(3) or "")
    if not out:
        raise ValueError("summary line has no figures")
    return out


def verdict(ok: bool) -> str:
    return "MET" if ok else "MISSED"
