"""DRA device selectors: CEL evaluated against a device as kube-scheduler's environment defines it."""

from __future__ import annotations

import pytest

from descheduler.cluster.types import Device
from descheduler.planner import cel
from descheduler.planner.cel import (
    _ENVIRONMENT,
    EVALUATION_COST,
    MAX_COST,
    CelBudgetError,
    CelError,
    Meter,
    _Estimate,
    compile_selector,
    device_view,
    selects,
)
from tests.unit.guards import within

DRIVER = "gpu.example.com"
GPU = Device(
    name="gpu-0",
    attributes={
        f"{DRIVER}/model": "a100",
        f"{DRIVER}/index": 3,
        f"{DRIVER}/healthy": True,
        f"{DRIVER}/driverVersion": "1.2.3-rc.1",
        "pci.example.com/root": "0000:00",
    },
    versions=frozenset({f"{DRIVER}/driverVersion"}),
    capacity={f"{DRIVER}/memory": 40 * 2**30},
)
A = f"device.attributes['{DRIVER}']"
C = f"device.capacity['{DRIVER}']"

HOLDS: list[tuple[str, bool]] = [
    (f"device.driver == '{DRIVER}'", True),
    ("device.driver == 'other.example.com'", False),
    (f"{A}.model == 'a100'", True),
    (f"{A}.model == 'h100'", False),
    (f"{A}.index >= 3 && {A}.healthy", True),
    ("device.attributes['pci.example.com'].root.startsWith('0000')", True),
    (f"{A}.model.matches('^a[0-9]+$')", True),
    (f"has({A}.model)", True),
    ("has(device.attributes['unknown.example.com'].model)", False),
    ("'model' in device.attributes['unknown.example.com']", False),
    (f"{C}.memory.compareTo(quantity('40Gi')) == 0", True),
    (f"{C}.memory.isGreaterThan(quantity('32Gi'))", True),
    (f"{C}.memory.isLessThan(quantity('32Gi'))", False),
    (f"{C}.memory == quantity('40Gi')", True),
    (f"{C}.memory.asInteger() == {40 * 2**30}", True),
    (f"{C}.memory.sub(quantity('8Gi')).isGreaterThan(quantity('32Gi'))", False),
    ("quantity('1500m').isInteger()", False),
    ("isQuantity('2Gi') && !isQuantity('two')", True),
    (f"{A}.driverVersion.isLessThan(semver('1.2.3'))", True),
    (f"{A}.driverVersion.isGreaterThan(semver('1.2.3-beta.9'))", True),
    (f"{A}.driverVersion.major() == 1 && {A}.driverVersion.minor() == 2", True),
    ("semver('1.10.0').compareTo(semver('1.9.0')) == 1", True),
    ("isSemver('1.2') || !isSemver('1.2.0')", False),
    ("device.allowMultipleAllocations", False),
    ("[1, 2, 3].all(x, x > 0)", True),
]


@pytest.mark.parametrize(("expression", "expected"), HOLDS)
def test_selectors_hold_or_not_on_the_device(expression: str, expected: bool) -> None:
    assert selects(compile_selector(expression), device_view(DRIVER, GPU)) is expected


FAILS: list[tuple[str, str]] = [
    (f"{A}.memoryType == 'hbm'", "no such member in mapping: 'memoryType'"),
    ("device.attributes['unknown.example.com'].model == 'a100'", "no such member in mapping: 'model'"),
    ("gpuCount(device) > 1", "undeclared reference to 'gpuCount'"),
    (f"{A}.index > 'x'", "no matching overload for '>' applied to (int, string)"),
    (f"{C}.memory > quantity('1Gi')", "no matching overload for '>' applied to (quantity, quantity)"),
    ("quantity('lots').sign() == 1", "'lots' is not a quantity"),
    ("semver('v1').major() == 1", "'v1' is not a semantic version"),
    ("device.driver", "expression yields a string, not a bool"),
    (f"{A}.index", "expression yields a int, not a bool"),
    ("device.driver ==", "syntax error at line 1"),
    ("[1, 2].reduce(a, b, 0, a + b) == 3", "undeclared reference to 'reduce'"),
    ("9223372036854775807 + 1 > 0", "overflow"),
    ("(" * 40 + "true" + ")" * 40, "nested too deeply"),
    (
        "[" + ", ".join(["1"] * 200) + "].all(x, [" + ", ".join(["1"] * 200) + "].all(y, x == y))",
        f"estimated cost above {MAX_COST}",
    ),
    ("x" * 10241, "longer than 10240 characters"),
]


@pytest.mark.parametrize(("expression", "message"), FAILS, ids=[f[1] for f in FAILS])
def test_expressions_that_cannot_be_evaluated_give_one_short_line(expression: str, message: str) -> None:
    with pytest.raises(CelError) as error:
        selects(compile_selector(expression), device_view(DRIVER, GPU))
    text = str(error.value)
    assert message in text
    assert len(text) <= 200 and "\n" not in text and "activation" not in text.lower()


