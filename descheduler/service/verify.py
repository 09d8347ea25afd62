"""One cycle's server-side verification: each planned eviction's pod and workload are read from the API
server (``Verifier``: ``kube/verify.py``) and the rules that read them applied again (``planner/verify.py``).
A disagreement stops the eviction, says why, and has the stale cache resources listed again."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import structlog

from descheduler.config.load import EffectiveConfig
from descheduler.planner import Plan, PlannedEviction
from descheduler.planner.candidates import resolve_priority_threshold
from descheduler.planner.index import ClusterIndex
from descheduler.planner.model import RESTART
from descheduler.planner.settings import compile_settings
from descheduler.planner.verify import Disagreement, Threshold, recheck
from descheduler.service.edges import Verifier

log = structlog.get_logger("descheduler.verify")


class ServerCheck:
    """Built once per cycle from the index the cycle planned on (the runner's ``IndexCache``: not built
    again); ``verify`` is the evictor's ``verify`` hook."""

    def __init__(
        self,
        verifier: Verifier,
        config: EffectiveConfig,
        index: ClusterIndex,
        now: float,
        deadline: float,
        monotonic: Callable[[], float],
    ) -> None:
        self.verifier = verifier
        self.now = now
        self.deadline = deadline
        self.monotonic = monotonic
        self.settings = compile_settings(config)
        self.index = index
        self.threshold = Threshold(*resolve_priority_threshold(self.settings, self.index))
        self.requests = 0
        """API requests the verifications of this cycle made."""
        self.last: Disagreement | None = None
        """The disagreement behind the last ``verify`` that stopped an eviction."""
        self.versions: dict[str, str] = {}
        """Pod key -> the resourceVersion of its Deployment as verified (restarts: the patch carries it)."""

    def version(self, planned: PlannedEviction) -> str:
        """The verified resourceVersion of ``planned``'s Deployment ("" if unknown: no precondition)."""
        return self.versions.get(planned.pod.key, "")

    def verify(self, planned: PlannedEviction, decided: Plan, sent: Sequence[PlannedEviction]) -> str | None:
        """A message when the eviction must not be sent; None when the server's objects agree. ``sent``:
        the evictions this cycle already sent (they count as the planner counted them)."""
        started = self.monotonic()
        view = self.verifier.read(planned.pod, self.deadline)
        seconds = round(self.monotonic() - started, 4)
        self.requests += view.requests
        cached = self.index.workload_of(planned.pod)
        found = recheck(
            planned, cached, view, self.settings, decided.state, list(sent), self.threshold, self.now
        )
        self.last = found
        if found is None and planned.action == RESTART:
            self.versions[planned.pod.key] = next(
                (
                    w.rollout.resource_version
                    for w in view.workloads
                    if w.kind == "Deployment" and w.name == planned.workload_name and w.rollout is not None
                ),
                "",
            )
        if found is None:
            log.info("eviction_verified", pod=planned.pod.key, requests=view.requests, seconds=seconds)
            return None
        log.warning(
            "eviction_not_verified",
            pod=planned.pod.key,
            node=planned.node,
            code=found.code,
            message=found.message,
            resync=list(found.stale),
            requests=view.requests,
            seconds=seconds,
        )
        if found.stale:
            self.verifier.resync(found.stale)
        return found.message
