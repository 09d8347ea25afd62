"""Configuration: Koordinator ConfigMaps validate unchanged; mistakes fail with the field path and value."""

from __future__ import annotations

import typing
from collections.abc import Iterator
from pathlib import Path
from textwrap import dedent
from typing import Any

import hypothesis
import pytest
import yaml
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from descheduler.config.base import StrictModel
from descheduler.config.controls import DAY_NAMES, MAX_EVICTION_WINDOWS, EvictionWindow, window_overlap
from descheduler.config.load import ConfigError, load_config, load_config_document, load_config_text

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
SEED = REPO / "tests" / "scenarios" / "seed-stress-demo"


def config_with(
    lnl: dict[str, Any] | None = None, mc: dict[str, Any] | None = None, **top: Any
) -> dict[str, Any]:
    """A minimal DeschedulerConfiguration with LowNodeLoad enabled and the given args merged in."""
    plugin_config: list[dict[str, Any]] = [
        {
            "name": "LowNodeLoad",
            "args": {"lowThresholds": {"cpu": 20}, "highThresholds": {"cpu": 50}, **(lnl or {})},
        }
    ]
    if mc is not None:
        plugin_config.append({"name": "MigrationController", "args": mc})
    return {
        "apiVersion": "descheduler/v1alpha2",
        "kind": "DeschedulerConfiguration",
        "profiles": [
            {
                "name": "p",
                "plugins": {"balance": {"enabled": [{"name": "LowNodeLoad"}]}},
                "pluginConfig": plugin_config,
            }
        ],
        **top,
    }


