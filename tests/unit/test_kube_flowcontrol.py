"""The API server's flow control as our client reads it: which 429s are APF rejections, the FlowSchema and
priority level UIDs they name, and the Retry-After waits (jittered upwards, capped) of the evictor and the
cache's reflectors."""

from __future__ import annotations

from typing import Any

import pytest

from descheduler.kube.cache import Backoff, failure_delay
from descheduler.kube.errors import ApiStatusError, ApiTimeoutError
from descheduler.kube.flowcontrol import (
    FLOW_SCHEMA_HEADER,
    PRIORITY_LEVEL_HEADER,
    FlowControlLedger,
    classified_as,
    retry_wait,
)

SCHEMA = "6f1f6c1e-0c3a-4d57-9a43-2f6b0f0f6a10"
LEVEL = "0b4a8c1f-6d5e-4a41-8a77-6a9f3b1c2d3e"
APF_BODY: dict[str, Any] = {"kind": "Status", "reason": "TooManyRequests", "message": "Too many requests"}
PDB_BODY: dict[str, Any] = {
    "kind": "Status",
    "reason": "TooManyRequests",
    "message": "Cannot evict pod as it would violate the pod's disruption budget.",
    "details": {"causes": [{"reason": "DisruptionBudget", "message": "needs 2 healthy pods"}]},
}

HEADER_CASES: list[tuple[str, dict[str, str], tuple[str, str]]] = [
    ("both headers", {FLOW_SCHEMA_HEADER: SCHEMA, PRIORITY_LEVEL_HEADER: LEVEL}, (SCHEMA, LEVEL)),
    (
        "header names in any case",
        {FLOW_SCHEMA_HEADER.lower(): SCHEMA, PRIORITY_LEVEL_HEADER.upper(): LEVEL},
        (SCHEMA, LEVEL),
    ),
    ("no headers (a proxy's 429)", {}, ("unknown", "unknown")),
    ("an empty header", {FLOW_SCHEMA_HEADER: " ", PRIORITY_LEVEL_HEADER: LEVEL}, ("unknown", LEVEL)),
    (
        "a value that is no UID is not a label",
        {FLOW_SCHEMA_HEADER: 'x"} evil', PRIORITY_LEVEL_HEADER: "a" * 65},
        ("invalid", "invalid"),
    ),
]


@pytest.mark.parametrize(("_case", "headers", "expected"), HEADER_CASES, ids=[c[0] for c in HEADER_CASES])
def test_the_flow_schema_and_priority_level_are_read_from_the_response_headers(
    _case: str, headers: dict[str, str], expected: tuple[str, str]
) -> None:
    assert classified_as(headers) == expected


COUNT_CASES: list[tuple[str, int, dict[str, Any] | None, bool]] = [
    ("an APF rejection", 429, APF_BODY, True),
    ("an APF rejection in plain text", 429, None, True),
    ("a disruption budget's refusal", 429, PDB_BODY, False),
    ("a server error", 500, None, False),
    ("a conflict", 409, None, False),
]


@pytest.mark.parametrize(("_case", "status", "body", "counted"), COUNT_CASES, ids=[c[0] for c in COUNT_CASES])
def test_only_the_servers_flow_control_rejections_are_counted_by_schema_and_level(
    _case: str, status: int, body: dict[str, Any] | None, counted: bool
) -> None:
    ledger = FlowControlLedger()
    error = ApiStatusError(status, str((body or {}).get("message", "x")), body=body, retry_after=3.0)
    headers = {FLOW_SCHEMA_HEADER: SCHEMA, PRIORITY_LEVEL_HEADER: LEVEL}
    assert ledger.note(error, headers, at=100.0, path="GET /api/v1/pods") is counted
    assert ledger.counts() == ({(SCHEMA, LEVEL): 1} if counted else {})
    shown = ledger.recent(now=110.0)
    if counted:
        assert "rejected 1 request(s)" in shown and "10s ago" in shown and "Retry-After 3s" in shown
        assert SCHEMA in shown and LEVEL in shown and "GET /api/v1/pods" in shown
    else:
        assert shown == ""


def test_a_rejection_leaves_the_readiness_detail_once_it_is_old() -> None:
    ledger = FlowControlLedger()
    ledger.note(ApiStatusError(429, "Too many requests", retry_after=1.0), {}, at=0.0, path="GET /x")
    ledger.note(ApiStatusError(429, "Too many requests", retry_after=1.0), {}, at=5.0, path="GET /x")
    assert ledger.counts() == {("unknown", "unknown"): 2}
    assert "rejected 2 request(s)" in ledger.recent(now=100.0)
    assert ledger.recent(now=5.0 + 121.0) == ""


WAIT_CASES: list[tuple[str, float | None, float, float]] = [
    ("the server's Retry-After at the least", 5.0, 0.0, 5.0),
    ("plus at most a fifth more", 5.0, 1.0, 6.0),
    ("one second when the server names none", None, 0.0, 1.0),
    ("a negative Retry-After is no wait", -3.0, 1.0, 0.0),
    ("capped at a minute", 86400.0, 0.0, 60.0),
]


@pytest.mark.parametrize(("_case", "asked", "rand", "wait"), WAIT_CASES, ids=[c[0] for c in WAIT_CASES])
def test_a_rejection_is_retried_after_its_retry_after_jittered_upwards(
    _case: str, asked: float | None, rand: float, wait: float
) -> None:
    assert retry_wait(asked, rand=lambda: rand) == pytest.approx(wait)


REFLECTOR_CASES: list[tuple[str, BaseException, float, float]] = [
    (
        "a 429 waits its Retry-After, not the short backoff",
        ApiStatusError(429, "x", retry_after=7.0),
        7.0,
        8.4,
    ),
    ("a 429 without one waits at least a second", ApiStatusError(429, "x"), 1.0, 1.2),
    ("a timeout keeps the backoff", ApiTimeoutError("x"), 0.4, 0.6),
    ("a 500 keeps the backoff", ApiStatusError(500, "x", retry_after=7.0), 0.4, 0.6),
]


@pytest.mark.parametrize(
    ("_case", "error", "least", "most"), REFLECTOR_CASES, ids=[c[0] for c in REFLECTOR_CASES]
)
def test_a_reflector_refused_by_flow_control_waits_at_least_the_servers_retry_after(
    _case: str, error: BaseException, least: float, most: float
) -> None:
    for rand in (0.0, 0.999):
        delay = failure_delay(Backoff(0.5, 30.0, healthy_after=60.0, rand=lambda r=rand: r), error)
        assert least <= delay <= most
