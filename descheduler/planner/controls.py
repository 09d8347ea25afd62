"""When live evictions may happen (``evictionWindows``) and how many (``churnBudget``), as pure functions
of the configuration, the recorded migrations and the clock.

Windows are weekly, in wall-clock time of an IANA zone (``zoneinfo`` decides DST). A window is open only
while the zone's clock reads a time inside it, never longer: where a change of the clock makes a
boundary ambiguous, the reading that opens later or closes sooner wins. A start or an end the clock skips
(the spring gap) is the moment of the jump; an end the clock reads twice (the repeated autumn hour) is
its first occurrence, a start its second (its first, if the window would close before that: a window
inside the repeated hour). A window across the change is as long in real time as the clock says:
01:00-05:00 lasts 3 hours on the spring night and 5 on the autumn one; 22:00-02:30 closes at the jump
(03:00 on the new clock) in spring; 02:00-02:30 does not open on the spring night.

The budget counts every ``Migration`` in the state (whatever its kind: an eviction today, a restart if
one is ever recorded) that started less than ``period`` ago, or whose outcome is still unknown (counted as
now). The migrations come from the journal after a restart or takeover, so a crash loop cannot reset it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from descheduler.config.controls import parse_clock, parse_days
from descheduler.config.migration import MigrationControllerArgs
from descheduler.planner.state import Migration
from descheduler.units import format_duration


@dataclass(frozen=True, slots=True)
class Window:
    """One configured window: on each of ``days`` (0 is Monday), local ``start`` to ``end`` (minutes after
    midnight; an end at or before the start is on the next day)."""

    days: frozenset[int]
    start: int
    end: int
    zone: str
    label: str = ""
    """As written (``Mon,Tue 22:00-06:00 Europe/Berlin``), for messages."""

    def instances(self, now: float) -> Iterable[tuple[float, float]]:
        """(opens, closes) in seconds since the epoch of every instance starting from the day before
        ``now``'s local date to a week after it: enough to hold ``now`` and the next opening."""
        zone = ZoneInfo(self.zone)
        today = datetime.fromtimestamp(now, zone).date()
        crosses = self.end <= self.start
        for offset in range(-1, 9):
            day = today + timedelta(days=offset)
            if day.weekday() not in self.days:
                continue
            first_open, last_open = _readings(day, self.start, zone)
            closes, _ = _readings(day + timedelta(days=1) if crosses else day, self.end, zone)
            opens = last_open if last_open < closes else first_open
            if closes > opens:  # both ends in the skipped hour: the clock never reads the window
                yield opens, closes


def _readings(day: date, minute: int, zone: ZoneInfo) -> tuple[float, float]:
    """The first and the last instant the clock of ``zone`` reads ``minute`` on ``day``: equal on most
    days, an hour apart in the repeated hour, both the jump's instant for a time in the skipped hour."""
    local = datetime.combine(day, time(minute // 60, minute % 60))
    earlier = local.replace(tzinfo=zone, fold=0).timestamp()
    later = local.replace(tzinfo=zone, fold=1).timestamp()
    if earlier > later:  # skipped: fold 0 reads it with the old offset (after the jump), fold 1 before
        jump = _jump(later, earlier, zone)
        return jump, jump
    return earlier, later


def _jump(before: float, after: float, zone: ZoneInfo) -> float:
    """The instant between ``before`` and ``after`` at which ``zone``'s offset changes: transitions are on
    whole seconds, found by bisection (about 13 steps over an hour's gap)."""
    target = datetime.fromtimestamp(after, zone).utcoffset()
    low, high = math.floor(before), math.ceil(after)
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone).utcoffset() == target:
            high = middle
        else:
            low = middle
    return float(high)


@dataclass(frozen=True, slots=True)
class WindowState:
    """Whether live evictions may happen at ``now`` and when that changes."""

    open: bool = True
    configured: bool = False
    """False: no ``evictionWindows``, evictions may happen at any time."""
    next_open: float | None = None
    """The next instance's opening after ``now`` (None without windows)."""
    closes: float | None = None
    """While open: when the open instance (the latest-closing one if several touch) closes."""
    window: str = ""
    """The window that is open, or the one that opens next."""

    def message(self) -> str:
        """Why nothing is evicted now (empty while open)."""
        if self.open:
            return ""
        when = iso(self.next_open) if self.next_open is not None else "never"
        return f"outside evictionWindows: the next window ({self.window}) opens at {when}"

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"open": self.open}
        if self.next_open is not None:
            out["nextOpen"] = iso(self.next_open)
        if self.closes is not None:
            out["closes"] = iso(self.closes)
        if self.window:
            out["window"] = self.window
        return out


ALWAYS = WindowState()


def window_state(windows: Sequence[Window], now: float) -> WindowState:
    """Open when some window's instance holds ``now`` (opening included, closing excluded)."""
    if not windows:
        return ALWAYS
    open_until: tuple[float, str] | None = None
    upcoming: tuple[float, str] | None = None
    for window in windows:
        for opens, closes in window.instances(now):
            if opens <= now < closes:
                if open_until is None or closes > open_until[0]:
                    open_until = (closes, window.label)
            elif opens > now and (upcoming is None or opens < upcoming[0]):
                upcoming = (opens, window.label)
    next_open = upcoming[0] if upcoming is not None else None
    if open_until is not None:
        return WindowState(True, True, next_open, open_until[0], open_until[1])
    return WindowState(False, True, next_open, None, upcoming[1] if upcoming is not None else "")