def problems_of(doc: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        load_config_document(doc)
    return str(info.value)


def test_the_configmap_from_koordinators_guide_validates_unchanged() -> None:
    effective = load_config(FIXTURES / "koordinator-guide-configmap.yaml")
    assert effective.low_node_load is not None
    assert effective.low_node_load.high_thresholds == {"cpu": 50.0, "memory": 60.0}
    assert effective.low_node_load.evictable_namespaces is not None
    assert effective.low_node_load.evictable_namespaces.exclude == ["kube-system", "koordinator-system"]
    assert effective.config.descheduling_interval == 60.0


def test_koordinators_shipped_configuration_is_accepted_and_its_unused_fields_are_reported() -> None:
    effective = load_config(REPO / "tests" / "fixtures" / "koordinator-shipped-config.yaml")
    assert effective.migration.evict_qps == 10.0
    assert effective.config.leader_election.leader_elect
    notices = "\n".join(effective.notices)
    for field in (
        "enableProfiling",
        "enableContentionProfiling",
        "defaultJobMode",
        "schedulerNames",
        "arbitrationArgs",
    ):
        assert field in notices
    # anomalyCondition.timeout is honoured now (planner/anomaly.py): not reported as unused.
    assert "anomalyCondition" not in notices


def test_the_seed_scenario_config_turns_on_skip_check_expected_replicas() -> None:
    effective = load_config(SEED / "config.yaml")
    assert effective.migration.skip_check_expected_replicas
    assert effective.low_node_load is not None
    assert effective.low_node_load.anomaly_condition.consecutive_abnormalities == 5


def test_defaults_are_koordinators() -> None:
    effective = load_config_document(config_with())
    lnl = effective.low_node_load
    assert lnl is not None
    assert lnl.node_metric_expiration_seconds == 180
    assert lnl.node_fit is True
    assert lnl.anomaly_condition.consecutive_abnormalities == 5
    assert lnl.anomaly_condition.consecutive_normalities == 3
    assert lnl.anomaly_condition.timeout == 60.0
    assert lnl.resource_weights == {"cpu": 1, "memory": 1}
    mc = effective.migration
    assert (mc.max_migrating_per_node, mc.evict_qps, mc.evict_burst, mc.eviction_policy) == (
        2,
        10.0,
        1,
        "Eviction",
    )
    assert mc.object_limiters["workload"].duration == 300.0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90.0), ("5m", 300.0), ("1h30m", 5400.0), ("1500ms", 1.5), ("1m30s", 90.0), ("2h", 7200.0)],
)
def test_durations_are_read_as_go_writes_them(text: str, seconds: float) -> None:
    assert (
        load_config_document(config_with(deschedulingInterval=text)).config.descheduling_interval == seconds
    )


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (
            config_with(lnl={"highThreshold": {"cpu": 50}}),
            "profiles[0].pluginConfig[0].args.highThreshold: unknown field 'highThreshold'; "
            "did you mean 'highThresholds'?",
        ),
        (config_with(deschedulingIntervall="60s"), "did you mean 'deschedulingInterval'"),
        (config_with(deschedulingInterval="5x"), "deschedulingInterval: '5x' is not a duration"),
        (config_with(deschedulingInterval=60), "deschedulingInterval: duration must be written with a unit"),
        (
            config_with(lnl={"highThresholds": {"cpu": 150}}),
            "profiles[0].pluginConfig[0].args.highThresholds.cpu: percentage must be between 0 and 100",
        ),
        (
            config_with(lnl={"lowThresholds": {"cpu": 60}, "highThresholds": {"cpu": 50}}),
            "lowThresholds.cpu (60) is above highThresholds.cpu (50)",
        ),
        (
            config_with(lnl={"evictableNamespaces": {"include": ["a"], "exclude": ["b"]}}),
            "profiles[0].pluginConfig[0].args.evictableNamespaces: set either include or exclude, not both",
        ),
        (
            config_with(mc={"maxUnavailablePerWorkload": "10x"}),
            "profiles[0].pluginConfig[1].args.maxUnavailablePerWorkload: expected an integer or a percentage",
        ),
        (
            config_with(mc={"evictQPS": "fast"}),
            "args.evictQPS: expected a number (or a string holding one), got 'fast'",
        ),
        (config_with(mc={"evictionPolicy": "Kill"}), "args.evictionPolicy"),
        (
            config_with(mc={"objectLimiters": {"namespace": {"duration": "5m"}}}),
            "unknown object limiter 'namespace'",
        ),
        (
            config_with(lnl={"nodePools": [{"name": "gpu", "lowThresholds": {"cpu": 90}}]}),
            "nodePools[0].lowThresholds.cpu (90) is above highThresholds.cpu (50)",
        ),
        (config_with(healthzBindAddress="localhost"), "healthzBindAddress: expected HOST:PORT"),
        (config_with(apiVersion="descheduler/v1alpha1"), "apiVersion"),
        (
            config_with(lnl={"anomalyCondition": {"consecutiveAbnormalities": -1}}),
            "args.anomalyCondition.consecutiveAbnormalities",
        ),
        (config_with(maxNoOfPodsToEvictPerNode=-1), "maxNoOfPodsToEvictPerNode"),
        (
            config_with(lnl={"highThresholds": {"cpuu": 50}}),
            "args.highThresholds: unknown resource 'cpuu'; did you mean 'cpu'?",
        ),
        (
            config_with(lnl={"lowThresholds": {"Memory": 10}}),
            "args.lowThresholds: unknown resource 'Memory'; did you mean 'memory'?",
        ),
        (
            config_with(lnl={"prodHighThresholds": {"pod": 10}}),
            "unknown resource 'pod'; did you mean 'pods'?",
        ),
        (
            config_with(lnl={"resourceWeights": {"cpu": 1, "mem": 2}}),
            "args.resourceWeights: unknown resource 'mem'",
        ),
        (
            config_with(lnl={"nodePools": [{"name": "gpu", "highThresholds": {"GPU.com/card": 50}}]}),
            "nodePools[0].highThresholds: 'GPU.com/card' is not a valid extended resource name",
        ),
        (config_with(lnl={"highThresholds": {"gpu": 50}}), "unknown resource 'gpu' (known: cpu"),
        (
            config_with(mc={"maxMigratingPerWorkload": "150%"}),
            "args.maxMigratingPerWorkload: a share of a workload's replicas cannot exceed 100%, got '150%'",
        ),
        (config_with(mc={"maxUnavailablePerWorkload": "101%"}), "cannot exceed 100%"),
        (config_with(mc={"objectLimiters": {"workload": {"maxMigrating": "200%"}}}), "cannot exceed 100%"),
    ],
)
def test_a_mistake_is_reported_with_its_full_path(doc: dict[str, Any], expected: str) -> None:
    assert expected in problems_of(doc)


