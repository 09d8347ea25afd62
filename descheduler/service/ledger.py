"""The migration journal as the runner uses it: rebuild at start-up and takeover, write ahead, confirm.

The rules are ``planner/journal.py``'s (pure); this module holds what they need across cycles: what the
journal holds as far as we know, whether a rebuild is due, and the fallback quiet period when the records
cannot be read (no live eviction for one objectLimiters window, after which a previous instance's
migrations no longer count), or a shorter one when it was deleted and rebuilt from Events
(``lost_quiet``). It hands the runner values (state, unsettled evictions) and never reads the runner's
fields.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import structlog

from descheduler.cluster.types import Pod
from descheduler.config.load import EffectiveConfig
from descheduler.planner import PlannedEviction, PlannerState
from descheduler.planner import journal as records
from descheduler.planner.journal import Detectors, Entry, JournalError, JournalLost
from descheduler.planner.model import RESTART
from descheduler.service.edges import Journal
from descheduler.service.records import Restore
from descheduler.service.unknown import Unconfirmed

log = structlog.get_logger("descheduler.ledger")

EVICTED_RESULTS = frozenset({"evicted", "restarted", "unknown"})
"""Counted as evictions (a restart is a migration like one): an ``unknown`` one may have happened, so it
counts (safety)."""

Unsettled = Mapping[str, Unconfirmed]
"""Evictions of unknown outcome by pod key."""


@dataclass(frozen=True)
class Held:
    """The migration state a ledger operation hands back: the planner state and the unsettled evictions."""

    state: PlannerState
    unsettled: dict[str, Unconfirmed]


class Ledger:
    """One replica's view of the migration journal (``journal`` None: memory only, with the fallback)."""

    def __init__(
        self,
        journal: Journal | None,
        *,
        monotonic: Callable[[], float],
        fallback_quiet_seconds: float = 0.0,
        startup_quiet_seconds: float = 0.0,
        lost_quiet_seconds: float = 0.0,
    ) -> None:
        self.journal = journal
        self.monotonic = monotonic
        self.fallback_quiet_seconds = fallback_quiet_seconds
        self.lost_quiet_seconds = lost_quiet_seconds
        """After a lost journal rebuilt from Events (``lost_quiet``)."""
        self.hold_writes_until = -math.inf
        """A lost journal is written again only after its quiet period: a crash meanwhile finds it lost
        again (and waits again) instead of finding the rebuilt records and no quiet period."""
        self.quiet_until = monotonic() + startup_quiet_seconds
        """No live eviction before this (monotonic)."""
        self.restore_requested = False
        self._restore_failed = False
        self._memory_only = journal is None
        """No journal writes: none configured, or reading it is forbidden (a successor cannot read it
        either, so it falls back to the quiet period too)."""
        self.saved: tuple[Entry, ...] | None = None
        """The records as last read or written; None when unknown (read before the next write)."""
        self.saved_detectors: Detectors | None = None
        """The anomaly detectors as last read or written; None when unknown."""
        self.compactions: list[str] = []
        """What writes near the size limit dropped since the last cycle record (``take_compactions``)."""

    def take_compactions(self) -> tuple[str, ...]:
        """What writes dropped to fit since the last call (the cycle record's metric)."""
        taken, self.compactions = tuple(self.compactions), []
        return taken

    def quiet_left(self) -> float:
        return max(0.0, self.quiet_until - self.monotonic())

    def request_restore(self) -> None:
        self.restore_requested = True

    # -- rebuild ------------------------------------------------------------------------------------------
    def restore(self) -> tuple[Restore, Held]:
        """The state the journal stands for, or the empty state and the fallback quiet period."""
        self.restore_requested = False
        empty = Held(PlannerState(), {})
        if self.journal is None:
            return self._fallback("no-journal", "no migration journal is configured"), empty
        try:
            entries = self.journal.load()
        except JournalLost as exc:
            return self._lost(exc)
        except JournalError as exc:
            if exc.reason == "forbidden":
                self._memory_only = True
            elif exc.reason == "unavailable":
                self.restore_requested = True  # read again next cycle; no eviction can be recorded meanwhile
            elif exc.reason == "invalid":
                self.saved = ()  # unusable records: once the window has passed, overwrite them
            return self._fallback(exc.reason, str(exc)), empty
        self._memory_only = False
        self._restore_failed = False
        stored = self.journal.detectors()
        detectors = records.reset_by_records(stored, entries)
        kept = PlannerState(anomalies=dict(detectors.nodes), prod_anomalies=dict(detectors.prod))
        held = _adopt(entries, Held(kept, {}))
        self.saved = tuple(entries)
        self.saved_detectors = stored
        self.quiet_until = -math.inf
        restore = Restore("rebuilt", "ok", migrations=len(held.state.migrations), pending=len(held.unsettled))
        log.info(
            "state_rebuilt",
            source=self.journal.where,
            migrations=restore.migrations,
            unsettled=restore.pending,
            workloads=len({m.workload for m in held.state.migrations if m.workload}),
            detectors=len(detectors.nodes) + len(detectors.prod),
        )
        return restore, held

    def _fallback(self, reason: str, message: str) -> Restore:
        """The state cannot be read: wait one objectLimiters window out (once per failed restore)."""
        if not self._restore_failed:
            self.quiet_until = max(self.quiet_until, self.monotonic() + self.fallback_quiet_seconds)
        self._restore_failed = True
        left = self.quiet_left()
        log.warning(
            "state_rebuild_failed",
            reason=reason,
            error=message,
            quiet_seconds=round(left, 3),
            notice="no live eviction until the objectLimiters window has passed",
        )
        return Restore("fallback", reason, quiet_seconds=left, message=message)

    def _lost(self, exc: JournalLost) -> tuple[Restore, Held]:
        """The journal was deleted: the migrations its Events show, and a quiet period for what they do
        not (``lost_quiet``); when not even the Events can be read, the full fallback period."""
        self._memory_only = self._restore_failed = False
        self.saved, self.saved_detectors = (), None  # written again (rebuilt records) after the quiet
        held = _adopt(exc.entries or (), Held(PlannerState(), {}))
        quiet = self.lost_quiet_seconds if exc.entries is not None else self.fallback_quiet_seconds
        self.quiet_until = max(self.quiet_until, self.monotonic() + quiet)
        self.hold_writes_until = self.quiet_until
        restore = Restore(
            "fallback",
            "lost",
            migrations=len(held.state.migrations),
            pending=len(held.unsettled),
            quiet_seconds=self.quiet_left(),
            message=str(exc),
            lost=(exc.namespace, exc.name),
        )
        log.warning(
            "journal_lost",
            error=str(exc),
            rebuilt_from_events=None if exc.entries is None else restore.migrations,
            unsettled=restore.pending,
            quiet_seconds=round(restore.quiet_seconds, 3),
            notice="churn budget, windows, back-offs and anomaly counts were reset with it; only the "
            "evictions its Events show were rebuilt; no live eviction during the quiet period",
        )
        return restore, held

    # -- write ahead, confirm -----------------------------------------------------------------------------
    def write_ahead(
        self, planned_state: PlannerState, held: Held, wall: Callable[[], float], dry_run: bool
    ) -> WriteAhead | None:
        """This cycle's write-ahead records (None: dry run, or no journal to write)."""
        if self.journal is None or dry_run or self._memory_only:
            return None
        return WriteAhead(self, planned_state, held, wall)

    def confirm(self, held: Held, *, leader: bool = True) -> tuple[list[str], Held]:
        """After the cycle: write the records as the state now stands (outcomes known, failed ones gone),
        when that changes anything that matters, and the anomaly detectors when they changed (only the
        leader's: a standby's own counts must not replace them). Returns the reasons of failed writes,
        and the state with another writer's records if the journal had to be read again first."""
        if self.journal is None or self.monotonic() < self.hold_writes_until:
            return [], held
        if self.saved is None:
            try:
                held = self.reload(held)
            except JournalError:
                return ["unreadable"], held
        current = _projection(held)
        detectors = records.detectors_of(held.state) if leader else None
        moved = detectors is not None and detectors != self.saved_detectors
        if not moved and not records.needs_write(self.saved, current):
            return [], held
        reason = self._write(current, detectors)
        return ([reason] if reason is not None else []), held

    def reload(self, held: Held) -> Held:
        """Read the journal again after a failed or conflicting write: every record of both sides (another
        writer's records count too), with our anomaly counts. Raises ``JournalError``."""
        assert self.journal is not None
        theirs = self.journal.load()
        merged = _adopt(records.merge(_projection(held), theirs), held)
        self.saved = tuple(theirs)
        self.saved_detectors = self.journal.detectors()
        return merged

    def _write(self, entries: Sequence[Entry], detectors: Detectors | None = None) -> str | None:
        """Save ``entries`` (and ``detectors``; None keeps the journal's); on failure returns the reason
        code and forgets what the journal holds."""
        assert self.journal is not None
        stored = entries, detectors
        fitted = records.compact(entries, detectors or self.saved_detectors or Detectors())
        if fitted.dropped:  # nearing the ConfigMap's limit: drop what safety does not need, not stall
            self.compactions.extend(fitted.dropped)
            log.warning("journal_compacted", records=len(entries), dropped=list(fitted.dropped))
            entries, detectors = fitted.entries, fitted.detectors
        try:
            self.journal.save(entries, detectors)
        except JournalError as exc:
            self.saved = None
            log.warning("journal_write_failed", reason=exc.reason, error=str(exc))
            return exc.reason
        # What was asked, not what was written: a compacted journal must not look changed at every cycle.
        self.saved = tuple(stored[0])
        if stored[1] is not None:
            self.saved_detectors = stored[1]
        return None


