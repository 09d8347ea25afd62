"""Reusable annotated field types: Go durations, percentages, quantities, int-or-percent."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from fractions import Fraction
from typing import Annotated, TypeVar

from pydantic import AfterValidator, BeforeValidator, Field, PlainSerializer, Strict

from descheduler.config.base import quoted
from descheduler.units import MAX_INT32, format_duration, parse_duration, parse_int_or_percent

_V = TypeVar("_V")

NANOS = 10**9

MAX_CONFIG_DURATION = 366 * 24 * 3600.0
"""No setting of this product means anything beyond a year; past it, sums and timeouts built from a
duration (a watch timeout plus jitter, a wait) could overflow what Python's waits accept."""

MAX_CONFIG_INT = MAX_INT32
"""Counts, limits and weights: an int32, as the Kubernetes fields they mirror."""

MAX_CONFIG_RATE = 1e6
"""Requests or evictions per second: far above anything an API server serves."""


def _duration(value: object) -> float:
    """Whole nanoseconds, as Go's ``time.Duration`` holds them (``0.1ns`` is 0): every value kept prints
    (``format_duration``) as text that parses back to the same value, so ``validate``'s output validates."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise ValueError(f"duration must be written with a unit like '90s' or '5m', got {quoted(value)}")
    return float(Fraction(round(Fraction(parse_duration(value)) * NANOS), NANOS))


def _bounded_duration(value: float) -> float:
    """A negative duration would switch a limit off (or stop every eviction) without a word: refused."""
    if value < 0:
        raise ValueError(f"must be a positive duration or 0, got {format_duration(value)}")
    if value > MAX_CONFIG_DURATION:
        raise ValueError(f"must be at most 8784h (a year), got {format_duration(value)}")
    return value


Duration = Annotated[
    float,
    BeforeValidator(_duration),
    AfterValidator(_bounded_duration),
    PlainSerializer(format_duration, return_type=str),
]
"""Seconds, written and printed the way Go's ``time.Duration`` is (``90s``, ``5m``, ``1h30m``);
0 to a year (``MAX_CONFIG_DURATION``)."""


def _percent(value: object) -> float:
    if isinstance(value, bool):
        raise ValueError(f"percentage must be a number 0..100, got {quoted(value)}")
    if isinstance(value, str):
        text = value.strip().rstrip("%")
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"percentage must be a number 0..100, got {quoted(value)}") from None
    if not isinstance(value, int | float):
        raise ValueError(f"percentage must be a number 0..100, got {quoted(value)}")
    if not 0 <= value <= 100:
        raise ValueError(f"percentage must be between 0 and 100, got {quoted(value)}")
    return float(value)


Percent = Annotated[float, BeforeValidator(_percent)]


def _float_or_string(value: object) -> float:
    """Koordinator writes ``evictQPS: "10"`` (a string holding a float)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {quoted(value)}")
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"expected a number (or a string holding one), got {quoted(str(value))}") from None
    if number < 0 or number != number:
        raise ValueError(f"must be a non-negative number, got {quoted(value)}")
    if number > MAX_CONFIG_RATE:
        raise ValueError(f"must be at most {MAX_CONFIG_RATE:g}, got {quoted(str(value))}")
    return number


FloatOrString = Annotated[float, BeforeValidator(_float_or_string)]


def _share_of_replicas(value: int | str) -> int | str:
    if isinstance(value, str) and int(value.rstrip("%")) > 100:
        raise ValueError(f"a share of a workload's replicas cannot exceed 100%, got {quoted(value)}")
    return value


ReplicasIntOrPercent = Annotated[
    int | str, BeforeValidator(parse_int_or_percent), AfterValidator(_share_of_replicas)
]
"""A per-workload limit: an integer or a percentage of the expected replicas, at most ``"100%"``."""

NonNegativeInt = Annotated[int, Strict(), Field(ge=0, le=MAX_CONFIG_INT)]
Int32 = Annotated[int, Strict(), Field(ge=-MAX_CONFIG_INT - 1, le=MAX_CONFIG_INT)]
"""Integers are strict (every ``int`` field of the configuration is ``StrictInt`` or one of these): YAML's
``true`` would otherwise count as 1 and a quoted ``"5"`` or a ``2.0`` pass where Kubernetes refuses them."""

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def checked(problem: Callable[[str], str | None], prefix: str = "") -> AfterValidator:
    """A string field's validator from a ``*_problem`` function: its answer, when not None, is the error
    (after ``prefix``). One way for every such check to reach pydantic as a ``ValueError``."""

    def check(value: str) -> str:
        found = problem(value)
        if found is not None:
            raise ValueError(f"{prefix}{found}")
        return value

    return AfterValidator(check)


def at_least(seconds: float, message: str) -> AfterValidator:
    """A duration field's validator: ``seconds`` or longer, else ``message`` and the value (where a shorter
    one makes no sense, such as a sub-second cycle or budget period); None (unset) passes."""

    def check(value: float | None) -> float | None:
        if value is not None and value < seconds:
            raise ValueError(f"{message} (at least {format_duration(seconds)}), got {format_duration(value)}")
        return value

    return AfterValidator(check)


def positive(message: str) -> AfterValidator:
    """A number field's validator (a duration, mostly): above 0, else ``message``; None (unset) passes."""

    def check(value: float | None) -> float | None:
        if value is not None and value <= 0:
            raise ValueError(message)
        return value

    return AfterValidator(check)


def dns1123_label_problem(value: str) -> str | None:
    """Why ``value`` cannot be a namespace (a DNS-1123 label, as Kubernetes checks), or None."""
    if len(value) > 63 or not _DNS1123_LABEL.match(value):
        return (
            f"{quoted(value)} is not a valid namespace name: at most 63 lowercase letters, digits or '-', "
            "starting and ending with a letter or digit"
        )
    return None


def dns1123_subdomain_problem(value: str, max_length: int = 253) -> str | None:
    """Why ``value`` cannot name an object such as a Lease (a DNS-1123 subdomain), or None."""
    if len(value) > max_length or not _DNS1123_SUBDOMAIN.match(value):
        return (
            f"{quoted(value)} is not a valid object name: at most {max_length} lowercase letters, digits, "
            "'-' or '.', starting and ending with a letter or digit"
        )
    return None


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
            f"{quoted(name)} is not a valid extended resource name (domain/name, e.g. 'nvidia.com/gpu': "
            "a lowercase DNS domain, then at most 63 letters, digits, '-', '_' or '.')"
        )
    close = (
        difflib.get_close_matches(name.lower(), KNOWN_RESOURCES, n=1, cutoff=0.75) if len(name) < 80 else []
    )
    hint = f"; did you mean {close[0]!r}?" if close else ""
    known = ", ".join(KNOWN_RESOURCES)
    return (
        f"unknown resource {quoted(name)}{hint} (known: {known}; extended resources are written domain/name)"
    )


def _resource_names(value: dict[str, _V]) -> dict[str, _V]:
    problems = [p for p in (resource_name_problem(name) for name in value) if p is not None]
    if problems:
        raise ValueError("; ".join(problems))
    return value


ResourceThresholds = Annotated[dict[str, Percent], AfterValidator(_resource_names)]
"""Percent per resource name; names are checked (``resource_name_problem``)."""

ResourceWeights = Annotated[dict[str, NonNegativeInt], AfterValidator(_resource_names)]
"""Weight per resource name; names are checked like those of thresholds."""
