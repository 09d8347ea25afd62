"""One cycle's eviction pass: verify, write ahead, evict, and plan again after a budget's refusal.

Safety rules enforced here, about the outside world rather than the plan:
- no eviction unless this replica may act (leader, not stopping) at the moment of the call, nor after the
  cycle's time budget, nor during the fallback quiet period, nor once another journal writer appeared;
- no request leaves before its record is in the migration journal (``ledger.py``);
- each request rests on what the server holds right before it is sent (``verify.py``), dry run too: read
  after the journal write and after every Retry-After wait, with the eviction windows judged at that
  moment, and the pod's resourceVersion as read sent as the Eviction's precondition;
- an eviction of unknown outcome counts as one (it is in ``done``) and stays in every window until the
  cache settles it (``unknown.py``);
- a PodDisruptionBudget's refusal is remembered for the server's Retry-After, doubled for each refusal in
  a row up to ``PDB_BACKOFF_CAP`` (``PdbBackoff``), and the planner plans again at once with what this
  cycle already sent (``plan(..., already=, attempted=)``), so the next candidate is tried in the same
  cycle and every pod that was not moved has a reason.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import structlog

from descheduler.cluster.selectors import selector_matches
from descheduler.cluster.types import ClusterSnapshot, Pod, PodDisruptionBudget, UsageSnapshot
from descheduler.config.load import EffectiveConfig
from descheduler.kube.evict import EvictHooks
from descheduler.planner import Plan, PlannedEviction, PlannerState, PodSkip, plan, reasons, refuse
from descheduler.planner.controls import Window, window_state
from descheduler.planner.index import IndexCache
from descheduler.planner.model import RESTART
from descheduler.service.edges import Evictor
from descheduler.service.ledger import EVICTED_RESULTS, WriteAhead
from descheduler.service.records import EvictionRecord
from descheduler.service.unknown import Unconfirmed
from descheduler.service.verify import ServerCheck

log = structlog.get_logger("descheduler.cycle")

REFUSED_RESULTS = frozenset({"refused-by-pdb", "dry-run-refused"})
"""A PodDisruptionBudget said no: remembered per budget, and the cycle re-planned without its pods."""
OUTSIDE_WINDOW = "outside-window"
"""The result of a planned eviction not sent because no ``evictionWindows`` window is open (dry run too,
so the audit shows what a live run would do at that hour)."""
MAX_REPLANS = 5
"""Re-plans per cycle after refusals: each removes at least one budget's pods, so this only bounds cost."""
PDB_BACKOFF_CAP = 600.0
"""The longest a refused PodDisruptionBudget is left alone (10 min): a stale budget the server keeps
refusing is asked at most this often, not at its Retry-After pace forever."""


@dataclass
class PdbBackoff:
    """Per PodDisruptionBudget back-off across cycles: the first refusal leaves the budget alone for the
    server's Retry-After (at least the runner's least wait), each refusal in a row doubles that, up to
    ``cap``; an eviction the budget allowed, or no refusal for ``cap`` after its wait ended, starts it
    afresh. Other budgets' pods proceed meanwhile (the planner skips only this budget's)."""

    cap: float = PDB_BACKOFF_CAP
    waits: dict[str, tuple[float, float]] = field(default_factory=dict)
    """``namespace/name`` -> (the last wait, until when it lasts, wall clock)."""

    def refused(self, budgets: Sequence[str], retry_after: float, now: float) -> dict[str, float]:
        """Record a refusal under ``budgets``; returns until when each is left alone."""
        untils = {}
        for budget in budgets:
            last = self.waits.get(budget)
            in_a_row = last is not None and now <= last[1] + self.cap
            wait = min(self.cap, max(retry_after, last[0] * 2 if last is not None and in_a_row else 0.0))
            self.waits[budget] = (wait, now + wait)
            untils[budget] = now + wait
        return untils

    def allowed(self, budgets: Sequence[str]) -> None:
        """The server let an eviction under ``budgets`` through: their back-off starts afresh."""
        for budget in budgets:
            self.waits.pop(budget, None)

    def backing_off(self, now: float) -> dict[str, float]:
        """The budgets left alone at ``now``, and until when; forgets those quiet for ``cap`` since."""
        self.waits = {b: w for b, w in self.waits.items() if now <= w[1] + self.cap}
        return {b: until for b, (_, until) in sorted(self.waits.items()) if until > now}