class WriteAhead:
    """One cycle's journal writes: each eviction's record goes in before its request is sent."""

    def __init__(self, ledger: Ledger, planned_state: PlannerState, held: Held, wall: Callable[[], float]):
        self.ledger = ledger
        self.held = held
        self.wall = wall
        # The journal as it must read during this cycle: the plan's migrations, then each intent.
        self.work: dict[tuple[str, str], Entry] = {
            (e.pod, e.uid): e for e in _projection(replace(held, state=planned_state))
        }
        self.sent: dict[tuple[str, str], float] = {}
        self.failures: list[str] = []
        self.conflict = False
        """Another writer's records appeared: this cycle's plan did not count them, so it stops."""
        self.adopted: Held | None = None
        """The records of both writers after a reload: the runner merges them into the cycle's result."""

    def intend(self, planned: PlannedEviction) -> str | None:
        """Write ``planned``'s intent record; a message means: do not send the eviction."""
        ledger = self.ledger
        if ledger.saved is None:  # a write failed earlier: read it again first
            try:
                self.adopted = ledger.reload(self.adopted or self.held)
            except JournalError as exc:
                self.failures.append("unreadable")
                return f"not sent: its migration record could not be written first ({exc})"
            self.conflict = True
            return "not sent: the migration journal had to be read again; planning again next cycle"
        key = (planned.pod.key, planned.pod.uid)
        at = self.wall()
        self.work[key] = records.intent(planned, at)
        reason = ledger._write(sorted(self.work.values(), key=lambda e: (e.at, e.pod)))
        if reason is not None:
            self.work.pop(key, None)
            self.failures.append(reason)
            self.conflict = self.conflict or reason == "conflict"
            return f"not sent: its migration record could not be written first ({reason})"
        self.sent[key] = at
        return None

    def settle(self, planned: PlannedEviction, result: str) -> float | None:
        """Keep the record of a possible eviction, drop the others; returns when it was sent."""
        key = (planned.pod.key, planned.pod.uid)
        if result in EVICTED_RESULTS and key in self.work:
            status = records.UNKNOWN if result == "unknown" else records.EVICTED
            self.work[key] = replace(self.work[key], status=status)
        else:
            self.work.pop(key, None)
        return self.sent.get(key)

    def merged(self, held: Held) -> Held:
        """The cycle's result with another writer's records found by a reload (if any) kept too."""
        if self.adopted is None:
            return held
        theirs = records.project(
            self.adopted.state.migrations, _flatten(self.adopted.unsettled), self.adopted.state.departures
        )
        return _adopt(records.merge(_projection(held), theirs), held)


