"""How the evictor classifies refusals and validates its settings (no network involved)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from descheduler.cluster.types import Pod
from descheduler.config.load import ConfigError
from descheduler.config.migration import DELETE_OPTION_KEYS, delete_options_to_send
from descheduler.kube.api import Response, status_error
from descheduler.kube.evict import EvictionOutcome, Evictor
from descheduler.kube.flowcontrol import is_budget_refusal
from descheduler.planner.reasons import VERIFY_POD_CHANGED
from tests.unit.builders import settings


def error(status: int, body: dict[str, Any] | None = None, text: bytes = b"") -> Any:
    data = json.dumps(body).encode() if body is not None else text
    return status_error("POST", "/api/v1/namespaces/d/pods/p/eviction", Response(status, {}, data))


PDB_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."


@pytest.mark.parametrize(
    ("name", "err", "is_pdb"),
    [
        (
            "budget spent",
            error(
                429,
                {
                    "kind": "Status",
                    "message": PDB_MESSAGE,
                    "reason": "TooManyRequests",
                    "details": {"causes": [{"reason": "DisruptionBudget", "message": "x"}]},
                },
            ),
            True,
        ),
        (
            "budget still processing",
            error(
                429,
                {
                    "kind": "Status",
                    "message": PDB_MESSAGE,
                    "details": {"retryAfterSeconds": 10, "causes": [{"reason": "DisruptionBudget"}]},
                },
            ),
            True,
        ),
        (
            "negative allowed",
            error(
                403,
                {
                    "kind": "Status",
                    "reason": "Forbidden",
                    "message": 'poddisruptionbudgets.policy "p" is forbidden: pdb disruptions '
                    "allowed is negative",
                    "details": {"kind": "poddisruptionbudget"},
                },
            ),
            True,
        ),
        ("apf throttling", error(429, text=b"Too many requests, please try again later.\n"), False),
        (
            "rbac forbidden",
            error(
                403,
                {
                    "kind": "Status",
                    "reason": "Forbidden",
                    "message": 'pods "p" is forbidden: User "x" cannot create resource',
                    "details": {"kind": "pods"},
                },
            ),
            False,
        ),
    ],
)
def test_disruption_budget_refusals_are_told_apart_from_throttling(name: str, err: Any, is_pdb: bool) -> None:
    assert is_budget_refusal(err) is is_pdb, name


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"gracePeriod": 3}, "unknown field 'gracePeriod'"),
        ({"orphanDependents": True}, "unknown field 'orphanDependents'"),
        ({"gracePeriodSeconds": -1}, r"gracePeriodSeconds must be between 0 and 31622400 \(a year\), got -1"),
        ({"gracePeriodSeconds": 1.5}, "gracePeriodSeconds must be a non-negative integer"),
        ({"gracePeriodSeconds": True}, "gracePeriodSeconds must be a non-negative integer"),
        (
            {"propagationPolicy": "Sometimes"},
            "propagationPolicy must be one of Orphan, Background, Foreground",
        ),
        ({"preconditions": "uid"}, "preconditions must be an object"),
    ],
)
def test_the_evictor_refuses_the_delete_options_the_configuration_refuses(
    options: dict[str, Any], message: str
) -> None:
    """One check for both: what ``defaultDeleteOptions`` refuses, the evictor refuses in the same words."""
    with pytest.raises(ValueError, match=message):
        Evictor(None, delete_options=options, evict_qps=1, evict_burst=1, dry_run=False, events=None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=message):
        settings(migration={"defaultDeleteOptions": options})


def test_every_delete_option_key_the_configuration_accepts_is_one_the_evictor_accepts() -> None:
    good = {"gracePeriodSeconds": 0, "propagationPolicy": "Background", "preconditions": {}}
    owned = {"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["All"]}
    assert set(good) | set(owned) == DELETE_OPTION_KEYS
    evictor = Evictor(
        None,  # type: ignore[arg-type]
        delete_options={**good, **owned},
        evict_qps=1,
        evict_burst=1,
        dry_run=False,
        events=None,  # type: ignore[arg-type]
    )
    assert evictor.delete_options == good == delete_options_to_send({**good, **owned})
    settings(migration={"defaultDeleteOptions": {**good, **owned}})


def test_an_unknown_result_cannot_be_reported() -> None:
    with pytest.raises(ValueError, match="unknown eviction result"):
        EvictionOutcome("maybe", "")


def test_an_unknown_eviction_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="evictionPolicy must be one of Eviction, Delete"):
        Evictor(None, policy="Evict", evict_qps=1, evict_burst=1, dry_run=False, events=None)  # type: ignore[arg-type]


# --- verify, then evict, as one step (issue 37, point 7) ------------------------------------------------


@dataclass
class Api:
    """Answers each request with the next response; records each request's method, path and body."""

    answers: list[Response]
    sent: list[dict[str, Any]] = field(default_factory=list)

    def request_raw(self, method: str, path: str, **options: Any) -> Response:
        self.sent.append({"method": method, "path": path, **options})
        return self.answers.pop(0)


