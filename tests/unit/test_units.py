"""Quantities, durations and int-or-percent are read exactly as Kubernetes and Go read them."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from descheduler.units import (
    MAX_DURATION_SECONDS,
    MAX_INT64,
    cpu_millis,
    format_duration,
    memory_bytes,
    parse_duration,
    parse_int_or_percent,
    parse_quantity,
    resource_amount,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1", Fraction(1)),
        ("250m", Fraction(1, 4)),
        ("1.5", Fraction(3, 2)),
        ("4Gi", Fraction(4 * 2**30)),
        ("1k", Fraction(1000)),
        ("1Ki", Fraction(1024)),
        ("1e3", Fraction(1000)),
        ("2E", Fraction(2 * 10**18)),
        ("100n", Fraction(1, 10**7)),
        (".5", Fraction(1, 2)),
        (3, Fraction(3)),
    ],
)
def test_quantities_parse_exactly(text: object, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("bad", ["", "1.2.3", "10 Gi", "Gi", "1GB", "abc", True, None, float("nan")])
def test_malformed_quantities_are_refused(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_quantity(bad)


def test_cpu_is_counted_in_millicores_rounded_up_and_memory_in_bytes() -> None:
    assert cpu_millis("71272m") == 71272
    assert cpu_millis("104") == 104000
    assert cpu_millis("0.0001") == 1
    assert memory_bytes("396Gi") == 396 * 2**30


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0.0), ("90s", 90.0), ("1h30m", 5400.0), ("1.5h", 5400.0), ("300ms", 0.3), ("2m3s", 123.0)],
)
def test_go_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@given(st.integers(min_value=0, max_value=10**15 - 1), st.sampled_from([("s", 1), ("m", 60), ("h", 3600)]))
def test_whole_seconds_minutes_and_hours_parse_exactly_within_gos_range(
    amount: int, unit: tuple[str, int]
) -> None:
    name, seconds = unit
    if amount * seconds <= MAX_DURATION_SECONDS:
        assert parse_duration(f"{amount}{name}") == float(Fraction(amount) * seconds)
    else:
        with pytest.raises(ValueError, match="out of range"):
            parse_duration(f"{amount}{name}")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("2562047h47m16.854775807s", float(MAX_DURATION_SECONDS)), ("-2562047h", -2562047 * 3600.0)],
)
def test_durations_at_gos_limit_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "bad", ["999999999999999h", "2562047h47m16.854775808s", "-2562048h", "1" * 101 + "s", "9" * 400 + "h"]
)
def test_durations_beyond_gos_int64_nanoseconds_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match=r"out of range|too long"):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ("1e400", "exponent"),
        ("1e999999999", "exponent"),
        ("1e-999999999", "exponent"),
        ("9" * 5000, "too long"),
        ("9" * 65, "too long"),
        ("8Ei", "out of range"),
        ("9223372036854775808", "out of range"),
        ("10E", "out of range"),
        ("1e19", "out of range"),
        (2**63, "out of range"),
        (10**4000, "out of range"),
        (1e300, "out of range"),
    ],
)
def test_quantities_beyond_int64_are_refused_fast(bad: object, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_quantity(bad)


@pytest.mark.parametrize(("resource", "text"), [("memory", "999999999999999999Ti"), ("cpu", "9" * 19)])
def test_resource_amounts_beyond_int64_are_refused(resource: str, text: str) -> None:
    with pytest.raises(ValueError, match="out of range"):
        resource_amount(resource, text)


def test_quantities_at_the_int64_limit_parse() -> None:
    assert parse_quantity(str(MAX_INT64)) == MAX_INT64
    assert parse_quantity("7Ei") == 7 * 2**60
    assert parse_quantity("1e-100") == Fraction(1, 10**100)


@pytest.mark.parametrize("bad", ["", "5", "5x", "m5", "1h 30m", "s"])
def test_malformed_durations_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


@given(st.integers(min_value=0, max_value=10**6))
def test_formatted_durations_parse_back_to_the_same_seconds(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize(("value", "parsed"), [(3, 3), ("3", 3), ("10%", "10%"), ("0", 0)])
def test_int_or_percent_accepts_ints_and_percentages(value: object, parsed: object) -> None:
    assert parse_int_or_percent(value) == parsed


@pytest.mark.parametrize(
    "bad", [-1, "10x", "%", "1.5", True, None, 2**31, "2147483648", "99999999999%", "9" * 5000]
)
def test_int_or_percent_refuses_everything_else(bad: object) -> None:
    with pytest.raises(ValueError):
        parse_int_or_percent(bad)


@given(
    st.integers(min_value=0, max_value=10**18 - 1),
    st.sampled_from(["", "m", "Ki", "Mi", "Gi", "Ti"]),
    st.sampled_from(["cpu", "memory", "pods", "nvidia.com/gpu"]),
)
def test_the_integer_fast_path_gives_exactly_what_the_exact_parser_gives(
    number: int, suffix: str, resource: str
) -> None:
    text = f"{number}{suffix}"
    try:
        exact: int | str = cpu_millis(text) if resource == "cpu" else memory_bytes(text)
    except ValueError as exc:  # beyond int64: both paths refuse it
        exact = str(exc)
    try:
        fast: int | str = resource_amount(resource, text)
    except ValueError as exc:
        fast = str(exc)
    assert fast == exact