def _flatten(unsettled: Unsettled) -> dict[str, records.Unsettled]:
    return {k: records.Unsettled(u.sent, u.reason, u.destination) for k, u in unsettled.items()}


def _projection(held: Held) -> tuple[Entry, ...]:
    return records.project(held.state.migrations, _flatten(held.unsettled), held.state.departures)


def _adopt(entries: Sequence[Entry], ours: Held) -> Held:
    """``entries`` as the migration state, with ``ours``' anomaly counts, refusals and departures kept."""
    rebuilt = records.rebuild(entries)
    known = {(d.pod, d.uid) for d in ours.state.departures}
    departures = ours.state.departures + tuple(
        d for d in rebuilt.state.departures if (d.pod, d.uid) not in known
    )
    state = replace(ours.state, migrations=rebuilt.state.migrations, departures=departures)
    unsettled = dict(ours.unsettled)
    for e in rebuilt.pending:
        if e.pod not in unsettled:
            pod = Pod(namespace=e.namespace, name=e.name, uid=e.uid, node_name=e.node)
            restart = e.action == RESTART
            unsettled[e.pod] = Unconfirmed(
                pod, e.node, e.destination, e.reason, e.at, restart, e.workload_name if restart else ""
            )
    return Held(state, unsettled)


def lost_quiet(config: EffectiveConfig) -> float:
    """How long a lost journal holds live evictions back: what its Events cannot rebuild must have run
    out. They name no workload, so the objectLimiters workload window; they carry no ping-pong evidence,
    so the guard's longest back-off (``maxCooldown``) when it is on. Not the churn budget's period (24 h
    by default): its evictions are rebuilt from the Events as far back as the API server keeps them."""
    limiter = config.migration.object_limiters.get("workload")
    args = config.low_node_load
    guard = args.ping_pong_guard if args is not None else None
    return max(
        limiter.duration if limiter is not None else 0.0,
        guard.max_cooldown if guard is not None and guard.enabled else 0.0,
    )
