"""Evicting one pod, and saying exactly what happened.

Through ``pods/eviction`` (policy/v1) by default, so the API server enforces PodDisruptionBudgets; with
``policy="Delete"`` the pod is deleted instead (no PDB check). A 429 that names a disruption budget is a
refusal: reported at once, no retry (the next candidate is tried by the caller). A 429 from the server's
own flow control carries ``Retry-After``: waited out (plus up to 20% jitter, ``flowcontrol.py``) and
retried while the cycle's deadline allows, each retry verified again first (``verify`` runs right before
every request, after every wait). The Eviction carries the verified pod's uid and resourceVersion as
preconditions: a 409 Conflict means the pod changed since it was verified, result ``not-verified``
(code ``verify-pod-changed``), never retried here. 404 means the pod is gone already. A request that
reached the server without a clear answer (a client timeout, a connection broken after sending, any 5xx:
a proxy or the server may answer 504 after the eviction was applied) is ``unknown``: the caller must
treat the pod as possibly evicted until its cache says otherwise; only a request that provably never left
(no connection) is ``failed``. Dry run asks the server the same question with ``dryRun=All``, so the
audit shows what a PDB would have refused, and changes nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict, Unpack

import structlog

from descheduler.cluster.parse import RESTARTED_AT
from descheduler.cluster.types import Pod
from descheduler.config.migration import delete_options_to_send
from descheduler.kube.api import KubeApi, Response, path_segment, status_error
from descheduler.kube.errors import (
    ApiConnectionError,
    ApiStatusError,
    ApiTimeoutError,
    ClientThrottledError,
)
from descheduler.kube.events import EventRecorder, Regarding
from descheduler.kube.flowcontrol import is_budget_refusal, retry_wait
from descheduler.kube.ratelimit import TokenBucket
from descheduler.planner.reasons import VERIFY_POD_CHANGED

log = structlog.get_logger("descheduler.kube.evict")

STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


def restart_patch(now: float, resource_version: str) -> dict[str, Any]:
    """What ``kubectl rollout restart`` patches (a new ``restartedAt`` on the pod template, RFC 3339 as
    kubectl writes it), plus the verified ``resourceVersion`` when known: the server then applies it only
    to that version of the Deployment (409 Conflict otherwise)."""
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body: dict[str, Any] = {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: stamp}}}}}
    if resource_version:
        body["metadata"] = {"resourceVersion": resource_version}
    return body


RESULTS = frozenset(
    {
        "evicted",
        "would-evict",
        "refused-by-pdb",
        "not-found",
        "throttled",
        "failed",
        "dry-run-refused",
        "unknown",
        "not-verified",
        "restarted",
        "would-restart",
    }
)
POSSIBLY_EVICTED = frozenset({"evicted", "restarted", "unknown"})
"""Results the caller must count as evictions (limits, windows, anomaly counts): safety first."""
POLICIES = ("Eviction", "Delete")


class EvictHooks(TypedDict, total=False):
    """What the caller runs inside an eviction, at the moments only the evictor knows."""

    before_send: Callable[[], str | None]
    """Before each request (live only, after the rate limiter and any Retry-After wait): the journal's
    intent record; a message it returns means not sent, result ``failed``."""
    verify: Callable[[], str | None]
    """Right before each request, after ``before_send`` (dry run too), so no wait separates what it read
    from the request: a message it returns means the server's objects (or the eviction windows) disagree
    with the plan, result ``not-verified``."""
    resource_version: Callable[[], str]
    """The ``resourceVersion`` ``verify`` read of what the request acts on (an eviction's pod, a restart's
    Deployment): the request carries it as a precondition, so it applies to exactly that version (409
    otherwise); "" sends none."""


_Said = tuple[str, str]
"""An Event's reason and text."""


@dataclass(frozen=True)
class _Request:
    """One eviction or restart request as ``Evictor._attempt`` sends it."""

    pod: Pod
    deadline: float
    method: str
    path: str
    send: Callable[[], Response]
    answer: Callable[[Response], tuple[EvictionOutcome, bool] | None]


@dataclass(frozen=True)
class EvictionOutcome:
    result: str
    message: str
    retry_after: float | None = None
    """The server's Retry-After with a refusal (Kubernetes: 0 for a spent budget, 10 for one it has not
    processed yet); the runner leaves the budget alone at least that long."""
    code: str = ""
    """A ``not-verified`` outcome's skip reason when the server itself said so (a 409 Conflict on the
    preconditions: ``verify-pod-changed``); "" when the ``verify`` hook said it (the caller knows why)."""

    def __post_init__(self) -> None:
        if self.result not in RESULTS:
            raise ValueError(f"unknown eviction result {self.result!r}")

    @property
    def evicted(self) -> bool:
        return self.result == "evicted"


