"""How the evictor classifies refusals and validates its settings (no network involved)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from descheduler.kube.api import Response, status_error
from descheduler.kube.evict import EvictionOutcome, Evictor, _is_pdb_refusal, validate_delete_options


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
    assert _is_pdb_refusal(err) is is_pdb, name


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"gracePeriod": 3}, "deleteOptions.gracePeriod: unknown field"),
        ({"gracePeriodSeconds": -1}, "gracePeriodSeconds must be a non-negative integer"),
        ({"gracePeriodSeconds": True}, "gracePeriodSeconds must be a non-negative integer"),
        (
            {"propagationPolicy": "Sometimes"},
            "propagationPolicy must be one of Orphan, Background, Foreground",
        ),
        ({"preconditions": "uid"}, "preconditions must be an object"),
    ],
)
def test_bad_delete_options_are_named(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_delete_options(options)


def test_delete_options_drop_the_envelope_and_dry_run_the_evictor_owns() -> None:
    assert validate_delete_options(
        {"kind": "DeleteOptions", "apiVersion": "v1", "dryRun": ["All"], "gracePeriodSeconds": 0}
    ) == {"gracePeriodSeconds": 0}


def test_an_unknown_result_cannot_be_reported() -> None:
    with pytest.raises(ValueError, match="unknown eviction result"):
        EvictionOutcome("maybe", "")


def test_an_unknown_eviction_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="evictionPolicy must be one of Eviction, Delete"):
        Evictor(None, policy="Evict", evict_qps=1, evict_burst=1, dry_run=False, events=None)  # type: ignore[arg-type]
