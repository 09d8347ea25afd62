"""The restart request (``Evictor.restart``): what ``kubectl rollout restart`` patches, carrying the verified
resourceVersion, dry run on the server, each answer classified as evictions' are, Events on both objects."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from descheduler.cluster.types import Pod
from descheduler.kube.api import Response
from descheduler.kube.errors import ApiTimeoutError
from descheduler.kube.events import Regarding
from descheduler.kube.evict import RESTARTED_AT, STRATEGIC_MERGE_PATCH, Evictor
from tests.unit.builders import NOW

POD = Pod(namespace="shop", name="web-7c9-abcde", uid="u-1", node_name="hot")


@dataclass
class Api:
    """Answers each request with the next response (or raises it); records what was sent."""

    answers: list[Response | Exception]
    sent: list[dict[str, Any]] = field(default_factory=list)

    def request_raw(self, method: str, path: str, **options: Any) -> Response:
        self.sent.append({"method": method, "path": path, **options})
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


@dataclass
class Events:
    write_in_dry_run: bool = True
    on_pods: list[tuple[str, str, str]] = field(default_factory=list)
    on_objects: list[tuple[str, str, str, str]] = field(default_factory=list)

    def record(self, pod: Pod, type_: str, reason: str, message: str, *, action: str = "Evict") -> None:
        self.on_pods.append((pod.key, type_, reason))

    def record_object(self, regarding: Regarding, type_: str, reason: str, message: str, **_: Any) -> None:
        r = regarding
        self.on_objects.append((f"{r.api_version}/{r.kind}", f"{r.namespace}/{r.name}", type_, reason))


def evictor(answers: list[Response | Exception], *, dry_run: bool = False) -> tuple[Evictor, Api, Events]:
    api, events = Api(answers), Events()
    made = Evictor(
        api,  # type: ignore[arg-type]
        evict_qps=100,
        evict_burst=10,
        dry_run=dry_run,
        events=events,  # type: ignore[arg-type]
        wall=lambda: NOW,
    )
    return made, api, events


def status(code: int, message: str = "") -> Response:
    return Response(code, {}, json.dumps({"kind": "Status", "code": code, "message": message}).encode())


@pytest.mark.parametrize(("dry_run", "result"), [(False, "restarted"), (True, "would-restart")])
def test_the_patch_is_kubectls_restart_with_the_verified_version(dry_run: bool, result: str) -> None:
    made, api, events = evictor([Response(200, {}, b"{}")], dry_run=dry_run)
    hooks: list[str] = []
    outcome = made.restart(
        POD,
        "hot",
        "node is overutilized",
        deadline=1e12,
        deployment="web",
        verify=lambda: hooks.append("verify") or None,
        before_send=lambda: hooks.append("intent") or None,
        resource_version=lambda: "42",
    )
    assert outcome.result == result
    assert hooks == (["verify"] if dry_run else ["intent", "verify"]), "the intent record is written first"
    (sent,) = api.sent
    assert (sent["method"], sent["path"]) == ("PATCH", "/apis/apps/v1/namespaces/shop/deployments/web")
    assert sent["content_type"] == STRATEGIC_MERGE_PATCH
    assert sent["query"] == ({"dryRun": "All"} if dry_run else None)
    assert sent["body"]["metadata"] == {"resourceVersion": "42"}
    stamp = sent["body"]["spec"]["template"]["metadata"]["annotations"][RESTARTED_AT]
    assert stamp == "2026-01-01T12:00:00Z"
    assert events.on_pods == [("shop/web-7c9-abcde", "Normal", "Descheduled")]
    assert events.on_objects == [("apps/v1/Deployment", "shop/web", "Normal", "RolloutRestarted")]


@pytest.mark.parametrize(
    ("answer", "result", "event"),
    [
        (status(409, "the object has been modified"), "failed", None),
        (status(404, "not found"), "not-found", None),
        (status(503, "unavailable"), "unknown", "RestartOutcomeUnknown"),
        (ApiTimeoutError("read timed out", sent=True), "unknown", "RestartOutcomeUnknown"),
        (ApiTimeoutError("connect timed out", sent=False), "failed", "RestartFailed"),
        (status(403, "forbidden: cannot patch deployments"), "failed", "RestartFailed"),
    ],
)
def test_each_answer_is_classified_as_an_evictions_would_be(
    answer: Response | Exception, result: str, event: str | None
) -> None:
    made, _, events = evictor([answer])
    outcome = made.restart(POD, "hot", "r", deadline=1e12, deployment="web")
    assert outcome.result == result
    assert [o[3] for o in events.on_objects] == ([event] if event else [])


def test_without_a_verified_version_the_patch_has_no_precondition() -> None:
    made, api, _ = evictor([Response(200, {}, b"{}")])
    made.restart(POD, "hot", "r", deadline=1e12, deployment="web")
    assert "metadata" not in api.sent[0]["body"]
