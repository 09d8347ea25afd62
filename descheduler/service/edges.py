"""What the cycle runner talks to, each behind a small protocol, and its settings grouped by concern.

The same runner drives the live cluster (``app.py`` wires the API client, cache, Prometheus and the
migration journal), the stand-in API server in integration tests, and fakes in unit tests.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Unpack

from descheduler.cluster.parse import DEFAULT_PROGRESS_DEADLINE
from descheduler.cluster.types import ClusterSnapshot, Node, Pod, UsageSample, UsageSnapshot
from descheduler.kube.events import Regarding
from descheduler.kube.evict import EvictHooks
from descheduler.kube.verify import ClaimsView
from descheduler.planner.index import WorkloadRef
from descheduler.planner.journal import Detectors, Entry
from descheduler.planner.verify import ServerView
from descheduler.service.unknown import DEFAULT_SETTLE_SECONDS

if TYPE_CHECKING:
    from descheduler.service.records import CycleRecord


class SnapshotSource(Protocol):
    def snapshot(self) -> ClusterSnapshot: ...


class UsageSource(Protocol):
    def fetch_nodes(self, nodes: Sequence[Node]) -> UsageSnapshot: ...

    def fetch_pods(
        self, wanted: Collection[str] | None, nodes: Sequence[Node], pods: Sequence[Pod]
    ) -> Mapping[str, UsageSample]: ...


class Outcome(Protocol):
    @property
    def result(self) -> str: ...
    @property
    def message(self) -> str: ...

    @property
    def retry_after(self) -> float | None:
        """The server's Retry-After of a refusal, if it gave one."""
        ...

    @property
    def code(self) -> str:
        """A ``not-verified`` outcome's skip reason when the server said it (``EvictionOutcome.code``)."""
        ...


class TaintResult(Protocol):
    @property
    def result(self) -> str: ...
    def to_dict(self) -> dict[str, str]: ...


class Tainter(Protocol):
    def add(self, node: str, message: str) -> TaintResult: ...
    def remove(self, node: str, message: str) -> TaintResult: ...

    def report_refused(self, node: str, message: str) -> None:
        """Tell the world (a Warning Event on the node) that the server refused our taint: steering is off."""
        ...


class Evictor(Protocol):
    def evict(
        self,
        pod: Pod,
        node: str,
        reason: str,
        deadline: float,
        **hooks: Unpack[EvictHooks],
    ) -> Outcome:
        """``kube.evict.Evictor.evict``: ``hooks`` say what runs before the request (``EvictHooks``)."""
        ...

    def report_resolved(self, pod: Pod, node: str, reason: str, result: str, message: str) -> None:
        """Tell the world (Events) how an ``unknown`` eviction turned out."""
        ...

    def restart(
        self,
        pod: Pod,
        node: str,
        reason: str,
        deadline: float,
        deployment: str,
        **hooks: Unpack[EvictHooks],
    ) -> Outcome:
        """``kube.evict.Evictor.restart``: move ``pod`` by a surge-first rollout restart of ``deployment``."""
        ...

    def report_restart(self, pod: Pod, deployment: str, type_: str, reason: str, message: str) -> None:
        """Tell the world (Events on the pod and its Deployment) how a restart turned out."""
        ...


class WorkloadEvents(Protocol):
    """Events on workloads (``kube/events.py``): the ping-pong guard's Warning when it backs one off."""

    def record_object(
        self, regarding: Regarding, type_: str, reason: str, message: str, *, action: str
    ) -> None: ...


class Verifier(Protocol):
    """Reads from the API server what an eviction rests on (``kube/verify.py``), and re-lists the cache
    resources the server disagreed with."""

    def read(self, pod: Pod, deadline: float, hint: WorkloadRef | None = None) -> ServerView:
        """``hint``: the pod's workload as the cache resolved it; it may choose the reads, never replace
        one (what the eviction rests on is still read from the server)."""
        ...

    def read_claims(self, namespace: str, names: Sequence[str], deadline: float) -> ClaimsView:
        """The pod's ResourceClaims (only for a pod holding DRA devices)."""
        ...

    def resync(self, resources: Sequence[str]) -> object: ...


