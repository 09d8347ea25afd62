"""The migration journal: the part of the planner state the limits need, as records that outlive a process.

The live service keeps one record per migration that still matters (in flight or inside its
``objectLimiters`` window or ``churnBudget`` period) in a ConfigMap it owns, and rebuilds the state from
it at start-up and when it takes over the Lease. The rules that make that safe, all decided here over
plain data:

- **Write ahead.** A record with status ``intent`` is written *before* the eviction request is sent
  (``intent``). If the process dies at any point after that, the next one finds the record; if the
  write fails, the eviction is not sent. So no eviction can exist without its record.
- **Confirm after.** Once the outcome is known the record becomes ``evicted`` or ``unknown`` (counted as
  evicted, settled later by the cache), or disappears (refused, failed): ``project`` derives the records
  from the state after each cycle and ``needs_write`` says when that is worth a write.
- **Assume the worst on rebuild.** ``rebuild`` turns every record into a migration, whatever its status,
  and returns the ``intent`` and ``unknown`` ones as pending: the cache settles them like any eviction of
  unknown outcome (pod gone or replaced: evicted; the same pod still running a minute after the request:
  never sent, and it stops counting).
- Each record names the pod (key and uid), its source node, and its workload (kind, name and the
  identity the limits count by), so a record maps back to its workload after the pod is gone; and the
  pod's usage when it left, so the usage estimate still subtracts a departure a successor did not see.

- **Fit, never stall.** A journal nearing ``MAX_BYTES`` drops what safety does not need (``compact``):
  anomaly detectors and workload labels, never a record. The configuration refuses a churn budget that
  could keep more records than fit (``config/migration.py``, ``JOURNAL_RECORDS``).
- **A record resets its node's detector** when it is newer (``reset_by_records``): an eviction intended
  by a process that died before confirming it reset the node's counts too.

Records of migrations that no longer matter are dropped by the planner (``plan`` keeps a migration while
its pod exists or its window is open); the journal follows the state, so they leave with the next write.

Beside the records, the leader keeps its anomaly detectors (``Detectors``: count, normal cycles, when
confirmed, when written, and for a cure in rounds its mark, when it began and when its round was found
over), so a successor neither confirms a hotspot again from scratch nor forgets a confirmed one. The
planner trusts them only within ``detectorCacheTimeout`` of their last write and
``anomalyCondition.timeout`` of their confirmation (a cure: see ``anomaly.trusted``), so old ones count
for nothing. A journal without them (written by an earlier version) reads as none: counts start from
zero, as they always did.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict

from descheduler.planner.model import EVICT, RESTART, PlannedEviction
from descheduler.planner.state import (
    COMPLETED,
    FAILED,
    RESTARTING,
    AnomalyCount,
    Departure,
    Migration,
    PlannerState,
)

VERSION = 1
INTENT = "intent"
UNKNOWN = "unknown"
EVICTED = "evicted"
STATUSES = (INTENT, UNKNOWN, EVICTED)
UNSETTLED = frozenset({INTENT, UNKNOWN})
OUTCOMES = (COMPLETED, FAILED)
"""A restart record's ``outcome`` once settled."""
MAX_BYTES = 900_000
"""A ConfigMap's data may hold 1 MiB; stay well below. With long real-world names a record takes about
475 bytes, 680 once its replacement is matched and bounced, so 1,320 fully grown ones fit
(``benchmarks/journal_capacity.py``); the configuration refuses a churn budget that could keep more
(``config/migration.py``, ``JOURNAL_RECORDS``)."""
COMPACT_AT = 810_000
"""Nearing ``MAX_BYTES``: ``compact`` drops what safety does not need before a write could fail."""
WRITER_ROOM = 253
"""Bytes kept for the writer's name when sizing (the pod name and pid the service writes)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One migration as recorded: enough to count it against every limit after a restart."""

    pod: str
    """``namespace/name``."""
    uid: str
    node: str
    """The node it was evicted from (``maxMigratingPerNode``)."""
    workload: str
    """The identity the limits count by (``WorkloadRef.identity``: the top controller's uid), or empty."""
    workload_kind: str
    workload_name: str
    at: float
    """Seconds since the epoch: when the migration started (``evicted``) or the request was sent."""
    status: str
    reason: str = ""
    destination: str = ""
    """Kept while unsettled: the Event that settles it names them."""
    created: float = 0.0
    usage: tuple[tuple[str, int], ...] = ()
    """The pod's creation time and usage sample when it left: its load stays in its old node's sample
    for one metrics window, so a successor's usage estimate must still subtract it (a ``Departure``)."""
    replacement: str = ""
    landed: str = ""
    bounced: float = 0.0
    """The ping-pong guard's evidence (``Migration``): the replacement, its node, and when that node was
    seen over its high threshold. A journal written before these existed simply has none."""
    landed_at: float = 0.0
    sent: float = 0.0
    """When the replacement was first seen bound, and when the request was sent (``Migration``; 0:
    unknown). Stored as ``replacement.at`` (whole seconds) and as ``sentBefore``, seconds before ``at``,
    only when that is a second or more: a replacement is matched from one second before ``at`` anyway
    (``pingpong.replacements_since``), so a smaller gap changes nothing and costs bytes."""
    action: str = EVICT
    """``restart`` for a surge-first restart: a successor keeps counting its old pod as leaving."""
    outcome: str = ""
    """A restart's outcome once settled (``completed``, ``failed``; ``Migration.restart``): a successor
    follows the others on, and neither reports these again nor counts a failed one's old pod as leaving."""

    @property
    def namespace(self) -> str:
        return self.pod.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.pod.split("/", 1)[-1]


