"""Bad input files: one clear line per problem, every problem at once, exit 2, never a traceback.

Covers ``validate`` and ``simulate``: files that are not UTF-8, a Kubernetes object of the wrong kind,
several mistakes in one file, mistakes spread over the three files of ``simulate``, an empty usage
file (nodes skipped for want of usage, as in the live service) and samples the live sources distrust.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from descheduler.cli import main
from descheduler.usage.samples import amount_problem, join_reasons
from tests.support.configs import low_node_load_yaml

from .test_simulate_inputs import CLUSTER, CONFIG, USAGE

DEPLOYMENT = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 2}\n"
FIVE_MISTAKES = """\
apiVersion: descheduler/v1alpha2
kind: DeschedulerConfiguration
deschedulingInterval: soon
profiles:
- name: p
  plugins: {balance: {enabled: [{name: LowNodeLoads}]}}
  pluginConfig:
  - name: LowNodeLoad
    args:
      lowThresholds: {cpu: 20}
      highThresholds: {cpu: 500}
      anomalyCondition: {consecutiveAbnormalities: -1}
  - name: MigrationController
    args: {evictQPS: fast}
"""

CONTROL_MISTAKES = low_node_load_yaml(
    rest="""\
  - name: MigrationController
    args:
      evictionWindows:
      - {days: [], start: "22:00", end: "06:00"}
      - {days: [Sat], start: "25:00", end: "06:00", timeZone: Mars/Olympus}
      - {days: [Sun], start: "10:00", end: "10:00"}
      churnBudget: {maxEvictions: -5, period: 24h}