@dataclass
class Pass:
    """What the pass did: the plan the audit shows, each call's record, and what (possibly) happened."""

    decided: Plan
    records: list[EvictionRecord] = field(default_factory=list)
    aborted: str = ""
    done: list[PlannedEviction] = field(default_factory=list)
    """Evicted or of unknown outcome, in call order, whichever plan proposed them."""
    applied: dict[str, float] = field(default_factory=dict)
    """Pod key -> when the server's answer came: the latest moment it may have applied the eviction."""
    sent: dict[str, float] = field(default_factory=dict)
    """Pod key -> when its request was sent: its replacement is matched from there."""
    unresolved: set[str] = field(default_factory=set)
    unconfirmed: list[Unconfirmed] = field(default_factory=list)
    refusals: PlannerState | None = None
    """The cycle's starting state with the budgets refused this cycle (None: no refusal)."""


@dataclass(frozen=True)
class Gate:
    """Why no further eviction may be attempted: asked before each one."""

    stopping: Callable[[], bool]
    is_leader: Callable[[], bool]
    monotonic: Callable[[], float]
    deadline: float
    quiet_left: Callable[[], float]
    dry_run: bool

    def closed(self, ahead: WriteAhead | None) -> str:
        if self.stopping():
            return "shutdown requested"
        if not self.is_leader():
            return "lost leadership"
        if self.monotonic() >= self.deadline:
            return "cycle time budget spent"
        if not self.dry_run and self.quiet_left() > 0:
            return (
                "start-up quiet period: the migration state could not be rebuilt, so the "
                "objectLimiters window of the previous run is waited out"
            )
        if ahead is not None and ahead.conflict:
            return "the migration journal was changed by another writer: planning again next cycle"
        return ""


