"""Fuzzing the configuration path (issue 25): whatever the document, only the product's own errors escape.

Starting from the shipped configuration and Koordinator's guide ConfigMap, values are replaced by random
types, huge and negative numbers, random strings, durations and quantities; the text is mutated with
duplicate keys, aliases and deep nesting. Loading must either succeed or raise ``ConfigError``; what it
accepts must then compile into planner settings, give its warnings and round-trip with no error at all
(every check is made at load time); the strict YAML reader raises only ``YamlInputError``; the unit
parsers only ``ValueError``. Bounded example counts, not timings.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from descheduler import strictyaml
from descheduler.config.load import (
    MAX_PROBLEM_CHARS,
    ConfigError,
    EffectiveConfig,
    load_config_text,
)
from descheduler.config.providers import redact_document
from descheduler.planner import loop_warnings
from descheduler.planner.settings import compile_settings
from descheduler.strictyaml import YamlInputError, load_all
from descheduler.units import parse_duration, parse_int_or_percent, parse_quantity, resource_amount
from tests.unit.mutation import parent_of, paths

ROOT = Path(__file__).resolve().parents[2]
CONTROLS = """\
apiVersion: descheduler/v1alpha2
kind: DeschedulerConfiguration
deschedulingInterval: 90s
profiles:
- name: p
  plugins: {balance: {enabled: [{name: LowNodeLoad}]}}
  pluginConfig:
  - name: MigrationController
    args:
      optOutAnnotations: {karpenter.sh/do-not-disrupt: "true"}
      evictionWindows:
      - {days: [Mon, Tue], start: "22:00", end: "02:30", timeZone: Europe/Berlin}
      - {days: [Sat], start: "01:00", end: "05:00", timeZone: UTC}
      churnBudget: {maxEvictions: 10, maxEvictionsPerNamespace: 2, period: 1h30m}
"""
"""Eviction windows, the churn budget and opt-outs (issue 37), which the other seeds do not set."""
SEEDS = [
    (ROOT / "config" / "examples" / "hotspot" / "config.yaml").read_text(),
    (ROOT / "tests" / "fixtures" / "koordinator-guide-configmap.yaml").read_text(),
    CONTROLS,
]
FUZZ = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@contextmanager
def _loader(libyaml: bool) -> Iterator[None]:
    """The strict reader with libyaml (production) or PyYAML's own loader (a build without libyaml)."""
    saved = strictyaml._CLoader, strictyaml.LIBYAML
    if not libyaml:
        setattr(strictyaml, "_CLoader", strictyaml._PureLoader)  # noqa: B010 (a class, not an attribute)
        setattr(strictyaml, "LIBYAML", False)  # noqa: B010
    try:
        yield
    finally:
        setattr(strictyaml, "_CLoader", saved[0])  # noqa: B010
        setattr(strictyaml, "LIBYAML", saved[1])  # noqa: B010


def _configuration(seed: str) -> dict[str, Any]:
    """The seed's DeschedulerConfiguration (unwrapped from the ConfigMap), so its fields get mutated."""
    doc = yaml.safe_load(seed)
    if doc.get("kind") == "ConfigMap":
        doc = yaml.safe_load(next(iter(doc["data"].values())))
    assert isinstance(doc, dict)
    return doc


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    parent_of(doc, path)[path[-1]] = value


HUGE = "k" * 100_000
"""A key or value far past what an error may quote."""
DURATION_TEXT = st.one_of(
    st.from_regex(r"\A-?[0-9]{1,20}(\.[0-9]{0,12})?(ns|us|ms|s|m|h)\Z"),
    st.from_regex(r"\A([0-9]{1,6}h)?([0-9]{1,6}m)?([0-9]{1,6}s)?\Z"),
    st.sampled_from(["999999999999999h", "2562047h47m16.854775808s", "-1s", "0", "1e3s", "inf", "NaNs"]),
)
QUANTITY_TEXT = st.one_of(
    st.from_regex(
        r"\A[+-]?[0-9]{0,30}(\.[0-9]{0,30})?([eE][+-]?[0-9]{1,12}|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?\Z"
    ),
    st.sampled_from(["1e400", "1e999999999", "9" * 5000, "8Ei", "-1", ".5", "1e-999999999", "0e999999"]),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.sampled_from([10**4000, -(10**300), 2**31, 2**63, -1, 0]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    DURATION_TEXT,
    QUANTITY_TEXT,
    st.sampled_from(
        ["100%", "101%", "-5%", "99999999999%", "kube-system", "Bad_Name", "", "*", "http://u:p@h"]
    ),
    st.sampled_from(["Europe", "Z" * 300, "0.1ns", "999ms", "1.9ns", HUGE]),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=12), st.just(HUGE)), inner, max_size=4),
    ),
    max_leaves=12,
)


def _exercise(effective: EffectiveConfig) -> None:
    """Everything validate, run, once and simulate do with an accepted configuration before acting; what
    ``validate`` prints validates to the same configuration."""
    compile_settings(effective)  # never raises: what load_config accepts, the planner can compile
    loop_warnings(effective)
    printed = yaml.safe_dump(redact_document(effective.to_document()))
    again = load_config_text(printed, "round-trip")
    assert yaml.safe_dump(redact_document(again.to_document())) == printed