"""
)
"""A window that never opens, an unparseable time and an unknown zone, one that never opens because
start equals end, and a negative budget: every one named on its own line."""


def write(folder: Path, name: str, content: str | bytes) -> str:
    path = folder / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return str(path)


def simulate(folder: Path, capsys: pytest.CaptureFixture[str], **files: str | bytes) -> tuple[int, str, str]:
    given = {"config": CONFIG, "cluster": CLUSTER, "usage": USAGE, **files}
    args = ["simulate", "--output", "json"]
    for role, content in given.items():
        args += [f"--{role}", write(folder, f"{role}.yaml", content)]
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


BAD_CONFIGS: list[tuple[str, str | bytes, list[str]]] = [
    ("non-utf8", b"kind: ConfigMap\ndata:\n  c: \xff\xfe\n", ["not UTF-8 text: byte 0xff at line 3"]),
    ("deployment", DEPLOYMENT, ["kind: this is a 'Deployment' (apps/v1), not a DeschedulerConfiguration"]),
    (
        "deployment-in-configmap",
        "apiVersion: v1\nkind: ConfigMap\ndata:\n  c: |\n    kind: Deployment\n",
        ["data.c.kind: this is a 'Deployment', not a DeschedulerConfiguration"],
    ),
    (
        "five-mistakes",
        FIVE_MISTAKES,
        # In the document's order: the plugin list comes before the plugins' args.
        [
            "deschedulingInterval: 'soon' is not a duration",
            "unknown plugin 'LowNodeLoads'; did you mean 'LowNodeLoad'?",
            "highThresholds.cpu: percentage must be between 0 and 100, got 500",
            "consecutiveAbnormalities: Input should be greater than or equal to 0",
            "evictQPS: expected a number",
        ],
    ),
    (
        "windows-and-budget",
        CONTROL_MISTAKES,
        [
            "args.evictionWindows[0].days: no day given: this window never opens",
            "args.evictionWindows[1].start: expected a time of day as HH:MM (00:00 to 23:59), got '25:00'",
            "args.evictionWindows[1].timeZone: unknown time zone 'Mars/Olympus'",
            "args.evictionWindows[2].end: end equals start (10:00): this window never opens",
            "args.churnBudget.maxEvictions: Input should be greater than or equal to 0",
        ],
    ),
]
"""Bad configurations and the problem lines ``validate`` prints for them, in order."""


@pytest.mark.parametrize(
    ("content", "expected"), [c[1:] for c in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS]
)
def test_validate_names_every_problem_of_a_bad_configuration_on_its_own_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | bytes, expected: list[str]
) -> None:
    code = main(["validate", write(tmp_path, "config.yaml", content)])
    err = capsys.readouterr().err
    assert code == 2
    assert "Traceback" not in err
    problems = [line for line in error_lines(err) if line.startswith("  - ")]
    assert len(problems) == len(expected), err
    for line, text in zip(problems, expected, strict=True):
        assert text in line


@pytest.mark.parametrize("role", ["config", "cluster", "usage"])
def test_simulate_refuses_a_file_that_is_not_utf8_in_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], role: str
) -> None:
    code, out, err = simulate(tmp_path, capsys, **{role: b"nodes: {}\n# caf\xe9\n"})
    assert (code, out) == (2, "")
    assert f"{role}.yaml" in err and "not UTF-8 text: byte 0xe9 at line 2" in err
    assert "Traceback" not in err


def test_simulate_reports_the_mistakes_of_all_three_files_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = CLUSTER.replace("cpu: 100m", "cpu: lots") + "---\n- not an object\n"
    usage = "nodes:\n  n1: {cpu: 1x, memory: 1Gi}\n  n9: {cpu: 1, memory: 1Gi}\nextra: 1\n"
    code, out, err = simulate(
        tmp_path, capsys, config=CONFIG.replace("highThresholds", "highThreshold"), cluster=cluster
    )
    assert (code, out) == (2, "")
    assert "did you mean 'highThresholds'" in err
    assert "Pod default/p1: spec.containers[0].resources.requests.cpu" in err
    assert "expected a Kubernetes object, got list" in err
    code, out, err = simulate(tmp_path, capsys, usage=usage)
    assert code == 2
    lines = error_lines(err)
    assert len(lines) == 3, err
    assert any("unknown key 'extra'" in line for line in lines)
    assert any("nodes.n1.cpu: '1x' is not a Kubernetes quantity" in line for line in lines)
    assert any("nodes.n9: there is no Node named 'n9'" in line for line in lines)


def test_a_kubernetes_object_given_as_the_usage_file_is_named_by_its_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = simulate(tmp_path, capsys, usage=DEPLOYMENT)
    assert code == 2
    what = "this is a 'Deployment', not a usage file (a mapping with nodes: and pods:)"
    assert error_lines(err) == [f"error: {tmp_path / 'usage.yaml'}: {what}"]


def test_a_configuration_given_as_the_cluster_file_says_no_nodes_were_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = simulate(tmp_path, capsys, cluster=CONFIG)
    assert code == 2
    assert "no Node objects (found DeschedulerConfiguration)" in err


def node_entry(out: str, node: str = "n1") -> dict[str, Any]:
    nodes: list[dict[str, Any]] = json.loads(out)["cycles"][0]["nodes"]
    return next(n for n in nodes if n["node"] == node)


@pytest.mark.parametrize("usage", ["", "nodes: {}\npods: {}\n"], ids=["empty-file", "empty-maps"])
def test_an_empty_usage_file_skips_every_node_for_want_of_usage_instead_of_reading_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], usage: str
) -> None:
    code, out, err = simulate(tmp_path, capsys, usage=usage)
    assert (code, err) == (0, "")
    entry = node_entry(out)
    assert entry["class"] == "skipped"
    assert entry["skip"]["code"] == "no-usage"


def test_a_node_without_its_own_sample_still_sums_its_pods_samples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = simulate(tmp_path, capsys, usage="pods:\n  default/p1: {cpu: 200m, memory: 100Mi}\n")
    assert code == 0
    assert node_entry(out)["class"] == "low"


@pytest.mark.parametrize(
    ("sample", "resource", "amount"),
    [("{cpu: 1000000, memory: 1Gi}", "cpu", 1e9), ("{cpu: -1, memory: 1Gi}", "cpu", -1000.0)],
    ids=["a-million-cores", "negative-cpu"],
)
def test_simulate_distrusts_a_sample_by_the_very_rule_and_words_of_the_live_sources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sample: str, resource: str, amount: float
) -> None:
    code, out, _ = simulate(tmp_path, capsys, usage=f"nodes:\n  n1: {sample}\n")
    assert code == 0
    entry = node_entry(out)
    live = amount_problem(resource, amount, {"cpu": 4000, "memory": 8 * 2**30})
    assert live is not None
    assert entry["class"] == "skipped"
    assert entry["skip"] == {"code": "usage-error", "message": join_reasons([live])}