ARGS = "profiles[0].pluginConfig[1].args"


def window(**fields: Any) -> dict[str, Any]:
    return {"days": ["Mon"], "start": "22:00", "end": "06:00", "timeZone": "Europe/Berlin", **fields}


@pytest.mark.parametrize(
    ("mc", "expected"),
    [
        ({"evictionWindows": []}, f"{ARGS}.evictionWindows: an empty list never opens"),
        ({"evictionWindows": [window(days=[])]}, f"{ARGS}.evictionWindows[0].days: no day given"),
        (
            {"evictionWindows": [window(days=["Mon", "Mun"])]},
            f"{ARGS}.evictionWindows[0].days: unknown day 'Mun'",
        ),
        (
            {"evictionWindows": [window(end="22:00")]},
            f"{ARGS}.evictionWindows[0].end: end equals start (22:00)",
        ),
        (
            {"evictionWindows": [window(start="24:00")]},
            f"{ARGS}.evictionWindows[0].start: expected a time of day",
        ),
        ({"evictionWindows": [window(end="6pm")]}, f"{ARGS}.evictionWindows[0].end: expected a time of day"),
        ({"evictionWindows": [window(end="06:5")]}, f"{ARGS}.evictionWindows[0].end: expected a time of day"),
        (
            {"evictionWindows": [window(timeZone="Europe/Berln")]},
            f"{ARGS}.evictionWindows[0].timeZone: unknown time zone 'Europe/Berln'",
        ),
        (
            {"evictionWindows": [window(), window(days=["Tue"], start="05:00", end="07:00")]},
            f"{ARGS}.evictionWindows[1]: overlaps evictionWindows[0] (Mon 22:00-06:00 Europe/Berlin) from "
            "Tue 05:00 to Tue 06:00",
        ),
        (  # Sunday night runs into Monday morning across the week's end
            {"evictionWindows": [window(days=["Sun"]), window(start="05:00", end="07:00")]},
            f"{ARGS}.evictionWindows[1]: overlaps evictionWindows[0]",
        ),
        (
            {"evictionWindows": [{"days": ["Mon"], "start": "22:00"}]},
            f"{ARGS}.evictionWindows[0].end: field required",
        ),
        (
            {"churnBudget": {"maxEvictions": -1}},
            f"{ARGS}.churnBudget.maxEvictions: Input should be greater than",
        ),
        (
            {"churnBudget": {"maxEvictionsPerNamespace": -2}},
            f"{ARGS}.churnBudget.maxEvictionsPerNamespace: Input should be greater than",
        ),
        (
            {"churnBudget": {"maxEvictions": 5, "period": "0s"}},
            f"{ARGS}.churnBudget.period: a budget needs a period to count over (at least 1s), got 0s",
        ),
        ({"churnBudget": {"maxEvictions": 5, "period": "-1h"}}, f"{ARGS}.churnBudget.period"),
        (
            {"churnBudget": {"period": "1h"}},
            f"{ARGS}.churnBudget: set maxEvictions, maxEvictionsPerNamespace",
        ),
        ({"churnBudget": {"maxEviction": 5}}, "did you mean 'maxEvictions'?"),
        (  # more records in a day than the journal's ConfigMap holds with long names
            {"churnBudget": {"maxEvictions": 1201}},
            f"{ARGS}.churnBudget.maxEvictions: allows 1201 migration records; the migration journal "
            "holds 1200",
        ),
        (  # a window longer than the period keeps several periods' records
            {
                "churnBudget": {"maxEvictions": 300, "period": "1m"},
                "objectLimiters": {"workload": {"duration": "5m"}},
            },
            f"{ARGS}.churnBudget.maxEvictions: allows 1500 migration records over 5 periods "
            "(objectLimiters.workload.duration)",
        ),
    ],
)
def test_windows_and_budgets_that_cannot_work_are_refused_naming_the_field(
    mc: dict[str, Any], expected: str
) -> None:
    assert expected in problems_of(config_with(mc=mc))