POD = Pod(namespace="shop", name="web-1", uid="u-1", node_name="hot")
APF_429 = Response(429, {"Retry-After": "1"}, b"Too many requests, please try again later.\n")
OK = Response(201, {}, b"{}")


def live_evictor(api: Api, sleep: Callable[[float], None] = lambda s: None) -> Evictor:
    return Evictor(api, evict_qps=100, evict_burst=10, dry_run=False, events=None, sleep=sleep)  # type: ignore[arg-type]


@pytest.mark.parametrize("policy", ["Eviction", "Delete"])
def test_the_request_carries_the_verified_pods_uid_and_resource_version(policy: str) -> None:
    api = Api([OK])
    evictor = Evictor(api, policy=policy, evict_qps=100, evict_burst=10, dry_run=False, events=None)  # type: ignore[arg-type]
    outcome = evictor.evict(POD, "hot", "r", 1e12, verify=lambda: None, resource_version=lambda: "4711")
    assert outcome.result == "evicted"
    body = api.sent[0]["body"]
    options = body["deleteOptions"] if policy == "Eviction" else body
    assert options["preconditions"] == {"uid": "u-1", "resourceVersion": "4711"}


def test_a_conflict_on_the_preconditions_is_a_changed_pod_and_is_not_retried() -> None:
    conflict = {
        "kind": "Status",
        "code": 409,
        "reason": "Conflict",
        "message": "Precondition failed: ResourceVersion in precondition: 4711, ResourceVersion in object "
        "meta: 4712",
    }
    api = Api([Response(409, {}, json.dumps(conflict).encode()), OK])
    outcome = live_evictor(api).evict(POD, "hot", "r", 1e12, resource_version=lambda: "4711")
    assert (outcome.result, outcome.code) == ("not-verified", VERIFY_POD_CHANGED)
    assert "changed since it was verified" in outcome.message
    assert len(api.sent) == 1, "never retried blindly"


@dataclass
class Wait:
    """A wait between the plan and the request during which an operator opts the pod out."""

    name: str
    answers: list[Response]
    during_journal_write: bool
    requests: int
    verifications: int


WAITS = [
    Wait("the journal write", [OK], during_journal_write=True, requests=0, verifications=1),
    Wait("a Retry-After wait", [APF_429, OK], during_journal_write=False, requests=1, verifications=2),
]


@pytest.mark.parametrize("wait", WAITS, ids=[w.name for w in WAITS])
def test_an_opt_out_made_during_any_wait_before_the_request_stops_the_eviction(wait: Wait) -> None:
    opted_out: list[bool] = []
    verified: list[str] = []

    def mark() -> None:
        opted_out.append(True)

    def journal_write() -> None:
        if wait.during_journal_write:
            mark()

    def verify() -> str | None:
        verified.append("read")
        return "annotated karpenter.sh/do-not-disrupt" if opted_out else None

    api = Api(list(wait.answers))
    evictor = live_evictor(api, sleep=lambda seconds: mark())
    outcome = evictor.evict(
        POD,
        "hot",
        "r",
        1e12,
        before_send=lambda: journal_write(),
        verify=verify,
        resource_version=lambda: "1",
    )
    assert outcome.result == "not-verified", outcome.message
    assert "do-not-disrupt" in outcome.message
    assert len(api.sent) == wait.requests
    assert len(verified) == wait.verifications, "read again after every wait, right before the request"