class JournalError(Exception):
    """The journal could not be used; ``reason`` is a short code for logs and metric labels."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class JournalUnreadable(JournalError):
    """Reasons: ``forbidden`` (RBAC), ``unavailable`` (the API did not answer), ``invalid`` (bad content)."""


class JournalLost(JournalUnreadable):
    """The journal is gone although a marker says it existed (deleted, not a first start). ``entries``
    are what the API still shows of its records (Events we wrote), None when even those could not be
    read; ``namespace`` and ``name`` name the lost object (the Warning Event is about it)."""

    def __init__(self, message: str, entries: tuple[Entry, ...] | None, namespace: str, name: str) -> None:
        super().__init__("lost", message)
        self.entries = entries
        self.namespace = namespace
        self.name = name


class JournalWriteError(JournalError):
    """Reasons: ``conflict`` (someone else wrote it since we read it), ``too-large``, ``forbidden``,
    ``unavailable``, ``not-loaded`` (never read successfully, so a write could drop records)."""


@dataclass(frozen=True)
class Detectors:
    """The anomaly detectors worth keeping across a restart (``planner/anomaly.py``): nodes with a count
    or a confirmed state, overall and for the prod pass. A journal without them (older versions) reads
    as empty: every count starts from zero, as it did then."""

    nodes: Mapping[str, AnomalyCount] = field(default_factory=dict)
    prod: Mapping[str, AnomalyCount] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.nodes or self.prod)


def detectors_of(state: PlannerState) -> Detectors:
    """What of ``state``'s detectors a successor needs: a node at count 0 and unconfirmed is the same
    as a node never seen. The successor's planner trusts them only within ``detectorCacheTimeout`` of
    their last write and ``anomalyCondition.timeout`` of their confirmation (``anomaly.trusted``)."""

    def kept(counts: Mapping[str, AnomalyCount]) -> dict[str, AnomalyCount]:
        return {k: v for k, v in sorted(counts.items()) if v.count or v.confirmed is not None}

    return Detectors(kept(state.anomalies), kept(state.prod_anomalies))


def reset_by_records(detectors: Detectors, entries: Iterable[Entry]) -> Detectors:
    """The detectors as the records allow: a record of a node newer than the node's detector stands for
    an eviction (maybe only intended: the process may have died before confirming it) that reset the
    node's count (``record.commit``; it keeps a cure confirmed, but a round the journal may not hold
    must not go on), so the detector the journal still holds is reset, unconfirmed, too. Otherwise a
    successor would take a node confirmed before the eviction as still confirmed and evict again without
    N new over cycles."""
    latest: dict[str, float] = {}
    for e in entries:
        latest[e.node] = max(e.at, latest.get(e.node, e.at))

    def kept(counts: Mapping[str, AnomalyCount]) -> dict[str, AnomalyCount]:
        return {
            node: AnomalyCount(0, latest[node]) if latest.get(node, -math.inf) > c.updated else c
            for node, c in counts.items()
        }

    return Detectors(kept(detectors.nodes), kept(detectors.prod))


@dataclass(frozen=True)
class Rebuilt:
    state: PlannerState
    """Migrations and departures, and the anomaly detectors the journal kept (``Detectors``)."""
    pending: tuple[Entry, ...]
    """Records whose eviction may or may not have happened (``intent``, ``unknown``)."""


# --- records from the state, and back ------------------------------------------------------------------


class _Who(TypedDict):
    """The fields that name a pod and where it stood, alike in ``Entry``, ``Migration`` and ``Departure``:
    a record and the state it stands for carry them over one to one."""

    pod: str
    uid: str
    node: str
    workload: str


def _who(of: Entry | Migration | Departure) -> _Who:
    return _Who(pod=of.pod, uid=of.uid, node=of.node, workload=of.workload)


def _usage(values: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((name, int(amount)) for name, amount in values.items() if name != "pods"))


def intent(planned: PlannedEviction, at: float) -> Entry:
    """The record written before the request for ``planned`` is sent at ``at``."""
    return Entry(
        pod=planned.pod.key,
        uid=planned.pod.uid,
        node=planned.node,
        workload=planned.workload,
        workload_kind=planned.workload_kind,
        workload_name=planned.workload_name,
        at=at,
        status=INTENT,
        reason=planned.reason,
        destination=planned.destination,
        created=planned.pod.created,
        usage=_usage(planned.usage),
        action=planned.action,
    )


@dataclass(frozen=True, slots=True)
class Unsettled:
    """What the runner knows of an eviction of unknown outcome (``unknown.Unconfirmed``), flattened."""

    sent: float
    reason: str
    destination: str


def project(
    migrations: Iterable[Migration],
    unsettled: Mapping[str, Unsettled],
    departures: Iterable[Departure] = (),
) -> tuple[Entry, ...]:
    """The records of the state's migrations; those still of unknown outcome (``unsettled``, by pod key)
    carry their send time, reason and destination, those with a departure its usage."""
    left = {(d.pod, d.uid): d for d in departures}
    out: list[Entry] = []
    for m in migrations:
        open_ = unsettled.get(m.pod)
        gone = left.get((m.pod, m.uid))
        out.append(
            Entry(
                **_who(m),
                workload_kind=m.workload_kind,
                workload_name=m.workload_name,
                at=max(m.started, open_.sent) if open_ is not None else m.started,
                status=UNKNOWN if open_ is not None else EVICTED,
                reason=open_.reason if open_ is not None else "",
                destination=open_.destination if open_ is not None else "",
                created=gone.created if gone is not None else 0.0,
                usage=_usage(gone.usage) if gone is not None else (),
                replacement=m.replacement,
                landed=m.landed,
                bounced=m.bounced,
                action=RESTART if m.restart or (gone is not None and gone.restart) else EVICT,
                outcome=m.restart if m.restart in OUTCOMES else "",
                landed_at=m.landed_at,
                sent=m.sent or (open_.sent if open_ is not None else 0.0),
            )
        )
    return tuple(sorted(out, key=lambda e: (e.at, e.pod)))


def needs_write(saved: Sequence[Entry] | None, current: Sequence[Entry]) -> bool:
    """Whether ``current`` must replace ``saved``: a new or changed record, or an unsettled one gone.

    Records that only aged out need no write of their own (a rebuild drops them just the same); they
    leave with the next write.
    """
    if saved is None:
        return bool(current)
    before = set(saved)
    now = set(current)
    return bool(now - before) or any(e.status in UNSETTLED and e not in now for e in before)


def merge(*journals: Iterable[Entry]) -> tuple[Entry, ...]:
    """Union of records (a pod's record by pod key and uid; the later one wins). Used when two writers
    met: keeping every record is the safe side."""
    out: dict[tuple[str, str], Entry] = {}
    for entries in journals:
        for e in entries:
            previous = out.get((e.pod, e.uid))
            if previous is None or _rank(e) >= _rank(previous):
                out[(e.pod, e.uid)] = e
    return tuple(sorted(out.values(), key=lambda e: (e.at, e.pod)))


def _rank(e: Entry) -> tuple[float, bool, bool, bool, bool]:
    """Which of two records of one pod is newer: the later, an unsettled one, one that knows more."""
    return (e.at, e.status != EVICTED, bool(e.landed), e.bounced > 0, bool(e.outcome))


def rebuild(entries: Iterable[Entry], detectors: Detectors | None = None) -> Rebuilt:
    """The planner state the records stand for: every record is a migration (an ``intent`` may have
    been sent, an ``unknown`` may have been applied), and the unsettled ones are returned as pending.
    The planner drops the migrations that no longer matter at its next cycle, and the detectors it no
    longer trusts (``anomaly.trusted``)."""
    merged = merge(entries)
    migrations = tuple(
        Migration(
            **_who(e),
            namespace=e.namespace,
            started=e.at,
            workload_kind=e.workload_kind,
            workload_name=e.workload_name,
            unresolved=e.status in UNSETTLED,
            replacement=e.replacement,
            landed=e.landed,
            bounced=e.bounced,
            landed_at=e.landed_at,
            sent=e.sent,
            restart=(e.outcome or RESTARTING) if e.action == RESTART else "",
        )
        for e in merged
    )
    departures = tuple(
        Departure(
            **_who(e),
            created=e.created,
            left=e.at,
            usage=dict(e.usage),
            restart=e.action == RESTART and not e.outcome,
        )
        for e in merged
        if e.usage
    )
    pending = tuple(e for e in merged if e.status in UNSETTLED)
    kept = detectors or Detectors()
    state = PlannerState(
        anomalies=dict(kept.nodes),
        prod_anomalies=dict(kept.prod),
        migrations=migrations,
        departures=departures,
    )
    return Rebuilt(state=state, pending=pending)


# --- the stored form ---------------------------------------------------------------------------------------


def encode(entries: Sequence[Entry], *, writer: str, detectors: Detectors | None = None) -> str:
    """Compact JSON, one record per line so ``kubectl get -o yaml`` stays readable. The detectors, when
    there are any, go in a ``detectors`` key that earlier versions ignore."""
    records = []
    for e in entries:
        record: dict[str, Any] = {
            "pod": e.pod,
            "uid": e.uid,
            "node": e.node,
            "workload": {"kind": e.workload_kind, "name": e.workload_name, "identity": e.workload},
            "at": round(e.at, 3),
            "status": e.status,
        }
        if e.status in UNSETTLED:
            record["reason"] = e.reason
            record["destination"] = e.destination
        if e.usage:
            record["created"] = round(e.created, 3)
            record["usage"] = dict(e.usage)
        if e.landed:
            record["replacement"] = {"pod": e.replacement, "node": e.landed}
            if e.landed_at:
                record["replacement"]["at"] = round(e.landed_at)
        if e.sent and e.at - e.sent >= 1:
            record["sentBefore"] = round(e.at - e.sent, 3)
        if e.bounced:
            record["bounced"] = round(e.bounced, 3)
        if e.action != EVICT:
            record["action"] = e.action
        if e.outcome:
            record["outcome"] = e.outcome
        records.append(json.dumps(record, separators=(",", ":"), sort_keys=False))
    top: dict[str, Any] = {"version": VERSION, "writer": writer}
    if detectors:
        top["detectors"] = {
            "nodes": {k: v.to_dict() for k, v in sorted(detectors.nodes.items())},
            "prod": {k: v.to_dict() for k, v in sorted(detectors.prod.items())},
        }
    head = json.dumps(top, separators=(",", ":"))
    body = ",\n".join(records)
    return head[:-1] + ',"records":[\n' + body + "\n]}\n" if records else head[:-1] + ',"records":[]}\n'


@dataclass(frozen=True)
class Compacted:
    """Records and detectors as they fit, and what was dropped, in order (empty: nothing)."""

    entries: tuple[Entry, ...]
    detectors: Detectors
    dropped: tuple[str, ...]


def _unconfirmed_detectors(entries: tuple[Entry, ...], d: Detectors) -> tuple[tuple[Entry, ...], Detectors]:
    def kept(counts: Mapping[str, AnomalyCount]) -> dict[str, AnomalyCount]:
        return {k: v for k, v in counts.items() if v.confirmed is not None}

    return entries, Detectors(kept(d.nodes), kept(d.prod))


def _workload_names(entries: tuple[Entry, ...], d: Detectors) -> tuple[tuple[Entry, ...], Detectors]:
    return tuple(
        replace(e, workload_kind="", workload_name="") if e.status == EVICTED and e.workload else e
        for e in entries
    ), d


def _confirmed_detectors(entries: tuple[Entry, ...], d: Detectors) -> tuple[tuple[Entry, ...], Detectors]:
    return entries, Detectors()


COMPACTION = (
    ("unconfirmed-detectors", _unconfirmed_detectors),
    ("workload-names", _workload_names),
    ("confirmed-detectors", _confirmed_detectors),
)
"""What a journal nearing its limit drops, least important first. Never a record: each one counts
against a limit. Dropped detectors make a successor count the node again (later evictions, the safe
side); workload kind and name only label Events and reports (the limits count by the identity, kept)."""


def compact(
    entries: Sequence[Entry], detectors: Detectors, *, writer: str = "", limit: int = COMPACT_AT
) -> Compacted:
    """``entries`` and ``detectors`` made to fit in ``limit`` bytes as far as ``COMPACTION`` allows; a
    journal still larger after every step keeps its records (the write fails: no eviction without one)."""
    room = "x" * max(len(writer), WRITER_ROOM)
    out, kept = tuple(entries), detectors
    dropped: list[str] = []
    for name, step in COMPACTION:
        if len(encode(out, writer=room, detectors=kept).encode()) <= limit:
            break
        out, kept = step(out, kept)
        dropped.append(name)
    return Compacted(out, kept, tuple(dropped))


def _invalid(source: str) -> Callable[[str, str], JournalUnreadable]:
    """The error for a malformed stored form: it names ``source`` and the field (``where``)."""

    def bad(where: str, problem: str) -> JournalUnreadable:
        return JournalUnreadable("invalid", f"{source}: {where}: {problem}")

    return bad


def _json(text: str, bad: Callable[[str, str], JournalUnreadable]) -> Any:
    """The stored form as JSON; text that is not JSON raises ``bad("data", ...)``."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise bad("data", f"not JSON ({exc})") from None


def decode(text: str, source: str) -> tuple[Entry, ...]:
    """Parse the stored form; any problem raises ``JournalUnreadable("invalid", ...)`` naming ``source``
    and the field, so an operator can fix or delete the object."""
    bad = _invalid(source)
    doc = _json(text, bad)
    if not isinstance(doc, dict):
        raise bad("data", f"must be an object, got {type(doc).__name__}")
    if doc.get("version") != VERSION:
        raise bad("version", f"must be {VERSION}, got {doc.get('version')!r}")
    raw = doc.get("records")
    if not isinstance(raw, list):
        raise bad("records", f"must be a list, got {type(raw).__name__}")
    return tuple(_decode_record(item, f"records[{i}]", bad) for i, item in enumerate(raw))


def _decode_record(item: Any, where: str, bad: Callable[[str, str], JournalUnreadable]) -> Entry:
    """One stored record, every field checked (``decode``)."""
    if not isinstance(item, dict):
        raise bad(where, f"must be an object, got {type(item).__name__}")

    def text_field(name: str, value: Any, *, required: bool = True, at: str = where) -> str:
        if not isinstance(value, str) or (required and not value):
            raise bad(f"{at}.{name}", f"must be a non-empty string, got {value!r}")
        return value

    def seconds(
        name: str, default: float | None = 0.0, *, negative: bool = True, of: Any = item, at: str = where
    ) -> float:
        value = of.get(name, default)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or (value < 0 and not negative)
        ):
            raise bad(f"{at}.{name}", f"must be seconds since the epoch, got {value!r}")
        return float(value)

    pod = text_field("pod", item.get("pod"))
    if pod.count("/") != 1 or pod.startswith("/") or pod.endswith("/"):
        raise bad(f"{where}.pod", f"must be namespace/name, got {pod!r}")
    workload = item.get("workload")
    owner = f"{where}.workload"
    if not isinstance(workload, dict):
        raise bad(owner, f"must be an object, got {workload!r}")
    status = item.get("status")
    if status not in STATUSES:
        raise bad(f"{where}.status", f"must be one of {', '.join(STATUSES)}, got {status!r}")
    usage = item.get("usage", {})
    if not isinstance(usage, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
        for k, v in usage.items()
    ):
        raise bad(f"{where}.usage", f"must map resource names to non-negative integers, got {usage!r}")
    action = item.get("action", EVICT)
    if action not in (EVICT, RESTART):
        raise bad(f"{where}.action", f"must be {EVICT} or {RESTART}, got {action!r}")
    outcome = item.get("outcome", "")
    if outcome and (action != RESTART or outcome not in OUTCOMES):
        raise bad(f"{where}.outcome", f"must be {' or '.join(OUTCOMES)} on a restart, got {outcome!r}")
    landing = item.get("replacement", {})
    moved = f"{where}.replacement"
    if not isinstance(landing, dict):
        raise bad(moved, f"must be an object, got {landing!r}")
    recorded = seconds("at", None, negative=False)
    before = seconds("sentBefore", negative=False)
    return Entry(
        pod=pod,
        uid=text_field("uid", item.get("uid"), required=False),
        node=text_field("node", item.get("node")),
        workload=text_field("identity", workload.get("identity", ""), required=False, at=owner),
        workload_kind=text_field("kind", workload.get("kind", ""), required=False, at=owner),
        workload_name=text_field("name", workload.get("name", ""), required=False, at=owner),
        at=recorded,
        status=str(status),
        reason=text_field("reason", item.get("reason", ""), required=False),
        destination=text_field("destination", item.get("destination", ""), required=False),
        created=seconds("created"),
        usage=tuple(sorted(usage.items())),
        replacement=text_field("pod", landing.get("pod", ""), required=False, at=moved),
        landed=text_field("node", landing.get("node", ""), required=False, at=moved),
        bounced=seconds("bounced"),
        action=str(action),
        landed_at=seconds("at", negative=False, of=landing, at=moved),
        sent=recorded - before if before else 0.0,
        outcome=str(outcome),
    )


