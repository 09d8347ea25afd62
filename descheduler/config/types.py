"""Reusable annotated field types: Go durations, percentages, quantities, int-or-percent."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field, PlainSerializer

from descheduler.units import format_duration, parse_duration, parse_int_or_percent


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

NonNegativeInt = Annotated[int, Field(ge=0)]