@pytest.mark.parametrize(
    "mc",
    [
        {"evictionWindows": [window(days=["Sat", "Sunday"], start="00:00", end="23:59")]},
        {"evictionWindows": [window(), window(days=["Tue"], start="06:00", end="07:00")]},  # touching is fine
        {"evictionWindows": [window(), window(timeZone="UTC")]},  # other zones are not compared
        {"churnBudget": {"maxEvictions": 0}},
        {"churnBudget": {"maxEvictionsPerNamespace": 3, "period": "30m"}},
        {"churnBudget": {"maxEvictions": 1200}},  # as many records as the journal holds
        {
            "churnBudget": {"maxEvictions": 240, "period": "1m"},
            "objectLimiters": {"workload": {"duration": "5m"}},
        },
    ],
)
def test_workable_windows_and_budgets_are_accepted(mc: dict[str, Any]) -> None:
    load_config_document(config_with(mc=mc))


def test_a_typo_in_a_plugin_name_is_an_error_but_an_unknown_plugin_is_a_notice() -> None:
    doc = config_with()
    doc["profiles"][0]["plugins"]["balance"]["enabled"].append({"name": "LowNodeLoads"})
    assert "did you mean 'LowNodeLoad'" in problems_of(doc)
    doc["profiles"][0]["plugins"]["balance"]["enabled"][-1] = {"name": "RemoveDuplicates"}
    notices = load_config_document(doc).notices
    assert any("'RemoveDuplicates' is not implemented here" in n for n in notices)


def test_args_of_the_wrong_kind_for_a_plugin_are_rejected() -> None:
    doc = config_with(mc={"kind": "LowNodeLoadArgs"})
    assert "plugin MigrationController takes MigrationControllerArgs" in problems_of(doc)


def test_evict_qps_may_be_a_string_or_a_number() -> None:
    assert load_config_document(config_with(mc={"evictQPS": "2.5"})).migration.evict_qps == 2.5
    assert load_config_document(config_with(mc={"evictQPS": 3})).migration.evict_qps == 3.0


@pytest.mark.parametrize(
    "name", ["cpu", "memory", "pods", "ephemeral-storage", "nvidia.com/gpu", "kubernetes.io/batch-cpu"]
)
def test_known_and_extended_resource_names_are_accepted_in_thresholds_and_weights(name: str) -> None:
    lnl = load_config_document(
        config_with(lnl={"highThresholds": {name: 80}, "resourceWeights": {name: 2}})
    ).low_node_load
    assert lnl is not None and lnl.high_thresholds[name] == 80 and lnl.resource_weights[name] == 2


def test_a_per_workload_limit_of_exactly_100_percent_is_accepted() -> None:
    mc = load_config_document(config_with(mc={"maxMigratingPerWorkload": "100%"})).migration
    assert mc.max_migrating_per_workload == "100%"


def test_int_or_percent_accepts_both_forms() -> None:
    mc = load_config_document(
        config_with(mc={"maxMigratingPerWorkload": "20%", "maxUnavailablePerWorkload": 2})
    )
    assert (mc.migration.max_migrating_per_workload, mc.migration.max_unavailable_per_workload) == ("20%", 2)


def test_dry_run_at_any_level_makes_the_whole_run_dry() -> None:
    assert load_config_document(config_with(dryRun=True)).dry_run
    assert load_config_document(config_with(lnl={"dryRun": True})).dry_run
    assert load_config_document(config_with(mc={"dryRun": True})).dry_run
    assert not load_config_document(config_with()).dry_run


def test_a_configmap_must_hold_exactly_one_key() -> None:
    doc = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "x"},
        "data": {"a": yaml.safe_dump(config_with()), "b": "x: 1"},
    }
    assert "expected exactly one key" in problems_of(doc)


def test_errors_inside_a_configmap_name_the_data_key() -> None:
    inner = yaml.safe_dump(config_with(lnl={"highThresholds": {"cpu": "lots"}}))
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"config.yaml": inner}}
    assert "data.config.yaml.profiles[0].pluginConfig[0].args.highThresholds.cpu" in problems_of(doc)


def test_lownodeload_in_two_profiles_is_refused_with_the_way_out() -> None:
    doc = config_with()
    doc["profiles"].append({**doc["profiles"][0], "name": "q"})
    assert "run one instance per profile" in problems_of(doc)