def _load_and_exercise(text: str) -> None:
    """A refusal is ``ConfigError`` with one-line problems; an accepted configuration is then used
    without any error at all (the round trip included): validation is complete at load time."""
    try:
        effective = load_config_text(text, "fuzz.yaml")
    except ConfigError as exc:
        assert exc.problems
        assert all(isinstance(p, str) and "\n" not in p for p in exc.problems), exc.problems
        assert all(len(p) <= MAX_PROBLEM_CHARS + 30 for p in exc.problems), [p[:300] for p in exc.problems]
        return
    _exercise(effective)


@FUZZ
@given(
    seed=st.sampled_from(SEEDS),
    data=st.data(),
    mutations=st.integers(min_value=1, max_value=4),
)
def test_mutated_configurations_raise_only_config_errors(
    seed: str, data: st.DataObject, mutations: int
) -> None:
    doc = _configuration(seed)
    for _ in range(mutations):
        places = paths(doc)
        if not places:
            break
        _set(doc, data.draw(st.sampled_from(places)), data.draw(VALUES))
    _load_and_exercise(yaml.safe_dump(doc))


@FUZZ
@given(
    seed=st.sampled_from(SEEDS),
    line=st.integers(min_value=0, max_value=200),
    insert=st.sampled_from(
        [
            "dryRun: true",
            "dryRun: false",
            "deschedulingInterval: 999999999999999h",
            "x: &a [1, 2]",
            "y: *a",
            "<<: {dryRun: true}",
            "[" * 200 + "]" * 200,
            "- " * 100 + "x",
            "a: " + "9" * 5000,
            "a: 1.0e+999",
            "a: 2001-13-45",
            "!!python/object:os.system {}",
            "? [1]\n: 2",
            "\x07",
            "\t- bad",
            "---",
            "'",
        ]
    ),
    indent=st.sampled_from(["", "  ", "    ", "      "]),
)
def test_text_mutations_raise_only_config_errors(seed: str, line: int, insert: str, indent: str) -> None:
    lines = seed.splitlines()
    position = line % (len(lines) + 1)
    lines.insert(position, indent + insert)
    _load_and_exercise("\n".join(lines) + "\n")


@FUZZ
@given(text=st.text(max_size=200), libyaml=st.booleans())
def test_random_text_raises_only_yaml_input_errors_from_either_loader(text: str, libyaml: bool) -> None:
    with _loader(libyaml):
        try:
            load_all(text, "fuzz")
        except YamlInputError as exc:
            assert str(exc).startswith("fuzz")
            assert "\n" not in str(exc)


YAML_PIECES = st.sampled_from(
    ["a", ":", " ", "\n", "-", "[", "]", "{", "}", ",", "&x", "*x", "<<", "'", '"', "#", "?", "|", ">",
     "1e+999", "9" * 50, ".inf", "2001-02-03", "\t", "---", "...", "!!int", "!!float", "!!bool",
     "!!timestamp", "!!binary", "!!map", "!!seq", "!!str", "!!null", "!!set", "!foo",
     "!!python/name:os.system"]
)  # fmt: skip


def _parses(text: str, loader: Any) -> bool:
    try:
        for _ in yaml.parse(text, Loader=loader):
            pass
    except Exception:
        return False
    return True


@FUZZ
@given(pieces=st.lists(YAML_PIECES, max_size=60))
def test_yaml_like_text_gets_the_same_verdict_from_both_loaders(pieces: list[str]) -> None:
    text = "".join(pieces)
    # libyaml and PyYAML's scanner disagree on a few corner cases of syntax ("|#"); the strict layer must
    # not add differences of its own, so only text both raw parsers accept, or both refuse, is compared.
    assume(_parses(text, yaml.CSafeLoader) == _parses(text, yaml.SafeLoader))

    def verdict() -> tuple[str, Any]:
        try:
            return "ok", load_all(text, "fuzz")
        except YamlInputError as exc:
            return "error", exc.problem.split(":")[0] if exc.problem.startswith(
                ("while", "expected")
            ) else exc

    with _loader(True):
        with_libyaml = verdict()
    with _loader(False):
        pure = verdict()
    assert with_libyaml[0] == pure[0], (text, with_libyaml, pure)
    if with_libyaml[0] == "ok":
        assert with_libyaml[1] == pure[1]
    else:
        assert str(with_libyaml[1]) == str(pure[1]), text


@FUZZ
@given(
    text=st.one_of(QUANTITY_TEXT, st.text(max_size=30)), resource=st.sampled_from(["cpu", "memory", "pods"])
)
def test_quantity_strings_raise_only_value_errors(text: str, resource: str) -> None:
    for parse in (parse_quantity, lambda t: resource_amount(resource, t)):
        try:
            parse(text)
        except ValueError as exc:
            assert len(str(exc)) < 300


@FUZZ
@given(value=st.one_of(DURATION_TEXT, st.text(max_size=30), SCALARS))
def test_duration_and_int_or_percent_values_raise_only_value_errors(value: Any) -> None:
    for parse in (parse_duration, parse_int_or_percent):
        try:
            result = parse(value)
        except ValueError as exc:
            assert len(str(exc)) < 300
        else:
            if isinstance(result, float):
                assert abs(result) <= 2562047 * 3600 + 47 * 60 + 17
