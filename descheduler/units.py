"""Parsing of the value formats Kubernetes and Go write: quantities, durations, int-or-percent.

Kept dependency-free and exact (``Fraction``) because thresholds are compared against these numbers
and a rounding difference must never decide whether a pod is evicted.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

__all__ = [
    "cpu_millis",
    "format_duration",
    "memory_bytes",
    "parse_duration",
    "parse_int_or_percent",
    "parse_quantity",
    "resource_amount",
]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?\d+)|(?P<dec>[numkMGTPE]?))$"
)


def parse_quantity(value: object) -> Fraction:
    """Parse a Kubernetes resource quantity (``"1.5"``, ``"250m"``, ``"4Gi"``, ``"1e3"``, ``2``)."""
    if isinstance(value, bool):
        raise ValueError(f"quantity must be a number or string, got {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"quantity must be finite, got {value!r}")
        return Fraction(value)
    if not isinstance(value, str):
        raise ValueError(f"quantity must be a number or string, got {value!r}")
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (examples: 500m, 2, 4Gi, 1.5G)")
    number = Fraction(match.group("num"))
    if match.group("bin"):
        return number * _BINARY[match.group("bin")]
    if match.group("exp"):
        return number * Fraction(10) ** int(match.group("exp")[1:])
    return number * _DECIMAL[match.group("dec") or ""]


def cpu_millis(value: object) -> int:
    """CPU quantity in millicores, rounded up as Kubernetes does for ``MilliValue``."""
    return math.ceil(parse_quantity(value) * 1000)


def memory_bytes(value: object) -> int:
    """Byte quantity as an integer, rounded up."""
    return math.ceil(parse_quantity(value))


def resource_amount(resource: str, value: object) -> int:
    """Integer amount of a resource in its planning unit: millicores for cpu, plain units otherwise."""
    if isinstance(value, str):
        return _string_amount(resource, value)
    return cpu_millis(value) if resource == "cpu" else memory_bytes(value)


_PLAIN = re.compile(r"(\d{1,18})(m|Ki|Mi|Gi|Ti)?")
_PLAIN_SCALE = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


@functools.lru_cache(maxsize=8192)
def _string_amount(resource: str, value: str) -> int:
    """Memoised: a cluster writes the same few request strings ("100m", "128Mi") on thousands of pods.

    Whole numbers with no suffix, ``m`` or a binary suffix (what kubectl and usage files mostly hold) are
    converted with integers alone, exactly as the ``Fraction`` path would; anything else takes that path.
    """
    plain = _PLAIN.fullmatch(value)
    if plain is not None:
        number, suffix = int(plain.group(1)), plain.group(2)
        if suffix == "m":
            return number if resource == "cpu" else -(-number // 1000)
        scaled = number * _PLAIN_SCALE[suffix]
        return scaled * 1000 if resource == "cpu" else scaled
    return cpu_millis(value) if resource == "cpu" else memory_bytes(value)


_DURATION_UNITS = {
    "ns": Fraction(1, 10**9),
    "us": Fraction(1, 10**6),
    "µs": Fraction(1, 10**6),
    "μs": Fraction(1, 10**6),
    "ms": Fraction(1, 1000),
    "s": Fraction(1),
    "m": Fraction(60),
    "h": Fraction(3600),
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_WHOLE_DURATION = re.compile(r"(\d{1,15})([smh])")
_WHOLE_SECONDS = {"s": 1, "m": 60, "h": 3600}


def parse_duration(value: object) -> float:
    """Parse a Go duration string (``"90s"``, ``"5m"``, ``"1h30m"``, ``"0"``) into seconds."""
    if not isinstance(value, str):
        raise ValueError(f"duration must be a string like '90s', '5m' or '1h30m', got {value!r}")
    text = value.strip()
    whole = _WHOLE_DURATION.fullmatch(text)
    if whole is not None:
        # Whole seconds, minutes or hours (a usage file's ages, 155,000 of them in a large replay): exact
        # in integers, so the same float the general path's fractions give.
        return float(int(whole.group(1)) * _WHOLE_SECONDS[whole.group(2)])
    sign = 1
    if text[:1] in "+-" and text:
        sign = -1 if text[0] == "-" else 1
        text = text[1:]
    if text == "0":
        return 0.0
    if not text:
        raise ValueError(f"{value!r} is not a duration (examples: 90s, 5m, 1h30m)")
    total = Fraction(0)
    position = 0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            break
        total += Fraction(match.group(1)) * _DURATION_UNITS[match.group(2)]
        position = match.end()
    if position != len(text):
        raise ValueError(f"{value!r} is not a duration (examples: 90s, 5m, 1h30m; units ns us ms s m h)")
    return float(sign * total)


def format_duration(seconds: float) -> str:
    """Write seconds back the way Go prints durations, so effective config round-trips."""
    if seconds == 0:
        return "0s"
    sign = "-" if seconds < 0 else ""
    remaining = abs(seconds)
    hours, remaining = divmod(remaining, 3600)
    minutes, remaining = divmod(remaining, 60)
    out = sign
    if hours:
        out += f"{int(hours)}h"
    if hours or minutes:
        out += f"{int(minutes)}m"
    secs = f"{remaining:.9f}".rstrip("0").rstrip(".")
    return out + f"{secs}s"


def parse_int_or_percent(value: object) -> int | str:
    """Validate an int-or-string as Kubernetes does: a non-negative int or ``"N%"``."""
    if isinstance(value, bool):
        raise ValueError(f"expected an integer or a percentage like '10%', got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"must not be negative, got {value}")
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.endswith("%") and text[:-1].isdigit():
            return text
        if text.isdigit():
            return int(text)
    raise ValueError(f"expected an integer or a percentage like '10%', got {value!r}")