def test_the_effective_configuration_round_trips_through_validation() -> None:
    effective = load_config(FIXTURES / "koordinator-guide-configmap.yaml")
    again = load_config_document(effective.to_document())
    assert again.low_node_load == effective.low_node_load
    assert again.migration == effective.migration
    assert again.config.descheduling_interval == effective.config.descheduling_interval


def test_invalid_yaml_and_multiple_documents_are_refused() -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config_text("a: [")
    with pytest.raises(ConfigError, match="exactly one YAML document"):
        load_config_text(
            dedent("""\
            kind: DeschedulerConfiguration
            ---
            kind: DeschedulerConfiguration
            """)
        )


@pytest.mark.parametrize(
    ("case", "top", "args", "warned"),
    [
        (
            "5 x 60s covers the default 5m window",
            {},
            {"anomalyCondition": {"consecutiveAbnormalities": 5}},
            [],
        ),
        (
            "1 x 60s does not",
            {},
            {"anomalyCondition": {"consecutiveAbnormalities": 1}},
            ["LowNodeLoadArgs.anomalyCondition.consecutiveAbnormalities (1)"],
        ),
        (
            "1 x 5m covers a 5m window",
            {"deschedulingInterval": "5m"},
            {"anomalyCondition": {"consecutiveAbnormalities": 1}},
            [],
        ),
        (
            "a pool's own count is checked and named",
            {},
            {
                "anomalyCondition": {"consecutiveAbnormalities": 5},
                "nodePools": [{"name": "fast", "anomalyCondition": {"consecutiveAbnormalities": 2}}],
            },
            ["LowNodeLoadArgs.nodePools[0].anomalyCondition.consecutiveAbnormalities (2)"],
        ),
        (
            "a configured Prometheus window is named",
            {"metricsProviders": [{"source": "Prometheus", "prometheus": {"window": "10m"}}]},
            {"anomalyCondition": {"consecutiveAbnormalities": 5}},
            ["metricsProviders[0].prometheus.window (10m0s)"],
        ),
        (
            "metrics-server reads are instantaneous: nothing to warn about",
            {"metricsProviders": [{"source": "KubernetesMetrics"}], "deschedulingInterval": "10s"},
            {"anomalyCondition": {"consecutiveAbnormalities": 1}},
            [],
        ),
    ],
)
def test_a_warning_names_the_fields_when_a_hotspot_is_confirmed_faster_than_the_usage_window(
    case: str, top: dict[str, Any], args: dict[str, Any], warned: list[str]
) -> None:
    from descheduler.planner import loop_warnings
    from tests.unit.builders import settings

    warnings = loop_warnings(settings(product_defaults=True, top=top, args=args))
    assert len(warnings) == len(warned), case
    for warning, expected in zip(warnings, warned, strict=True):
        assert expected in warning, case


def uncomment_controls(text: str) -> str:
    """The commented ``evictionWindows`` and ``churnBudget`` blocks of a shipped file, uncommented."""
    out: list[str] = []
    prefix = ""
    for line in text.splitlines():
        stripped = line.lstrip()
        indent = line[: len(line) - len(stripped)]
        if stripped.startswith(("# evictionWindows:", "# churnBudget:")):
            prefix = indent + "# "
            out.append(indent + stripped[2:])
        elif prefix and line.startswith(prefix + "  "):
            out.append(indent + line[len(prefix) :].removeprefix(indent))
        else:
            prefix = ""
            out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize(
    ("path", "key"),
    [
        (REPO / "manifests" / "base" / "config.yaml", None),
        (REPO / "charts" / "load-aware-descheduler" / "values.yaml", "config"),
    ],
    ids=["kustomize-base", "helm-values"],
)
def test_the_shipped_controls_examples_validate_once_uncommented(path: Path, key: str | None) -> None:
    text = path.read_text()
    assert "# evictionWindows:" in text and "# churnBudget:" in text
    doc = yaml.safe_load(uncomment_controls(text))
    doc = doc[key] if key else doc
    args = load_config_document(doc).migration
    assert args.eviction_windows is not None and len(args.eviction_windows) == 2
    assert args.churn_budget is not None and args.churn_budget.max_evictions == 100


