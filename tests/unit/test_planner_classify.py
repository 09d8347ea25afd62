"""Node classes, thresholds (absolute, percent, deviation, raw-allocatable) and skipped nodes."""

from __future__ import annotations

import pytest

from descheduler.config.load import ConfigError
from descheduler.planner import reasons
from descheduler.planner.classify import Levels, absolute_threshold
from tests.unit.builders import NOW, World, cpu, mem, node_classes, report, settings


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (cpu("1"), "low"),  # 10% <= 20%
        (cpu("2"), "low"),  # exactly at the low threshold is still low
        (cpu("2.001"), "normal"),
        (cpu("5"), "normal"),  # exactly at the high threshold is not over
        (cpu("5.001"), "hotspot"),  # strictly above high is over (a hotspot at once with consecutive=1)
    ],
)
def test_a_node_is_classified_by_its_usage_against_low_and_high_thresholds(
    usage: dict[str, str], expected: str
) -> None:
    world = World().node("n", cpu="10", usage=usage)
    assert node_classes(world.plan(settings(low={"cpu": 20}, high={"cpu": 50}))) == {"n": expected}


def test_a_node_is_over_if_any_resource_is_above_its_high_threshold() -> None:
    world = World().node("n", cpu="10", memory="10Gi", usage={"cpu": "1", "memory": "9Gi"})
    result = world.plan(settings(low={"cpu": 20, "memory": 20}, high={"cpu": 50, "memory": 80}))
    assert node_classes(result) == {"n": "hotspot"}
    assert [r.resource for r in report(result, "n").resources if r.over] == ["memory"]


def test_a_node_is_low_only_if_every_resource_is_at_or_below_its_low_threshold() -> None:
    world = World().node("n", cpu="10", memory="10Gi", usage={"cpu": "1", "memory": "3Gi"})
    result = world.plan(settings(low={"cpu": 20, "memory": 20}, high={"cpu": 50, "memory": 80}))
    assert node_classes(result) == {"n": "normal"}


def test_a_cordoned_node_is_never_low_but_can_be_a_hotspot() -> None:
    world = World()
    world.node("idle-cordoned", usage=cpu("0.5"), unschedulable=True)
    world.node("hot-cordoned", usage=cpu("9"), unschedulable=True)
    result = world.plan(settings())
    assert node_classes(result) == {"hot-cordoned": "hotspot", "idle-cordoned": "normal"}
    assert report(result, "idle-cordoned").cordoned


def test_a_resource_without_a_configured_threshold_counts_as_one_hundred_percent() -> None:
    world = World().node("n", cpu="10", memory="10Gi", usage={"cpu": "1", "memory": "9.9Gi"})
    result = world.plan(settings(low={"cpu": 20}, high={"cpu": 50}))
    memory = next(r for r in report(result, "n").resources if r.resource == "memory")
    assert (memory.low_percent, memory.high_percent) == (100.0, 100.0)
    assert node_classes(result) == {"n": "low"}


def test_only_a_high_threshold_lowers_the_unset_low_threshold_to_it() -> None:
    world = World().node("n", cpu="10", usage=cpu("4"))
    result = world.plan(settings(low={}, high={"cpu": 50}))
    cpu_report = next(r for r in report(result, "n").resources if r.resource == "cpu")
    assert (cpu_report.low_percent, cpu_report.high_percent) == (50.0, 50.0)
    assert node_classes(result) == {"n": "low"}


@pytest.mark.parametrize(
    ("percent", "base", "expected"),
    # 33.3 * 0.01 is 0.33299999999999996 in float64, so Go's int64(...) gives 332, and so must we.
    [(50, 104000, 52000), (20, 104000, 20800), (33.3, 1000, 332), (68.53, 3, 2), (100, 7, 7), (0, 999, 0)],
)
def test_absolute_thresholds_are_computed_like_koordinator(percent: float, base: int, expected: int) -> None:
    assert absolute_threshold(percent, base) == expected


def test_raw_allocatable_annotation_is_what_thresholds_are_a_percentage_of() -> None:
    world = World().node("n", cpu="10", usage=cpu("6"), raw_allocatable={"cpu": "20"})
    result = world.plan(settings())
    cpu_report = next(r for r in report(result, "n").resources if r.resource == "cpu")
    assert (cpu_report.base, cpu_report.high, round(cpu_report.usage_percent, 2)) == (20000, 10000, 30.0)
    assert node_classes(result) == {"n": "normal"}


def test_pods_usage_is_the_number_of_non_terminal_pods_on_the_node() -> None:
    world = World().node("n", pods=10, usage=cpu("1"))
    for i in range(6):
        world.pod(f"p{i}", on="n")
    world.pod("done", on="n", phase="Succeeded")
    result = world.plan(settings(low={"cpu": 20, "pods": 20}, high={"cpu": 50, "pods": 50}))
    pods = next(r for r in report(result, "n").resources if r.resource == "pods")
    assert (pods.usage, pods.high) == (6, 5)
    assert node_classes(result) == {"n": "hotspot"}


