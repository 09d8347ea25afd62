"""How the evictor classifies refusals and validates its settings (no network involved)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from descheduler.config.load import ConfigError
from descheduler.config.migration import DELETE_OPTION_KEYS, delete_options_to_send
from descheduler.kube.api import Response, status_error
from descheduler.kube.evict import EvictionOutcome, Evictor, _is_pdb_refusal
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
    assert _is_pdb_refusal(err) is is_pdb, name


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