def decode_detectors(text: str, source: str) -> Detectors:
    """The ``detectors`` key of the stored form (absent: none, as older versions wrote). A malformed one
    raises ``JournalUnreadable("invalid", ...)`` naming the field, like a malformed record."""
    bad = _invalid(source)
    doc = _json(text, bad)
    raw = doc.get("detectors") if isinstance(doc, dict) else None
    if raw is None:
        return Detectors()
    if not isinstance(raw, dict):
        raise bad("detectors", f"must be an object, got {type(raw).__name__}")

    def number(value: Any) -> bool:
        return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)

    def count(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    out: list[dict[str, AnomalyCount]] = []
    for key in ("nodes", "prod"):
        table = raw.get(key, {})
        if not isinstance(table, dict):
            raise bad(f"detectors.{key}", f"must be an object, got {type(table).__name__}")
        parsed: dict[str, AnomalyCount] = {}
        for node, item in table.items():
            where = f"detectors.{key}.{node}"
            if not isinstance(item, dict):
                raise bad(where, f"must be an object, got {type(item).__name__}")
            confirmed: Any = item.get("confirmed")
            over: Any = item.get("count")
            updated: Any = item.get("updated")
            normal: Any = item.get("normal", 0)
            cure: Any = item.get("cure", False)
            settled: Any = item.get("settled", 0)
            began: Any = item.get("began", 0)
            spent: Any = item.get("spent", 0)
            cooled: Any = item.get("cooled", 0)
            numbers = all(number(v) for v in (updated, settled, began, cooled))
            if not (numbers and all(count(v) for v in (over, normal, spent))) or not (
                confirmed is None or number(confirmed)
            ):
                fields = "count, updated, normal, confirmed, settled, began, spent and cooled"
                raise bad(where, f"must hold {fields} as numbers, got {item!r}")
            if not isinstance(cure, bool):
                raise bad(f"{where}.cure", f"must be true or false, got {cure!r}")
            parsed[str(node)] = AnomalyCount(
                over,
                float(updated),
                normal,
                None if confirmed is None else float(confirmed),
                cure and confirmed is not None,
                float(settled),
                *((float(began), spent, float(cooled)) if confirmed is not None else ()),
            )
        out.append(parsed)
    return Detectors(out[0], out[1])