def test_deviation_thresholds_are_the_pool_mean_plus_or_minus_the_configured_percent() -> None:
    world = World()
    for name, used in (("a", "1"), ("b", "3.5"), ("c", "4.5"), ("d", "7")):  # mean 40%
        world.node(name, cpu="10", usage=cpu(used))
    config = settings(low={"cpu": 10}, high={"cpu": 15}, args={"useDeviationThresholds": True})
    result = world.plan(config)
    cpu_report = next(r for r in report(result, "a").resources if r.resource == "cpu")
    assert (cpu_report.low_percent, cpu_report.high_percent) == (30.0, 55.0)
    assert node_classes(result) == {"a": "low", "b": "normal", "c": "normal", "d": "hotspot"}


def test_deviation_mean_includes_cordoned_nodes_and_excludes_skipped_ones() -> None:
    world = World()
    world.node("a", usage=cpu("2"))
    world.node("cordoned", usage=cpu("6"), unschedulable=True)
    world.node("not-ready", usage=cpu("10"), ready=False)
    config = settings(low={"cpu": 10}, high={"cpu": 10}, args={"useDeviationThresholds": True})
    cpu_report = next(r for r in report(world.plan(config), "a").resources if r.resource == "cpu")
    assert cpu_report.high_percent == 50.0  # mean (20% + 60%) / 2 = 40%, plus 10


def test_deviation_thresholds_are_clamped_to_zero_and_one_hundred_percent() -> None:
    world = World().node("a", usage=cpu("1")).node("b", usage=cpu("9"))
    config = settings(low={"cpu": 80}, high={"cpu": 80}, args={"useDeviationThresholds": True})
    cpu_report = next(r for r in report(world.plan(config), "a").resources if r.resource == "cpu")
    assert (cpu_report.low_percent, cpu_report.high_percent) == (0.0, 100.0)


def test_in_deviation_mode_a_resource_without_deviations_never_triggers() -> None:
    world = World().node("a", memory="10Gi", usage=mem("9.9Gi")).node("b", memory="10Gi", usage=mem("0.1Gi"))
    config = settings(low={"cpu": 10}, high={"cpu": 10}, args={"useDeviationThresholds": True})
    assert "hotspot" not in node_classes(world.plan(config)).values()


@pytest.mark.parametrize(
    ("low", "high", "expected_percents", "expected_classes"),
    [
        # Mean 50%: 10 below and 20 above make a 40%..70% band.
        ({"cpu": 10}, {"cpu": 20}, (40.0, 70.0), {"cool": "low", "mid": "normal", "hot": "hotspot"}),
        # Koordinator reads a low deviation of 0 as unset: that resource is 100%/100%, whatever the high.
        ({"cpu": 0}, {"cpu": 20}, (100.0, 100.0), {"cool": "low", "mid": "low", "hot": "low"}),
        ({"cpu": 0}, {"cpu": 0}, (100.0, 100.0), {"cool": "low", "mid": "low", "hot": "low"}),
    ],
)
def test_a_low_deviation_of_zero_means_unset_as_in_koordinator(
    low: dict[str, float],
    high: dict[str, float],
    expected_percents: tuple[float, float],
    expected_classes: dict[str, str],
) -> None:
    world = World()
    for name, used in (("cool", "2"), ("mid", "4.5"), ("hot", "8.5")):  # mean 50%
        world.node(name, cpu="10", usage=cpu(used))
    result = world.plan(settings(low=low, high=high, args={"useDeviationThresholds": True}))
    cpu_report = next(r for r in report(result, "cool").resources if r.resource == "cpu")
    assert (cpu_report.low_percent, cpu_report.high_percent) == expected_percents
    assert node_classes(result) == expected_classes


@pytest.mark.parametrize(
    ("prod_low", "expected"),
    [
        ({"cpu": 5}, {"a": "low", "b": "hotspot"}),  # prod mean 50%: 45%..55%
        ({"cpu": 0}, {"a": "low", "b": "low"}),  # a prod low deviation of 0 is unset: 100%/100%
    ],
)
def test_a_prod_low_deviation_of_zero_means_unset_too(
    prod_low: dict[str, float], expected: dict[str, str]
) -> None:
    world = World().node("a", cpu="10", usage=cpu("1")).node("b", cpu="10", usage=cpu("9"))
    world.deployment("web", 4).pod("web-a", on="a", owner="web", usage=cpu("1"))
    world.pod("web-b", on="b", owner="web", usage=cpu("9"))
    args = {"useDeviationThresholds": True, "prodLowThresholds": prod_low, "prodHighThresholds": {"cpu": 5}}
    result = world.plan(settings(low={"cpu": 60}, high={"cpu": 60}, args=args))
    assert {r.node: r.prod_class for r in result.node_reports} == expected


