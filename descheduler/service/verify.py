"""One cycle's server-side verification: each planned eviction's pod and workload are read from the API
server (``Verifier``: ``kube/verify.py``) and the rules that read them applied again (``planner/verify.py``).
A pod holding DRA devices also has its ResourceClaims read (``claim_disagreement``). A disagreement stops
the eviction, says why, and has the stale cache resources listed again."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import structlog

from descheduler.cluster.types import Pod
from descheduler.config.load import EffectiveConfig
from descheduler.kube.verify import ClaimsView
from descheduler.planner import Plan, PlannedEviction, reasons
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
        """Pod key -> the resourceVersion of what its request acts on, as last verified: the pod for an
        eviction (the Eviction's precondition), its Deployment for a restart (the patch carries it)."""

    def version(self, planned: PlannedEviction) -> str:
        """The verified resourceVersion ``planned``'s request carries ("" if unknown: no precondition)."""
        return self.versions.get(planned.pod.key, "")

    def verify(self, planned: PlannedEviction, decided: Plan, sent: Sequence[PlannedEviction]) -> str | None:
        """A message when the eviction must not be sent; None when the server's objects agree. ``sent``:
        the evictions this cycle already sent (they count as the planner counted them)."""
        started = self.monotonic()
        cached = self.index.workload_of(planned.pod)
        view = self.verifier.read(planned.pod, self.deadline, cached)  # the cache's chain: a hint only
        self.requests += view.requests
        found = recheck(
            planned, cached, view, self.settings, decided.state, list(sent), self.threshold, self.now
        )
        requests = view.requests
        if found is None and view.pod is not None and view.pod.resource_claims:
            names = [ref.generated_claim_name for ref in view.pod.resource_claims if ref.generated_claim_name]
            claims = self.verifier.read_claims(view.pod.namespace, names, self.deadline)
            requests += claims.requests
            self.requests += claims.requests
            found = claim_disagreement(view.pod, claims)
        seconds = round(self.monotonic() - started, 4)
        self.last = found
        self.versions[planned.pod.key] = view.pod_version
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
            log.info("eviction_verified", pod=planned.pod.key, requests=requests, seconds=seconds)
            return None
        log.warning(
            "eviction_not_verified",
            pod=planned.pod.key,
            node=planned.node,
            code=found.code,
            message=found.message,
            resync=list(found.stale),
            requests=requests,
            seconds=seconds,
        )
        if found.stale:
            self.verifier.resync(found.stale)
        return found.message


CLAIMS = ("resourceclaims",)


def claim_disagreement(pod: Pod, found: ClaimsView) -> Disagreement | None:
    """Why ``pod`` (as the server holds it) must not be evicted on its claims as the server holds them, or
    None. Only a claim generated from a template for this pod alone, allocated, frees its device and gets
    the replacement a fresh one: a claim that is shared (named by the pod, or reserved for other pods too),
    not allocated, gone or not the pod's own stops the eviction (the cache may have said otherwise: it
    lists claims again)."""
    if found.problem:
        return Disagreement(reasons.VERIFY_UNREADABLE, f"claims of pod {pod.key}: {found.problem}")
    for ref in pod.resource_claims:
        if not ref.template_name:
            return Disagreement(
                reasons.VERIFY_REFUSED,
                f"pod {pod.key} uses ResourceClaim {ref.claim_name} by name: shared, its device would "
                "not be freed",
            )
        name = ref.generated_claim_name
        claim = found.claims.get(name) if name else None
        if claim is None:
            what = f"claim {name} is gone" if name else "no claim generated yet"
            return Disagreement(
                reasons.VERIFY_REFUSED, f"pod {pod.key} claim {ref.name}: {what}", stale=CLAIMS
            )
        problem = ""
        others = sorted(set(claim.reserved_for) - {pod.uid})
        if not claim.allocated:
            problem = "not allocated"
        elif others:
            problem = f"reserved for {len(others)} other pod(s) too: shared, its device would not be freed"
        elif claim.owner is None or claim.owner.uid != pod.uid:
            problem = "not owned by the pod (not generated for it)"
        if problem:
            return Disagreement(
                reasons.VERIFY_REFUSED, f"pod {pod.key} ResourceClaim {claim.key}: {problem}", stale=CLAIMS
            )
    return None