# --- hostile input to eviction windows and the churn budget (issue 37, point 18) ---------------------------

HUGE = "x" * 900_000


def as_configmap(doc: dict[str, Any], key: str = "config.yaml") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {key: yaml.dump(doc)}}


@pytest.mark.parametrize(
    "zone",
    ["Europe", "America/Argentina", "A" * 300, "Europe/" + "B" * 250, "../../etc/passwd", "/etc/localtime",
     "zone1970.tab", "", " Europe/Berlin", "Europe//Berlin"],
    ids=["database-directory", "nested-directory", "300-characters", "long-part", "parent-path",
         "absolute-path", "database-file", "empty", "leading-space", "empty-part"],
)  # fmt: skip
def test_a_time_zone_the_database_cannot_read_is_refused_naming_the_field(zone: str) -> None:
    doc = config_with(mc={"evictionWindows": [window(timeZone=zone)]})
    for form, path in ((doc, ARGS), (as_configmap(doc), f"data.config.yaml.{ARGS}")):
        assert f"{path}.evictionWindows[0].timeZone: unknown time zone" in problems_of(form)


@pytest.mark.parametrize(
    ("case", "doc", "path"),
    [
        ("an opt-out key", config_with(mc={"optOutAnnotations": {HUGE: "true"}}),
         f"{ARGS}.optOutAnnotations.xx"),
        ("an unknown field", config_with(mc={HUGE: 1}), f"{ARGS}.xxx"),
        ("an unknown top-level field", config_with(**{HUGE: 1}), "xxx"),
        ("a resource name", config_with(lnl={"highThresholds": {HUGE: 50}}), "args.highThresholds: "),
        ("a time zone", config_with(mc={"evictionWindows": [window(timeZone=HUGE)]}), "[0].timeZone: "),
        ("a day", config_with(mc={"evictionWindows": [window(days=[HUGE])]}), "[0].days: unknown day"),
        ("a start", config_with(mc={"evictionWindows": [window(start=HUGE)]}), "[0].start: expected"),
        ("a delete option", config_with(mc={"defaultDeleteOptions": {HUGE: 1}}), "defaultDeleteOptions: "),
        ("an object limiter", config_with(mc={"objectLimiters": {HUGE: {}}}), "args.objectLimiters: "),
        ("a bind address", config_with(healthzBindAddress=HUGE), "healthzBindAddress: expected HOST:PORT"),
        ("a plugin's args kind", config_with(mc={"kind": HUGE}), "args.kind is 'xx"),
        ("a selector text", config_with(nodeSelector=HUGE + ",,"), "nodeSelector: "),
        ("a percentage", config_with(lnl={"highThresholds": {"cpu": HUGE}}), "highThresholds.cpu: "),
        ("a ConfigMap data key", as_configmap(config_with(dryRun="x"), key=HUGE), "data.xxx"),
        ("a ConfigMap's many keys",
         {"kind": "ConfigMap", "data": {f"{i}{HUGE[:9000]}": "" for i in range(99)}},
         "data: expected exactly one key"),
    ],
)  # fmt: skip
def test_an_error_quotes_a_huge_input_cut_short_with_its_length(
    case: str, doc: dict[str, Any], path: str
) -> None:
    text = problems_of(doc)
    assert path in text, case
    assert len(text) < 3000, (case, len(text))
    assert " characters)" in text or "..." in text, case