@dataclass
class EvictionPass:
    """Runs the planned evictions of one cycle in order (see the module docstring)."""

    config: EffectiveConfig
    evictor: Evictor
    gate: Gate
    wall: Callable[[], float]
    pdb_retry_seconds: float
    check: ServerCheck | None = None
    ahead: WriteAhead | None = None
    indexes: IndexCache | None = None
    """The cycle's index cache: a re-plan reuses the index the first plan built."""
    windows: Sequence[Window] = ()
    """``evictionWindows``, judged at the wall clock right before each eviction (empty: always open)."""
    backoff: PdbBackoff = field(default_factory=PdbBackoff)
    """The runner's per-budget back-off, carried from cycle to cycle."""

    def run(self, snapshot: ClusterSnapshot, usage: UsageSnapshot, state: PlannerState, first: Plan) -> Pass:
        now = first.now
        result = Pass(decided=first)
        called: list[PlannedEviction] = []
        attempted: dict[str, str] = {}
        unverified: list[PodSkip] = []
        base = state
        replans = 0
        queue = list(first.evictions)
        while queue:
            planned = queue.pop(0)
            called.append(planned)
            result.aborted = result.aborted or self.gate.closed(self.ahead)
            if result.aborted:
                result.records.append(EvictionRecord.of(planned, "not-attempted", result.aborted))
                continue
            if self.windows:
                window = window_state(self.windows, self.wall())
                if not window.open:
                    result.records.append(EvictionRecord.of(planned, OUTSIDE_WINDOW, window.message()))
                    continue
            outcome = self._evict(planned, result)
            attempted[planned.pod.key] = f"tried earlier this cycle: {outcome.result}"
            if outcome.result == "not-verified":
                skip = PodSkip(planned.pod.key, planned.node, outcome.code, outcome.message, planned.prod)
                unverified.append(skip)
            if outcome.result == "evicted":
                self.backoff.allowed(refused_budgets(planned.pod, snapshot.pdbs, ""))
            if outcome.result in REFUSED_RESULTS and replans < MAX_REPLANS:
                replans += 1
                retry_after = max(outcome.retry_after or 0.0, self.pdb_retry_seconds)
                budgets = refused_budgets(planned.pod, snapshot.pdbs, outcome.message)
                at = self.wall()
                untils = self.backoff.refused(budgets, retry_after, at)
                for budget, until in untils.items():
                    base = refuse(base, [budget], until)
                result.refusals = base
                log.info(
                    "replanning_after_refusal",
                    pod=planned.pod.key,
                    budgets=budgets,
                    retry_after=retry_after,
                    backoff_seconds={b: round(until - at, 3) for b, until in untils.items()},
                )
                result.decided = plan(
                    snapshot,
                    usage,
                    self.config,
                    base,
                    now,
                    already=result.done,
                    attempted=attempted,
                    cache=self.indexes,
                    skip_form=first.skip_form,
                )
                queue = list(result.decided.evictions)
        decided = result.decided
        if unverified:
            decided = replace(decided, pod_skips=decided.pod_skips + tuple(unverified))
        result.decided = replace(decided, evictions=tuple(called) or decided.evictions)
        return result

    def _verify(self, planned: PlannedEviction, result: Pass, why: list[str]) -> str | None:
        """The evictor's ``verify`` hook, run right before each request: the server's objects agree with
        the plan (``ServerCheck``: the pod, its workload, limits and budgets, its node and namespace) and
        an eviction window is open at that moment. ``why`` gets the refusal's code."""
        why.clear()
        if self.check is not None:
            disagreement = self.check.verify(planned, result.decided, result.done)
            if disagreement:
                why.append(self.check.last.code if self.check.last else reasons.VERIFY_UNREADABLE)
                return disagreement
        if self.windows:
            window = window_state(self.windows, self.wall())
            if not window.open:
                why.append(OUTSIDE_WINDOW)
                return window.message()
        return None

    def _evict(self, planned: PlannedEviction, result: Pass) -> _Outcome:
        hooks: EvictHooks = {}
        why: list[str] = []
        if self.check is not None or self.windows:
            hooks["verify"] = functools.partial(self._verify, planned, result, why)
        if self.check is not None:
            hooks["resource_version"] = functools.partial(self.check.version, planned)
        if self.ahead is not None:
            hooks["before_send"] = functools.partial(self.ahead.intend, planned)
        sent = self.wall()
        if planned.action == RESTART:
            outcome = self.evictor.restart(
                planned.pod, planned.node, planned.reason, self.gate.deadline, planned.workload_name, **hooks
            )
        else:
            outcome = self.evictor.evict(
                planned.pod, planned.node, planned.reason, self.gate.deadline, **hooks
            )
        answered = self.wall()
        code = outcome.code or (why[0] if why else reasons.VERIFY_UNREADABLE)
        closed = outcome.result == "not-verified" and code == OUTSIDE_WINDOW
        shown = OUTSIDE_WINDOW if closed else outcome.result
        result.records.append(EvictionRecord.of(planned, shown, outcome.message))
        if outcome.result in EVICTED_RESULTS:
            result.done.append(planned)
            result.applied[planned.pod.key] = answered
        if self.ahead is not None:
            sent = self.ahead.settle(planned, outcome.result) or sent
        if outcome.result in EVICTED_RESULTS:
            result.sent[planned.pod.key] = sent
        if outcome.result == "unknown":
            result.unresolved.add(planned.pod.key)
            result.unconfirmed.append(
                Unconfirmed(
                    planned.pod,
                    planned.node,
                    planned.destination,
                    planned.reason,
                    sent,
                    planned.action == RESTART,
                    planned.workload_name if planned.action == RESTART else "",
                )
            )
        (
            log.info
            if outcome.result in ("evicted", "would-evict", "restarted", "would-restart")
            else log.warning
        )(
            "restart" if planned.action == RESTART else "eviction",
            pod=planned.pod.key,
            node=planned.node,
            destination=planned.destination,
            reason=planned.reason,
            result=outcome.result,
            message=outcome.message,
        )
        return _Outcome(shown, outcome.message, outcome.retry_after, code)


@dataclass(frozen=True)
class _Outcome:
    result: str
    message: str
    retry_after: float | None
    code: str
    """A ``not-verified`` outcome's skip reason."""


_BUDGET_NAME = re.compile(r"disruption budget ([a-z0-9]([-a-z0-9.]*[a-z0-9])?)")


def refused_budgets(pod: Pod, pdbs: Sequence[PodDisruptionBudget], message: str) -> list[str]:
    """The budgets (``namespace/name``) behind a refusal: those of the cache that select the pod, else the
    one the server's message names (a budget the cache has not seen yet)."""
    found = [
        f"{p.namespace}/{p.name}"
        for p in pdbs
        if p.namespace == pod.namespace and selector_matches(p.selector, pod.labels)
    ]
    if found:
        return sorted(found)
    named = _BUDGET_NAME.search(message)
    return [f"{pod.namespace}/{named.group(1)}"] if named else []