def compile_windows(mc: MigrationControllerArgs) -> tuple[Window, ...]:
    return tuple(
        Window(parse_days(w.days), parse_clock(w.start), parse_clock(w.end), w.time_zone, w.describe())
        for w in mc.eviction_windows or ()
    )


# --- the churn budget ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Budget:
    """``churnBudget`` compiled: None is no limit at that scope."""

    period: float
    max_total: int | None
    max_per_namespace: int | None


def compile_budget(mc: MigrationControllerArgs) -> Budget | None:
    b = mc.churn_budget
    if b is None:
        return None
    return Budget(b.period, b.max_evictions, b.max_evictions_per_namespace)


class Spending:
    """The evictions inside the budget's period, cluster-wide and per namespace, as sorted start times;
    this cycle's own are added as they are planned (``add``)."""

    def __init__(self, budget: Budget, migrations: Iterable[Migration], now: float) -> None:
        self.budget = budget
        self.now = now
        self.total: list[float] = []
        self.namespaces: dict[str, list[float]] = {}
        for m in migrations:
            if m.in_window(budget.period, now):
                self.add(m.namespace, now if m.unresolved else m.started)

    def add(self, namespace: str, at: float) -> None:
        bisect.insort(self.total, at)
        bisect.insort(self.namespaces.setdefault(namespace, []), at)

    def _left(self, times: Sequence[float], limit: int | None) -> tuple[int | None, float | None]:
        """What is left under ``limit`` and, when nothing is, when one eviction more is allowed again."""
        if limit is None:
            return None, None
        left = limit - len(times)
        if left > 0:
            return left, None
        if limit == 0:
            return 0, None  # a budget of 0 never returns
        return 0, times[len(times) - limit] + self.budget.period

    def left_total(self) -> tuple[int | None, float | None]:
        return self._left(self.total, self.budget.max_total)

    def left_in(self, namespace: str) -> tuple[int | None, float | None]:
        return self._left(self.namespaces.get(namespace, ()), self.budget.max_per_namespace)

    def spent_message(self, namespace: str | None) -> str:
        """``budget-spent``'s text: what was spent, the limit, and when budget returns."""
        period = _period(self.budget.period)
        if namespace is None:
            spent, limit, (_, back) = len(self.total), self.budget.max_total, self.left_total()
            what = (
                f"{spent} eviction(s) in the last {period} cluster-wide, churnBudget.maxEvictions is {limit}"
            )
        else:
            spent = len(self.namespaces.get(namespace, ()))
            limit, (_, back) = self.budget.max_per_namespace, self.left_in(namespace)
            what = (
                f"{spent} eviction(s) in namespace {namespace} in the last {period}, "
                f"churnBudget.maxEvictionsPerNamespace is {limit}"
            )
        return f"{what}; budget returns {'at ' + iso(back) if back is not None else 'never (the limit is 0)'}"


@dataclass(frozen=True)
class BudgetState:
    """What is left of the churn budget (for metrics and the cycle record)."""

    period: float
    left: int | None
    """Cluster-wide (None: no cluster-wide limit)."""
    returns: float | None
    """When the cluster-wide budget, spent, allows one more eviction."""
    namespaces: Mapping[str, tuple[int, float | None]] = field(default_factory=dict)
    """Per namespace with evictions inside the period (with a per-namespace limit): left, returns."""

    def describe(self) -> str:
        """One line for the text record: ``Churn budget over 24h0m0s: 3 left cluster-wide; namespace web:
        0 left (returns at ...)``."""
        parts = []
        if self.left is not None:
            parts.append(f"{self.left} left cluster-wide" + _back(self.returns))
        parts += [
            f"namespace {ns}: {left} left{_back(back)}"
            for ns, (left, back) in sorted(self.namespaces.items())
        ]
        return f"Churn budget over {_period(self.period)}: " + ("; ".join(parts) or "nothing spent")

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"period": _period(self.period)}
        if self.left is not None:
            out["left"] = self.left
        if self.returns is not None:
            out["returns"] = iso(self.returns)
        if self.namespaces:
            out["namespaces"] = {
                ns: {"left": left, **({"returns": iso(back)} if back is not None else {})}
                for ns, (left, back) in sorted(self.namespaces.items())
            }
        return out


def budget_state(budget: Budget, migrations: Iterable[Migration], now: float) -> BudgetState:
    spending = Spending(budget, migrations, now)
    left, returns = spending.left_total()
    namespaces: dict[str, tuple[int, float | None]] = {}
    if budget.max_per_namespace is not None:
        for ns in spending.namespaces:
            ns_left, back = spending.left_in(ns)
            namespaces[ns] = (ns_left or 0, back)
    return BudgetState(budget.period, left, returns, namespaces)


def _back(returns: float | None) -> str:
    return f" (returns at {iso(returns)})" if returns is not None else ""


def _period(seconds: float) -> str:
    return format_duration(seconds)


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