@pytest.mark.parametrize(
    ("opt_outs", "expected"),
    [
        ({"example.com/keep": "true"},
         f"{ARGS}.optOutAnnotations.example.com/keep: not an opt-out annotation"),
        ({"karpenter.sh/do-not-disrupt": " "},
         f"{ARGS}.optOutAnnotations.karpenter.sh/do-not-disrupt: needs the value"),
    ],
)  # fmt: skip
def test_an_opt_out_error_names_its_key_once_in_the_path(opt_outs: dict[str, str], expected: str) -> None:
    text = problems_of(config_with(mc={"optOutAnnotations": opt_outs}))
    assert expected in text
    assert "optOutAnnotations.optOutAnnotations" not in text


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (config_with(mc={"churnBudget": {"maxEvictions": True}}),
         f"{ARGS}.churnBudget.maxEvictions: Input should be a valid integer (got True)"),
        (config_with(mc={"churnBudget": {"maxEvictionsPerNamespace": False}}),
         f"{ARGS}.churnBudget.maxEvictionsPerNamespace: Input should be a valid integer (got False)"),
        (config_with(mc={"maxMigratingPerNode": True}), f"{ARGS}.maxMigratingPerNode: Input should be"),
        (config_with(mc={"evictBurst": True}), f"{ARGS}.evictBurst: Input should be a valid integer"),
        (config_with(lnl={"anomalyCondition": {"consecutiveAbnormalities": True}}),
         "args.anomalyCondition.consecutiveAbnormalities: Input should be a valid integer"),
        (config_with(lnl={"resourceWeights": {"cpu": True}}), "args.resourceWeights.cpu: Input should be"),
        (config_with(clientConnection={"qps": True}), "clientConnection.qps: Input should be a valid number"),
        (config_with(maxNoOfPodsToEvictTotal="5"), "maxNoOfPodsToEvictTotal: Input should be a valid int"),
    ],
)  # fmt: skip
def test_a_boolean_or_a_quoted_number_is_refused_where_a_count_is_expected(
    doc: dict[str, Any], expected: str
) -> None:
    assert expected in problems_of(doc)


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (config_with(mc={"churnBudget": {"maxEvictions": 5, "period": "0.1ns"}}),
         f"{ARGS}.churnBudget.period: a budget needs a period to count over (at least 1s), got 0s"),
        (config_with(mc={"churnBudget": {"maxEvictions": 5, "period": "999ms"}}),
         f"{ARGS}.churnBudget.period: a budget needs a period to count over (at least 1s), got 0.999s"),
        (config_with(deschedulingInterval="0.1ns"),
         "deschedulingInterval: must be a positive duration such as 60s (at least 1s), got 0s"),
        (config_with(deschedulingInterval="500ms"), "deschedulingInterval: must be a positive duration"),
    ],
)  # fmt: skip
def test_a_duration_too_short_to_mean_anything_is_refused(doc: dict[str, Any], expected: str) -> None:
    assert expected in problems_of(doc)


def _holds_a_number(annotation: Any) -> bool:
    """Whether a field's type is, or holds (in a union, list or dict), an ``int`` or a ``float``."""
    if annotation in (int, float):
        return True
    if isinstance(annotation, type):
        return False
    return any(_holds_a_number(arg) for arg in typing.get_args(annotation))


def _subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def _number_fields() -> list[tuple[str, str, Any]]:
    """Every field of the configuration's models whose type holds a number: (model, field, type)."""
    rows = []
    for model in set(_subclasses(StrictModel)):
        if not model.__module__.startswith("descheduler.config."):
            continue
        for name, info in model.model_fields.items():
            if _holds_a_number(info.annotation):
                annotation = (
                    typing.Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
                )
                rows.append((model.__name__, name, annotation))
    return sorted(rows, key=lambda row: row[:2])


NUMERIC_FIELDS = _number_fields()


@pytest.mark.parametrize(
    ("model", "field", "annotation"), NUMERIC_FIELDS, ids=[f"{m}.{f}" for m, f, _ in NUMERIC_FIELDS]
)
def test_no_number_field_of_the_configuration_reads_a_boolean_as_a_number(
    model: str, field: str, annotation: Any
) -> None:
    adapter: TypeAdapter[Any] = TypeAdapter(annotation)
    for value in (True, False, [True], {"cpu": True}):
        with pytest.raises(ValidationError):
            adapter.validate_python(value)