def test_an_expression_is_compiled_once() -> None:
    assert compile_selector("device.driver != ''") is compile_selector("device.driver != ''")


# --- issue 37, point 18: selectors written by namespace users are bounded ------------------------------


HOSTILE: list[tuple[str, str]] = [
    ("lists doubled through 22 chained maps", "[[1]]" + ".map(l, l + l)" * 22 + ".size() > 0"),
    ("strings doubled through 34 chained maps", '["ab"]' + ".map(s, s + s)" * 34 + ".size() > 0"),
    ("a shared tree compared leaf by leaf", " == ".join(["[[1]]" + ".map(l, [l, l])" * 30] * 2)),
    ("a comprehension over a long literal", "[" + ", ".join(["1"] * 900) + "].all(x, x == 1)"),
]


@pytest.mark.parametrize(("case", "expression"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_selectors_whose_values_grow_are_refused_at_compile_by_their_estimated_cost(
    case: str, expression: str
) -> None:
    with within(30), pytest.raises(CelError, match=f"estimated cost above {MAX_COST}"):
        selects(compile_selector(expression), device_view(DRIVER, GPU))


def test_a_real_selector_is_estimated_at_tens_of_units() -> None:
    for expression, _ in HOLDS:
        compile_selector(expression)  # none refused
    assert _Estimate().run(_ENVIRONMENT.compile(f"{A}.model == 'a100' && {A}.index >= 3"))[0] < 200


def test_the_runtime_count_stops_an_evaluation_past_the_per_evaluation_cost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The estimate let it through (at 20,000); evaluations are counted too, and stop at the limit."""
    program = compile_selector("[" + ", ".join(["1"] * 100) + "].all(x, x == 1)")
    monkeypatch.setattr(cel, "MAX_COST", 500)
    with pytest.raises(CelError, match="evaluation cost above 500"):
        selects(program, device_view(DRIVER, GPU))


def test_no_value_grows_past_the_size_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    program = compile_selector('["ab"]' + ".map(s, s + s)" * 9 + ".size() > 0")  # 1,024 characters
    assert selects(program, device_view(DRIVER, GPU))
    monkeypatch.setattr(cel, "MAX_VALUE_SIZE", 500)
    with pytest.raises(CelError, match="a value grows beyond 500 elements or characters"):
        selects(program, device_view(DRIVER, GPU))


def test_a_spent_cycle_budget_stops_every_further_evaluation() -> None:
    program = compile_selector("[" + ", ".join(["1"] * 100) + "].all(x, x == 1)")
    meter = Meter(5_000)
    verdicts = []
    for _ in range(10):
        try:
            verdicts.append(selects(program, device_view(DRIVER, GPU), meter))
        except CelBudgetError as error:
            verdicts.append(str(error))
    assert verdicts[0] is True
    assert verdicts[-1] == "the CEL cost budget of this cycle is spent"
    assert meter.spent <= 5_000 + EVALUATION_COST


# --- issue 42: the Kubernetes CEL libraries DRA selectors may use -----------------------------------------

LIBRARY_HOLDS: list[tuple[str, bool]] = [
    # strings (cel-go ext.Strings version 2): code points, not bytes
    (f"{A}.model.charAt(0) == 'a' && {A}.model.charAt(4) == ''", True),
    ("'héllo'.indexOf('l') == 2 && 'hello'.indexOf('l', 3) == 3 && 'hello'.indexOf('z') == -1", True),
    ("'hello'.indexOf('') == 0 && 'hello'.indexOf('', 5) == 5", True),
    (
        "'hello'.lastIndexOf('l') == 3 && 'hello'.lastIndexOf('l', 2) == 2 && 'hello'.lastIndexOf('') == 5",
        True,
    ),
    ("'A100-SXM'.lowerAscii() == 'a100-sxm' && 'ÄbC'.upperAscii() == 'ÄBC'", True),
    ("'a-b-c'.replace('-', '_') == 'a_b_c' && 'a-b-c'.replace('-', '_', 1) == 'a_b-c'", True),
    ("'a,b,c'.split(',') == ['a', 'b', 'c'] && 'a,b,c'.split(',', 2) == ['a', 'b,c']", True),
    ("'abc'.split('') == ['a', 'b', 'c'] && 'a,b'.split(',', 0) == []", True),
    ("'nvidia-a100'.substring(7) == 'a100' && 'nvidia-a100'.substring(0, 6) == 'nvidia'", True),
    ("'\\t a100 \\n'.trim() == 'a100'", True),
    ("['a', 'b'].join() == 'ab' && ['a', 'b'].join('/') == 'a/b'", True),
    # lists (Kubernetes' library, cel-go ext.Lists)
    ("[1, 2, 2].isSorted() && !['b', 'a'].isSorted() && [].isSorted()", True),
    ("[1, 2, 3].sum() == 6 && [].sum() == 0 && [1.5, 2.5].sum() == 4.0", True),
    ("[3, 1, 2].min() == 1 && [3, 1, 2].max() == 3 && ['b', 'a'].min() == 'a'", True),
    ("[1, 2, 1].indexOf(1) == 0 && [1, 2, 1].lastIndexOf(1) == 2 && [1].indexOf(5) == -1", True),
    (
        "[1, 2, 2, 1].distinct() == [1, 2] && [3, 1, 2].sort() == [1, 2, 3] && [1, 2].reverse() == [2, 1]",
        True,
    ),
    ("[1, [2, [3]]].flatten() == [1, 2, [3]] && [1, [2, [3]]].flatten(2) == [1, 2, 3]", True),
    ("[1, 2, 3, 4].slice(1, 3) == [2, 3]", True),
    # regular expressions (RE2)
    (f"{A}.model.matches('^a[0-9]+$') && !{A}.model.matches('^h')", True),
    ("'a\\n'.matches('a$')", False),  # RE2: $ is the end of the text, not before a final newline
    ("'gpu-12-of-16'.find('[0-9]+') == '12' && 'abc'.find('[0-9]') == ''", True),
    ("'1-2-3'.findAll('[0-9]') == ['1', '2', '3'] && '1-2-3'.findAll('[0-9]', 2) == ['1', '2']", True),
    # cel.bind (cel-go ext.Bindings) and sets (ext.Sets)
    (f"cel.bind(gpu, {A}, gpu.model == 'a100' && gpu.index == 3)", True),
    ("cel.bind(x, 1, cel.bind(y, x + 1, y == 2)) && cel.bind(x, [1, 2], x.size() == 2)", True),
    ("sets.contains([1, 2], [1]) && !sets.contains([1], [2]) && sets.contains([1], [])", True),
    (
        "sets.equivalent([1, 2], [2, 1, 1]) && sets.intersects([1], [3, 1]) && !sets.intersects([1], [3])",
        True,
    ),
    # comparisons across numeric types (CrossTypeNumericComparisons) and heterogeneous equality
    ("1 < 2.0 && 2.0 > 1 && 1u < 2 && 1 == 1.0 && 1 == 1u && 2 <= 2u && 1 != 1.5", True),
    (f"{A}.index > 2.5 && {A}.index == 3.0", True),
    (f"{A}.healthy == 1", False),  # a bool is no int: unequal, not an error (celpy said equal)
    (f"{A}.model != 3 && !({A}.index == '3')", True),
    # on device attributes, as a selector would
    (f"{A}.driverVersion.major() >= 1 && {A}.model.upperAscii().startsWith('A1')", True),
]


@pytest.mark.parametrize(("expression", "expected"), LIBRARY_HOLDS)
def test_the_kubernetes_cel_libraries_evaluate_as_the_scheduler_does(expression: str, expected: bool) -> None:
    assert selects(compile_selector(expression), device_view(DRIVER, GPU)) is expected


LIBRARY_FAILS: list[tuple[str, str]] = [
    ("'abc'.charAt(4) == ''", "index out of range: 4"),
    ("'abc'.indexOf('a', 9) == 0", "index out of range: 9"),
    ("'abc'.substring(2, 1) == ''", "invalid substring range"),
    ("'abc'.matches('(?=a)')", "invalid regex"),  # lookahead: not RE2
    ("'aa'.matches('(a)\\\\1')", "invalid regex"),  # a backreference: not RE2
    ("[1, 'a'].sort() == []", "elements of different types"),
    ("[].max() == 0", "max called on empty list"),
    ("[1, 2].min(x, x) == 1", "undeclared reference to 'min'"),
    ("['a'].sum() == 0", "no such overload"),
    ("[1, 2].flatten(-1) == []", "level must be non-negative"),
    ("[1, 2].slice(1, 5) == []", "cannot slice(1, 5)"),
    ("sets.contains(1, [1])", "no such overload"),
    ("cel.bind(x, 1)", "undeclared reference to 'bind'"),
    ("lists.range(3) == [0, 1, 2]", "undeclared reference"),
]


@pytest.mark.parametrize(("expression", "message"), LIBRARY_FAILS, ids=[f[0] for f in LIBRARY_FAILS])
def test_library_calls_that_fail_in_kubernetes_fail_here_with_one_short_line(
    expression: str, message: str
) -> None:
    with pytest.raises(CelError) as error:
        selects(compile_selector(expression), device_view(DRIVER, GPU))
    assert message in str(error.value)
    assert len(str(error.value)) <= 200


def test_a_replace_that_would_build_a_huge_string_fails_before_building_it() -> None:
    """``'a' * 10,000`` replaced by ``'a' * 10,000`` each would be 10^8 characters: refused up front."""
    long = "'" + "a" * 100 + "'"
    expression = f"{long}.replace('a', {long}).replace('a', {long}).size() > 0"
    with within(5), pytest.raises(CelError, match="a value grows beyond"):
        selects(compile_selector(expression), device_view(DRIVER, GPU))