def test_deviation_mode_with_only_one_of_low_and_high_for_a_resource_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"args\.highThresholds\.memory: with useDeviationThresholds"):
        settings(low={"cpu": 10, "memory": 5}, high={"cpu": 10}, args={"useDeviationThresholds": True})


@pytest.mark.parametrize(
    ("setup", "code"),
    [
        ({"ready": False}, reasons.NODE_NOT_READY),
        ({"usage_age": 181.0}, reasons.NODE_STALE_USAGE),
        ({"usage": None}, reasons.NODE_NO_USAGE),
        ({"cpu": "0"}, reasons.NODE_NO_ALLOCATABLE),
    ],
)
def test_nodes_without_trustworthy_usage_are_skipped_with_a_reason(
    setup: dict[str, object], code: str
) -> None:
    options: dict[str, object] = {"usage": cpu("9")}
    options.update(setup)
    world = World().node("n", **options)  # type: ignore[arg-type]
    world.node("cool", usage=cpu("1"))
    world.deployment("web", 4).pod("web-1", on="n", owner="web", usage=cpu("3"))
    result = world.plan(settings())
    assert (report(result, "n").node_class, report(result, "n").skip_code) == ("skipped", code)
    assert result.evictions == ()


def test_a_usage_error_from_the_metrics_source_skips_the_node_with_its_message() -> None:
    world = World().node("n", usage=cpu("9"))
    world.node_errors["n"] = "prometheus: query timed out"
    result = world.plan(settings())
    assert (report(result, "n").skip_code, report(result, "n").skip_message) == (
        reasons.NODE_USAGE_ERROR,
        "prometheus: query timed out",
    )


def test_usage_exactly_at_the_expiration_age_is_still_fresh() -> None:
    world = World().node("n", usage=cpu("1"), usage_age=180.0)
    assert node_classes(world.plan(settings())) == {"n": "low"}


def test_the_expiration_age_is_configurable() -> None:
    world = World().node("n", usage=cpu("1"), usage_age=60.0)
    result = world.plan(settings(args={"nodeMetricExpirationSeconds": 30}))
    assert report(result, "n").skip_code == reasons.NODE_STALE_USAGE


@pytest.mark.parametrize(
    "top",
    [
        {"nodeSelector": "tier=web"},
        {"nodeSelector": {"matchLabels": {"tier": "web"}}},
    ],
)
def test_nodes_outside_the_node_selector_are_skipped(top: dict[str, object]) -> None:
    world = (
        World()
        .node("web", labels={"tier": "web"}, usage=cpu("1"))
        .node("db", labels={"tier": "db"}, usage=cpu("9"))
    )
    result = world.plan(settings(top=top))
    assert node_classes(result) == {"db": "skipped", "web": "low"}
    assert report(result, "db").skip_code == reasons.NODE_OUTSIDE_SELECTOR


def test_the_plugin_node_selector_also_restricts_nodes() -> None:
    world = World().node("web", labels={"tier": "web"}, usage=cpu("1")).node("db", usage=cpu("9"))
    result = world.plan(
        settings(args={"nodeSelector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]}})
    )
    assert report(result, "db").skip_code == reasons.NODE_OUTSIDE_SELECTOR


def test_a_string_node_selector_that_is_not_a_selector_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="nodeSelector"):
        World().node("n", usage=cpu("1")).plan(settings(top={"nodeSelector": "tier in web"}))


def test_reports_cover_every_node_in_name_order() -> None:
    world = World().node("b", usage=cpu("1")).node("a", usage=cpu("1")).node("c", ready=False, usage=cpu("1"))
    assert [r.node for r in world.plan(settings(), now=NOW).node_reports] == ["a", "b", "c"]


def test_nodes_of_one_shape_share_their_thresholds_and_a_node_of_another_shape_gets_its_own() -> None:
    known: dict[tuple[object, ...], Levels] = {}
    small = [Levels({"cpu": 4000, "memory": 8 * 2**30}, {"cpu": 1000, "memory": 2**30}) for _ in range(2)]
    large = Levels({"cpu": 16000, "memory": 8 * 2**30}, {"cpu": 1000, "memory": 2**30})
    for levels in (*small, large):
        levels.set_thresholds({"cpu": 20, "memory": 30}, {"cpu": 70, "memory": 80}, known)
    assert small[0].high == small[1].high == {"cpu": 2800, "memory": absolute_threshold(80, 8 * 2**30)}
    assert large.high["cpu"] == 11200 and large.low["cpu"] == 3200
    # Thresholds set again on one node (no sharing) leave the node it shared them with as it was.
    small[1].set_thresholds({"cpu": 10, "memory": 10}, {"cpu": 50, "memory": 50})
    assert small[1].high["cpu"] == 2000 and small[0].high["cpu"] == 2800