@pytest.mark.parametrize(
    ("period", "refused"),
    [("0.1ns", True), ("999ms", True), ("1s", False), ("1.000000001s", False), ("1h0m0.000000001s", False),
     ("1.9999999999s", False), ("90m", False), ("8784h", False), ("8784h0m1s", True)],
)  # fmt: skip
def test_a_duration_is_refused_or_prints_as_text_that_validates_to_the_same_value(
    period: str, refused: bool
) -> None:
    doc = config_with(
        mc={"churnBudget": {"maxEvictions": 5, "period": period}, "objectLimiters": {"workload": {
            "duration": period}}},
        deschedulingInterval=period,
    )  # fmt: skip
    if refused:
        assert f"{ARGS}.churnBudget.period: " in problems_of(doc)
        return
    effective = load_config_document(doc)
    printed = yaml.safe_dump(effective.to_document())
    again = load_config_text(printed, "printed")
    assert again.migration == effective.migration
    assert again.config.descheduling_interval == effective.config.descheduling_interval
    assert yaml.safe_dump(again.to_document()) == printed


def one_minute_windows(count: int) -> list[dict[str, Any]]:
    """``count`` one-minute windows spread over the week, none touching another."""
    out = []
    for i in range(count):
        day, start = divmod(i * 7 * 1440 // count, 1440)
        end = (start + 1) % 1440
        out.append(window(days=[DAY_NAMES[day]], start=f"{start // 60:02d}:{start % 60:02d}",
                          end=f"{end // 60:02d}:{end % 60:02d}"))  # fmt: skip
    return out


def test_the_overlap_check_reads_each_window_once_not_once_per_pair(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check sorts the windows' spans and sweeps them (O(n log n)): counted, not timed."""
    windows = [EvictionWindow.model_validate(w) for w in one_minute_windows(600)]
    calls = []
    spans = EvictionWindow.weekly_spans
    monkeypatch.setattr(EvictionWindow, "weekly_spans", lambda self: calls.append(1) or spans(self))
    assert window_overlap(windows) is None
    assert len(calls) == len(windows)


def test_as_many_windows_as_allowed_validate_one_more_overlapping_is_named_and_more_are_refused() -> None:
    windows = one_minute_windows(MAX_EVICTION_WINDOWS - 1)
    load_config_document(config_with(mc={"evictionWindows": windows}))
    assert f"{ARGS}.evictionWindows: 1002 windows, at most 1000: merge adjacent ones" in problems_of(
        config_with(mc={"evictionWindows": [window(days=[d]) for d in ["Mon", "Tue"] * 501]})
    )
    late = window(days=[windows[500]["days"][0]], start=windows[500]["start"], end="23:59")
    assert f"{ARGS}.evictionWindows[999]: overlaps evictionWindows[500]" in problems_of(
        config_with(mc={"evictionWindows": [*windows, late]})
    )


def _pairwise_overlap(windows: list[EvictionWindow]) -> set[tuple[int, int]]:
    """The overlapping pairs found by comparing every pair: the reference the sweep is checked against."""
    return {
        (i, j)
        for j, b in enumerate(windows)
        for i, a in enumerate(windows[:j])
        if a.time_zone == b.time_zone
        and any(a0 < b1 and b0 < a1 for a0, a1 in a.weekly_spans() for b0, b1 in b.weekly_spans())
    }


CLOCK = st.builds(lambda h, m: f"{h:02d}:{m:02d}", st.integers(0, 23), st.sampled_from([0, 30, 59]))
WINDOW = st.builds(
    lambda days, start, end, zone: {"days": days, "start": start, "end": end, "timeZone": zone},
    st.lists(st.sampled_from(DAY_NAMES), min_size=1, max_size=3, unique=True),
    CLOCK,
    CLOCK,
    st.sampled_from(["UTC", "Europe/Berlin"]),
).filter(lambda w: w["start"] != w["end"])


@hypothesis.settings(max_examples=150, deadline=None)
@hypothesis.given(st.lists(WINDOW, max_size=6))
def test_the_sweep_finds_an_overlap_exactly_when_some_pair_overlaps(raw: list[dict[str, Any]]) -> None:
    windows = [EvictionWindow.model_validate(w) for w in raw]
    pairs = _pairwise_overlap(windows)
    problem = window_overlap(windows)
    assert (problem is None) == (not pairs)
    if problem is not None:
        later = int(problem.path.removeprefix("evictionWindows[").removesuffix("]"))
        earlier = int(problem.message.removeprefix("overlaps evictionWindows[").split("]")[0])
        assert (earlier, later) in pairs