class Journal(Protocol):
    """Where migration records outlive the process (``kube/journal.py``: a ConfigMap)."""

    @property
    def where(self) -> str: ...

    def load(self) -> tuple[Entry, ...]:
        """Raises ``JournalUnreadable``."""
        ...

    def detectors(self) -> Detectors:
        """The anomaly detectors the last successful ``load`` found (none before, or in old journals)."""
        ...

    def save(self, entries: Sequence[Entry], detectors: Detectors | None = None) -> None:
        """Raises ``JournalWriteError``. ``detectors`` None keeps those last loaded or saved."""
        ...


@dataclass(frozen=True)
class Edges:
    """The outside world of a cycle. Only ``cluster``, ``usage`` and ``evictor`` are required: without a
    tainter no hotspot taint, without a journal no write-ahead records, without a verifier the snapshot
    is trusted (``simulate``, unit tests)."""

    cluster: SnapshotSource
    usage: UsageSource
    evictor: Evictor
    tainter: Tainter | None = None
    journal: Journal | None = None
    verifier: Verifier | None = None
    events: WorkloadEvents | None = None


@dataclass(frozen=True)
class Clocks:
    wall: Callable[[], float] = time.time
    """Seconds since the epoch: the planner's ``now``, migration and journal times."""
    monotonic: Callable[[], float] = time.monotonic
    """Deadlines and quiet periods."""


@dataclass(frozen=True)
class Signals:
    """What the service tells the runner at each cycle, and where the runner reports back."""

    is_leader: Callable[[], bool] = lambda: True
    cache_ages: Callable[[], Mapping[str, float]] = dict
    """Per watched resource, seconds since it last heard from the API server."""
    refresh: Callable[[Collection[str]], object] = lambda names: None
    """Re-open these resources' watches and wait (bounded) for the server to answer: before acting on
    resources quiet for longer than ``Timing.act_cache_age`` (``cache_ages`` then says how it went)."""
    untrusted_nodes: Callable[[], Mapping[str, str]] = dict
    """Nodes the cache cannot fully describe (an unparsable pod), and why: skipped like unmeasured nodes."""
    object_problems: Callable[[], Mapping[str, str]] = dict
    """Cluster objects the cache could not take as they are (``Kind name`` -> what happened: left out, or
    kept with a fallback such as a node's ``status.allocatable``): each cycle's audit names them."""
    on_record: Callable[[CycleRecord], None] | None = None


@dataclass(frozen=True)
class Timing:
    """Time bounds of the runner; None takes the configuration's ``deschedulingInterval``."""

    budget_seconds: float | None = None
    """A cycle sends no eviction after this long."""
    max_cache_age: float | None = None
    """No cycle at all while any watched resource last heard from the server longer ago than this (its
    watch is broken, not quiet: ``kube.cache.broken_after``)."""
    act_cache_age: float | None = None
    """Nothing is acted on while a resource last heard from the server longer ago than this (quiet watches
    are refreshed first); None: ``max_cache_age``."""
    pdb_retry_seconds: float | None = None
    """The least time a refused budget is left alone (the server's Retry-After when longer)."""
    unknown_settle_seconds: float = DEFAULT_SETTLE_SECONDS
    restart_deadline_seconds: float = float(DEFAULT_PROGRESS_DEADLINE)
    """A restart of unknown outcome whose Deployment is not in the cache is confirmed not applied only this
    long after its patch (its old pod may still be waiting for the new one); a restart in flight is
    followed by its Deployment's own deadline (``planner.surge.follow_restarts``)."""
    startup_quiet_seconds: float = 0.0
    fallback_quiet_seconds: float = 0.0
    """No live eviction this long when the migration journal cannot be read (an objectLimiters window)."""
