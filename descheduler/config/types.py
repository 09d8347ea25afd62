"""Reusable annotated field types: Go durations, percentages, quantities, int-or-percent."""

from __future__ import annotations

import difflib
import re
from typing import Annotated, TypeVar

from pydantic import AfterValidator, BeforeValidator, Field, PlainSerializer

from descheduler.units import format_duration, parse_duration, parse_int_or_percent

_V = TypeVar("_V")


def _duration(value: object) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise ValueError(f"duration must be written with a unit like '90s' or '5m', got {value!r}")
    return parse_duration(value)


def _non_negative(value: float) -> float:
    if value < 0:
        raise ValueError(f"duration must not be negative, got {format_duration(value)}")
    return value


Duration = Annotated[
    float,
    BeforeValidator(_duration),
    PlainSerializer(format_duration, return_type=str),
]
"""Seconds, written and printed the way Go's ``time.Duration`` is (``90s``, ``5m``, ``1h30m``)."""


def _percent(value: object) -> float:
    if isinstance(value, bool):
        raise ValueError(f"percentage must be a number 0..100, got {value!r}")
    if isinstance(value, str):
        text = value.strip().rstrip("%")
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"percentage must be a number 0..100, got {value!r}") from None
    if not isinstance(value, int | float):
        raise ValueError(f"percentage must be a number 0..100, got {value!r}")
    if not 0 <= value <= 100:
        raise ValueError(f"percentage must be between 0 and 100, got {value!r}")
    return float(value)


Percent = Annotated[float, BeforeValidator(_percent)]


def _float_or_string(value: object) -> float:
    """Koordinator writes ``evictQPS: "10"`` (a string holding a float)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"expected a number (or a string holding one), got {value!r}") from None
    if number < 0 or number != number:
        raise ValueError(f"must be a non-negative number, got {value!r}")
    return number


FloatOrString = Annotated[float, BeforeValidator(_float_or_string)]

IntOrPercent = Annotated[int | str, BeforeValidator(parse_int_or_percent)]
"""A non-negative integer or ``"N%"``, as Kubernetes' ``intstr.IntOrString``."""


def _share_of_replicas(value: int | str) -> int | str:
    if isinstance(value, str) and int(value.rstrip("%")) > 100:
        raise ValueError(f"a share of a workload's replicas cannot exceed 100%, got {value!r}")
    return value


ReplicasIntOrPercent = Annotated[
    int | str, BeforeValidator(parse_int_or_percent), AfterValidator(_share_of_replicas)
]
"""A per-workload limit: an integer or a percentage of the expected replicas, at most ``"100%"``."""

NonNegativeInt = Annotated[int, Field(ge=0)]


KNOWN_RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DOMAIN = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def resource_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a node resource of thresholds or weights, or None if it can.

    Accepted: the resources Kubernetes and the metrics sources know (``cpu``, ``memory``, ``pods``,
    ``ephemeral-storage``) and extended resources written ``domain/name`` as Kubernetes qualifies them
    (Koordinator's ``kubernetes.io/batch-cpu`` included). A typo silently counting as 0 would make a
    threshold that never triggers, so anything else is an error with the nearest known name.
    """
    if name in KNOWN_RESOURCES:
        return None
    domain, slash, short = name.partition("/")
    if slash:
        if (
            _DOMAIN.match(domain)
            and len(domain) <= 253
            and _NAME.match(short)
            and len(short) <= 63
            and not name.startswith("requests.")
        ):
            return None
        return (
            f"{name!r} is not a valid extended resource name (domain/name, e.g. 'nvidia.com/gpu': "
            "a lowercase DNS domain, then at most 63 letters, digits, '-', '_' or '.')"
        )
    close = difflib.get_close_matches(name.lower(), KNOWN_RESOURCES, n=1, cutoff=0.75)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    known = ", ".join(KNOWN_RESOURCES)
    return f"unknown resource {name!r}{hint} (known: {known}; extended resources are written domain/name)"


def _resource_names(value: dict[str, _V]) -> dict[str, _V]:
    problems = [p for p in (resource_name_problem(name) for name in value) if p is not None]
    if problems:
        raise ValueError("; ".join(problems))
    return value


ResourceThresholds = Annotated[dict[str, Percent], AfterValidator(_resource_names)]
"""Percent per resource name; names are checked (``resource_name_problem``)."""

ResourceWeights = Annotated[dict[str, NonNegativeInt], AfterValidator(_resource_names)]
"""Weight per resource name; names are checked like those of thresholds."""
