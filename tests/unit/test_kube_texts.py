"""Decoding of API answers and the limits on Event text."""

from __future__ import annotations

import json

import pytest

from descheduler.kube.api import Response, status_error
from descheduler.kube.events import truncate_utf8


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("short", 10, "short"),
        ("exactly10!", 10, "exactly10!"),
        ("a" * 20, 10, "aaaaaaa..."),
        ("é" * 10, 10, "ééé..."),  # 2-byte characters are never split
        ("", 5, ""),
    ],
)
def test_truncate_utf8_cuts_on_character_boundaries(text: str, limit: int, expected: str) -> None:
    out = truncate_utf8(text, limit)
    assert out == expected
    assert len(out.encode()) <= limit


def test_a_status_body_gives_reason_message_and_retry_after() -> None:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": "TooManyRequests",
        "message": "Cannot evict pod",
        "code": 429,
        "details": {"retryAfterSeconds": 10, "causes": [{"reason": "DisruptionBudget", "message": "m"}]},
    }
    error = status_error("POST", "/x", Response(429, {}, json.dumps(body).encode()))
    assert (error.status, error.reason, error.message, error.retry_after) == (
        429,
        "TooManyRequests",
        "Cannot evict pod",
        10.0,
    )
    assert error.causes == [{"reason": "DisruptionBudget", "message": "m"}]
    assert str(error) == "POST /x: HTTP 429 TooManyRequests: Cannot evict pod"


def test_a_plain_text_answer_and_retry_after_header_are_understood() -> None:
    error = status_error(
        "POST", "/x", Response(429, {"Retry-After": "3"}, b"Too many requests, please try again later.\n")
    )
    assert error.message == "Too many requests, please try again later."
    assert error.retry_after == 3.0 and error.body is None and error.causes == []


def test_an_unparseable_retry_after_header_is_ignored() -> None:
    error = status_error("GET", "/x", Response(503, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, b""))
    assert error.retry_after is None and error.message == "(empty body)"