def _descheduled_message(node: str, reason: str) -> str:
    return f'Pod evicted from node "{node}" by the reason "{reason}"'


def _describe_refusal(error: ApiStatusError) -> str:
    causes = "; ".join(str(c.get("message")) for c in error.causes if c.get("message"))
    return f"{error.message} ({causes})" if causes else error.message


class Evictor:
    """Evicts (or dry-runs) one pod per call; thread-safe. ``guard`` is checked before every request."""

    def __init__(
        self,
        api: KubeApi,
        *,
        policy: str = "Eviction",
        delete_options: Mapping[str, Any] | None = None,
        evict_qps: float,
        evict_burst: int,
        dry_run: bool,
        events: EventRecorder | None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        request_timeout: float = 10.0,
        guard: Callable[[], bool] | None = None,
        default_retry_after: float = 1.0,
        warning_window: float = 300.0,
        stop: threading.Event | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"evictionPolicy must be one of {', '.join(POLICIES)}, got {policy!r}")
        self.api = api
        self.policy = policy
        self.delete_options = delete_options_to_send(delete_options)
        self.dry_run = dry_run
        self.events = events
        if stop is not None and sleep is time.sleep:
            halt = stop

            def sleep(seconds: float) -> None:  # a Retry-After or rate-limit wait ends at once on shutdown
                halt.wait(seconds)

        self._stop = stop
        self.limiter = TokenBucket(evict_qps, max(1, int(evict_burst)), clock=clock, sleep=sleep)
        self._clock = clock
        self._wall = wall
        self._sleep = sleep
        self._timeout = request_timeout
        self._guard = guard
        self._default_retry_after = default_retry_after
        self._warning_window = warning_window
        self._warned: dict[tuple[str, str], float] = {}
        """(pod uid or key, Event reason) -> when the last Warning was written, for rate limiting."""

    # -- public ---------------------------------------------------------------------------------------
    def evict(
        self,
        pod: Pod,
        node: str,
        reason: str,
        deadline: float,
        **hooks: Unpack[EvictHooks],
    ) -> EvictionOutcome:
        """Evict ``pod`` from ``node`` (or dry-run it) before ``deadline`` (monotonic), running ``hooks``."""
        attempt = self._evict(pod, node, deadline, hooks)
        return self._told("eviction_outcome", pod, node, attempt, lambda o: self._emit(pod, node, reason, o))

    def restart(
        self,
        pod: Pod,
        node: str,
        reason: str,
        deadline: float,
        deployment: str,
        **hooks: Unpack[EvictHooks],
    ) -> EvictionOutcome:
        """Move ``pod`` off ``node`` by a rollout restart of its Deployment ``deployment`` (same namespace):
        the pod-template annotation ``kubectl rollout restart`` sets, as a strategic-merge patch; the
        Deployment's controller creates the new pod before it stops this one (the planner checked it
        surges first, ``planner/surge.py``). Dry run sends the patch with ``dryRun=All``. Same guards,
        rate limit, hooks and unknown-outcome rule as ``evict``; results ``restarted``/``would-restart``."""
        path = (
            f"/apis/apps/v1/namespaces/{path_segment(pod.namespace)}/deployments/{path_segment(deployment)}"
        )
        version = hooks.get("resource_version")

        def send() -> Response:
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise ClientThrottledError("the cycle's deadline passed before the restart could be sent")
            body = restart_patch(self._wall(), version() if version is not None else "")
            return self.api.request_raw(
                "PATCH",
                path,
                query={"dryRun": "All"} if self.dry_run else None,
                body=body,
                timeout=min(self._timeout, remaining),
                deadline=deadline,
                content_type=STRATEGIC_MERGE_PATCH,
            )

        def answer(response: Response) -> tuple[EvictionOutcome, bool] | None:
            if 200 <= response.status < 300:
                if self.dry_run:
                    return EvictionOutcome(
                        "would-restart", "server-side dry run accepts the restart patch"
                    ), True
                return EvictionOutcome(
                    "restarted",
                    f"Deployment {deployment} restarted: its new pod comes up before {pod.name} stops",
                ), True
            error = status_error("PATCH", path, response)
            if error.status == 404:
                return EvictionOutcome("not-found", f"Deployment {deployment} no longer exists"), False
            if error.status == 409:
                message = (
                    f"Deployment {deployment} changed since it was verified, not restarted: {error.message}"
                )
                return EvictionOutcome("failed", message), False
            return None

        attempt = self._attempt(
            _Request(pod, deadline, "PATCH", path, send, answer),
            hooks.get("before_send"),
            hooks.get("verify"),
        )
        return self._told(
            "restart_outcome",
            pod,
            node,
            attempt,
            lambda o: self._emit_restart(pod, node, reason, deployment, o),
        )

    def _told(
        self,
        event: str,
        pod: Pod,
        node: str,
        attempt: tuple[EvictionOutcome, bool],
        emit: Callable[[EvictionOutcome], None],
    ) -> EvictionOutcome:
        """What an eviction and a restart do with their outcome: ``emit`` its Events when it is worth them
        (the attempt's second part), then a debug log line ``event``."""
        outcome, noteworthy = attempt
        if noteworthy:
            emit(outcome)
        log.debug(event, pod=pod.key, node=node, result=outcome.result, message=outcome.message)
        return outcome

    # -- request ----------------------------------------------------------------------------------------
    def _evict(self, pod: Pod, node: str, deadline: float, hooks: EvictHooks) -> tuple[EvictionOutcome, bool]:
        """The outcome, and whether it is worth an event on the pod (not when nothing was asked)."""
        version = hooks.get("resource_version")

        def answer(response: Response) -> tuple[EvictionOutcome, bool] | None:
            if 200 <= response.status < 300:
                if self.dry_run:
                    return EvictionOutcome(
                        "would-evict", f"server-side dry run ({self.policy}) allows it"
                    ), True
                verb = "evicted" if self.policy == "Eviction" else "deleted"
                return EvictionOutcome("evicted", f"{verb} from node {node}"), True
            error = status_error(self._method, self._path(pod), response)
            if error.status == 404:
                return EvictionOutcome("not-found", "pod no longer exists"), False
            if error.status == 409:
                message = f"not sent: the pod changed since it was verified ({error.message})"
                return EvictionOutcome("not-verified", message, code=VERIFY_POD_CHANGED), False
            if self.policy == "Eviction" and error.status in (403, 429) and is_budget_refusal(error):
                result = "dry-run-refused" if self.dry_run else "refused-by-pdb"
                return EvictionOutcome(result, _describe_refusal(error), error.retry_after), True
            return None

        def send() -> Response:
            return self._send(pod, deadline, version() if version is not None else "")

        request = _Request(pod, deadline, self._method, self._path(pod), send, answer)
        return self._attempt(request, hooks.get("before_send"), hooks.get("verify"))

    def _attempt(
        self,
        request: _Request,
        before_send: Callable[[], str | None] | None,
        verify: Callable[[], str | None] | None,
    ) -> tuple[EvictionOutcome, bool]:
        """What evictions and restarts share: the guards, the rate limiter, the hooks in order, the
        server's flow control (429 with Retry-After, retried within the deadline) and the rule that a
        request which may have reached the server without a clear answer is ``unknown``. ``request.answer``
        reads what is particular to the call (success, 404, 409, a budget's refusal); None: the rules here.
        ``verify`` runs last before every request (after the journal write and any Retry-After wait): what
        an eviction rests on may change during any wait, so nothing is sent on a read made before one."""
        pod, deadline = request.pod, request.deadline
        if self._stopping():
            return EvictionOutcome("failed", "shutdown requested: eviction not attempted"), False
        if self._guard is not None and not self._guard():
            return EvictionOutcome("failed", "not the leader: eviction not attempted"), False
        if not self.limiter.acquire(deadline):
            return EvictionOutcome(
                "throttled",
                f"client-side eviction rate limit (evictQPS={self.limiter.qps:g}, "
                f"evictBurst={self.limiter.burst}) allows no eviction before the cycle's deadline",
            ), False
        attempts = 0
        while True:
            attempts += 1
            stopped = self._ready(before_send, verify)
            if stopped is not None:
                return stopped
            try:
                response = request.send()
            except ClientThrottledError as exc:
                return EvictionOutcome("throttled", str(exc)), False
            except (ApiTimeoutError, ApiConnectionError) as exc:
                what = "timed out" if isinstance(exc, ApiTimeoutError) else "lost its connection"
                if not exc.sent:
                    return EvictionOutcome(
                        "failed", f"no connection to the API server, request not sent: {exc}"
                    ), True
                return self._unknown(f"the request {what} after it was sent: {exc}"), True
            particular = request.answer(response)
            if particular is not None:
                return particular
            error = status_error(request.method, request.path, response)
            if error.status == 429:
                asked = error.retry_after if error.retry_after is not None else self._default_retry_after
                wait = retry_wait(asked)  # jittered: evictions refused together do not return in step
                if self._clock() + wait >= deadline:
                    return EvictionOutcome(
                        "throttled",
                        f"API server is throttling (429, Retry-After {asked:g}s) and the cycle's deadline "
                        f"comes first; {attempts} attempt(s)",
                    ), True
                log.info("eviction_throttled_retrying", pod=pod.key, retry_after=wait, attempt=attempts)
                self._sleep(wait)
                continue
            if error.status >= 500:
                return self._unknown(f"HTTP {error.status} after the request was sent: {error.message}"), True
            return EvictionOutcome("failed", f"HTTP {error.status}: {error.message}"), True

    def _ready(
        self, before_send: Callable[[], str | None] | None, verify: Callable[[], str | None] | None
    ) -> tuple[EvictionOutcome, bool] | None:
        """Right before each request: still allowed to act, the journal's intent written, then what the
        request rests on verified; leadership asked again after each step that took time. None: send."""
        if self._stopping():
            return EvictionOutcome("failed", "shutdown requested: eviction not attempted"), False
        lost = EvictionOutcome("failed", "lost leadership: eviction not attempted"), False
        if self._guard is not None and not self._guard():
            return lost
        if before_send is not None and not self.dry_run:
            refusal = before_send()
            if refusal:
                return EvictionOutcome("failed", refusal), True
            if self._guard is not None and not self._guard():  # the write took time: ask again
                return lost
        if verify is not None:
            disagreement = verify()
            if disagreement:
                return EvictionOutcome("not-verified", disagreement), False
            if self._guard is not None and not self._guard():  # so did the reads
                return lost
        return None

    def _unknown(self, why: str) -> EvictionOutcome:
        """A request the server may have applied. Dry run changes nothing, so there it simply failed."""
        if self.dry_run:
            return EvictionOutcome("failed", why)
        return EvictionOutcome(
            "unknown", f"{why}; counted as evicted until the cache shows whether the pod was evicted"
        )

    def _stopping(self) -> bool:
        return self._stop is not None and self._stop.is_set()

    @property
    def _method(self) -> str:
        return "POST" if self.policy == "Eviction" else "DELETE"

    def _path(self, pod: Pod) -> str:
        base = f"/api/v1/namespaces/{path_segment(pod.namespace)}/pods/{path_segment(pod.name)}"
        return base + "/eviction" if self.policy == "Eviction" else base

    def _options(self, pod: Pod, version: str) -> dict[str, Any]:
        options = {"apiVersion": "v1", "kind": "DeleteOptions", **self.delete_options}
        preconditions = dict(options.get("preconditions") or {})
        if pod.uid and "/" not in pod.uid:  # a real uid: never evict a same-named successor
            preconditions.setdefault("uid", pod.uid)
        if version:  # the version verified: never evict a pod changed since (an annotation added...)
            preconditions["resourceVersion"] = version
        if preconditions:
            options["preconditions"] = preconditions
        if self.dry_run:
            options["dryRun"] = ["All"]
        return options

    def _send(self, pod: Pod, deadline: float, version: str) -> Response:
        remaining = deadline - self._clock()
        if remaining <= 0:
            raise ClientThrottledError("the cycle's deadline passed before the eviction could be sent")
        timeout = min(self._timeout, remaining)
        query = {"dryRun": "All"} if self.dry_run else None
        if self.policy == "Eviction":
            body: dict[str, Any] = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": pod.name, "namespace": pod.namespace},
                "deleteOptions": self._options(pod, version),
            }
        else:
            body = self._options(pod, version)
        return self.api.request_raw(
            self._method, self._path(pod), query=query, body=body, timeout=timeout, deadline=deadline
        )

    # -- events ------------------------------------------------------------------------------------------
    def _first_warning(self, pod: Pod, result: str) -> bool:
        """At most one refusal or failure Warning per pod and kind within ``warning_window`` seconds: a pod
        that keeps being refused must not flood its Events (the log and metrics still count each one)."""
        now = self._clock()
        key = (pod.uid or pod.key, result)
        last = self._warned.get(key)
        if last is not None and now - last < self._warning_window:
            return False
        if len(self._warned) > 10_000:
            self._warned = {k: t for k, t in self._warned.items() if now - t < self._warning_window}
        self._warned[key] = now
        return True

    def _emit_restart(
        self, pod: Pod, node: str, reason: str, deployment: str, outcome: EvictionOutcome
    ) -> None:
        """Events on the pod and on its Deployment: why it was restarted, or why not."""
        if self.events is None or (self.dry_run and not self.events.write_in_dry_run):
            return
        result = outcome.result
        if result in ("failed", "throttled") and not self._first_warning(pod, result):
            return
        prefix = "[dry-run] " if self.dry_run else ""
        if result in ("restarted", "would-restart"):
            verb = "would be moved" if self.dry_run else "is moved"
            type_, why = "Normal", "Descheduled"
            pod_text = (
                f'{prefix}Pod {verb} off node "{node}" by a surge-first rollout restart of Deployment '
                f'{deployment} by the reason "{reason}"'
            )
            workload_text = (
                f'{prefix}Rollout restart to move pod {pod.name} off node {node} (reason "{reason}"): the '
                "new pod is created before the old one stops"
            )
            reason_code = "RolloutRestarted"
        elif result == "unknown":
            type_, why, reason_code = "Warning", "RestartOutcomeUnknown", "RestartOutcomeUnknown"
            pod_text = workload_text = (
                f"Rollout restart of Deployment {deployment} to move pod {pod.name} off node "
                f'"{node}" may have happened: {outcome.message}'
            )
        else:
            type_, why, reason_code = "Warning", "RestartFailed", "RestartFailed"
            pod_text = workload_text = (
                f"{prefix}Rollout restart of Deployment {deployment} to move pod {pod.name} off node "
                f'"{node}" failed: {outcome.message}'
            )
        self._restart_events(pod, deployment, type_, (why, pod_text), (reason_code, workload_text))

    def report_restart(self, pod: Pod, deployment: str, type_: str, reason: str, message: str) -> None:
        """How a restart we made turned out (``service/restarts.py``), on the Deployment and the pod."""
        self._restart_events(pod, deployment, type_, (reason, message), (reason, message))

    def _restart_events(
        self,
        pod: Pod,
        deployment: str,
        type_: str,
        on_pod: _Said,
        on_deployment: _Said,
    ) -> None:
        """The two Events every word on a restart writes, each a (reason, text): on the pod, on its
        Deployment. None where events are off, or in a dry run that writes none."""
        if self.events is None or (self.dry_run and not self.events.write_in_dry_run):
            return
        self.events.record(pod, type_, *on_pod, action="Restart")
        deployment_ref = Regarding.workload("Deployment", pod.namespace, deployment)
        self.events.record_object(deployment_ref, type_, *on_deployment, action="Restart")

    def report_resolved(self, pod: Pod, node: str, reason: str, result: str, message: str) -> None:
        """The final word on an ``unknown`` eviction (``evicted`` or ``failed``), once the cache showed it."""
        self._emit(pod, node, reason, EvictionOutcome(result, message))

    def _emit(self, pod: Pod, node: str, reason: str, outcome: EvictionOutcome) -> None:
        if self.events is None:
            return
        if self.dry_run and not self.events.write_in_dry_run:
            return
        if outcome.result in (
            "refused-by-pdb",
            "dry-run-refused",
            "failed",
            "throttled",
        ) and not self._first_warning(pod, outcome.result):
            return
        prefix = "[dry-run] " if self.dry_run else ""
        result = outcome.result
        if result == "evicted":
            self.events.record(pod, "Normal", "Descheduled", _descheduled_message(node, reason))
        elif result == "would-evict":
            self.events.record(
                pod,
                "Normal",
                "Descheduled",
                f'{prefix}Pod would be evicted from node "{node}" by the reason "{reason}"',
            )
        elif result in ("refused-by-pdb", "dry-run-refused"):
            self.events.record(
                pod,
                "Warning",
                "EvictionBlocked",
                f'{prefix}Eviction from node "{node}" (reason "{reason}") refused by a PodDisruptionBudget: '
                f"{outcome.message}",
            )
        elif result == "unknown":
            self.events.record(
                pod,
                "Warning",
                "EvictionOutcomeUnknown",
                f'Eviction from node "{node}" (reason "{reason}") may have happened: {outcome.message}',
            )
        elif result in ("failed", "throttled"):
            self.events.record(
                pod,
                "Warning",
                "EvictionFailed",
                f'{prefix}Eviction from node "{node}" (reason "{reason}") failed: {outcome.message}',
            )
