"""``evictionWindows`` and ``churnBudget``: when live evictions may happen and how many per period.

Both are optional (default: always, unlimited). The model keeps what the operator wrote (so the effective
configuration prints back as given); ``parse_days`` and ``parse_clock`` are the one reading of it, used
by the checks here and by the planner's settings. Overlap is judged per time zone on the weekly grid of
wall-clock minutes, which is what the operator reads; windows in different zones are not compared.
"""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Sequence
from typing import Annotated

from pydantic import Field, field_validator, model_validator

from descheduler.config.base import FieldProblem, StrictModel, quoted
from descheduler.config.types import Duration, NonNegativeInt, at_least, checked

DAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_FULL_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
MINUTES_PER_DAY = 24 * 60
MINUTES_PER_WEEK = 7 * MINUTES_PER_DAY
MAX_EVICTION_WINDOWS = 1000
"""More than any schedule needs (168 is one window per hour of the week): each is judged before every
eviction, and a list of 10,000 is a generator's mistake."""


def parse_day(text: str) -> int:
    """``Mon``/``monday`` (any case) -> 0 (Monday) .. 6 (Sunday), as ``date.weekday()``."""
    lowered = text.strip().lower()
    for i, name in enumerate(_FULL_NAMES):
        if lowered in (name, name[:3]):
            return i
    raise ValueError(f"unknown day {quoted(text)}; use Mon, Tue, Wed, Thu, Fri, Sat, Sun (or the full names)")


def parse_days(days: Sequence[str]) -> frozenset[int]:
    return frozenset(parse_day(day) for day in days)


def parse_clock(text: str) -> int:
    """``HH:MM`` (24-hour clock, 00:00 to 23:59) -> minutes after midnight."""
    hours, sep, minutes = text.strip().partition(":")
    if (
        not sep
        or not (hours.isdigit() and minutes.isdigit())
        or len(minutes) != 2
        or not 1 <= len(hours) <= 2
        or int(hours) > 23
        or int(minutes) > 59
    ):
        raise ValueError(f"expected a time of day as HH:MM (00:00 to 23:59), got {quoted(text)}")
    return int(hours) * 60 + int(minutes)


_ZONE_NAME = re.compile(r"[A-Za-z0-9_.+-]{1,30}(/[A-Za-z0-9_.+-]{1,30}){0,3}")
"""An IANA zone name's shape (at most 14 characters a part by the database's own rule; 30 allowed): a
directory (``Europe``), a path too long for the file system, or any other file of the database is found
by ``ZoneInfo`` as an ``OSError`` or a ``ValueError``, both answered here."""


def zone_problem(name: str) -> str | None:
    """Why ``name`` is not an IANA time zone this runtime knows, or None."""
    if _ZONE_NAME.fullmatch(name):
        try:
            zoneinfo.ZoneInfo(name)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
            pass
        else:
            return None
    return f"unknown time zone {quoted(name)}; use an IANA name such as 'Europe/Berlin' or 'UTC'"


class EvictionWindow(StrictModel):
    """Live evictions may happen from ``start`` to ``end`` (local time in ``timeZone``) on each of
    ``days``; an ``end`` at or before ``start`` ends the next day (the window crosses midnight)."""

    days: list[str]
    start: str
    end: str
    time_zone: Annotated[str, checked(zone_problem)] = Field(default="UTC", alias="timeZone")

    @field_validator("days")
    @classmethod
    def _days(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("no day given: this window never opens")
        parse_days(value)
        return value

    @field_validator("start", "end")
    @classmethod
    def _clock(cls, value: str) -> str:
        parse_clock(value)
        return value

    @model_validator(mode="after")
    def _opens(self) -> EvictionWindow:
        if parse_clock(self.start) == parse_clock(self.end):
            raise FieldProblem("end", f"end equals start ({self.start}): this window never opens")
        return self

    def weekly_spans(self) -> list[tuple[int, int]]:
        """The window on the weekly grid of local minutes (Monday 00:00 is 0), split at the week's end."""
        start, end = parse_clock(self.start), parse_clock(self.end)
        length = (end - start) % MINUTES_PER_DAY
        spans: list[tuple[int, int]] = []
        for day in sorted(parse_days(self.days)):
            begin = day * MINUTES_PER_DAY + start
            finish = begin + length
            if finish <= MINUTES_PER_WEEK:
                spans.append((begin, finish))
            else:
                spans += [(begin, MINUTES_PER_WEEK), (0, finish - MINUTES_PER_WEEK)]
        return spans

    def describe(self) -> str:
        return f"{','.join(self.days)} {self.start}-{self.end} {self.time_zone}"


def _grid_clock(minute: int) -> str:
    day, rest = divmod(minute % MINUTES_PER_WEEK, MINUTES_PER_DAY)
    return f"{DAY_NAMES[day]} {rest // 60:02d}:{rest % 60:02d}"


def window_overlap(windows: Sequence[EvictionWindow]) -> FieldProblem | None:
    """Two windows of the same time zone that overlap, named by their indexes (the overlap that starts
    first on the weekly grid), or None.

    Sort and sweep, O(n log n) in the spans (at most 8 a window): spans sorted by start overlap an earlier
    one exactly when a span starts before the furthest end seen so far in its zone."""
    spans = sorted(
        (window.time_zone, begin, end, index)
        for index, window in enumerate(windows)
        for begin, end in window.weekly_spans()
    )
    furthest: tuple[str, int, int, int] | None = None  # the span of the zone reaching furthest so far
    for span in spans:
        zone, begin, end, index = span
        if furthest is not None and furthest[0] == zone and begin < furthest[2]:
            first, later = sorted((furthest[3], index))
            return FieldProblem(
                f"evictionWindows[{later}]",
                f"overlaps evictionWindows[{first}] ({windows[first].describe()}) from "
                f"{_grid_clock(begin)} to {_grid_clock(min(end, furthest[2]))}: merge them into one",
            )
        if furthest is None or furthest[0] != zone or end > furthest[2]:
            furthest = span
    return None


class ChurnBudget(StrictModel):
    """At most ``maxEvictions`` evictions cluster-wide, and ``maxEvictionsPerNamespace`` per namespace, in
    any ``period`` (rolling). Every recorded migration counts, whatever moved the pod."""

    max_evictions: NonNegativeInt | None = Field(default=None, alias="maxEvictions")
    max_evictions_per_namespace: NonNegativeInt | None = Field(default=None, alias="maxEvictionsPerNamespace")
    period: Annotated[Duration, at_least(1, "a budget needs a period to count over")] = 24 * 3600.0

    @model_validator(mode="after")
    def _some_limit(self) -> ChurnBudget:
        if self.max_evictions is None and self.max_evictions_per_namespace is None:
            raise ValueError("set maxEvictions, maxEvictionsPerNamespace or both")
        return self
