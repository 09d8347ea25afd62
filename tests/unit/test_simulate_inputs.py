"""Bad CLUSTER, USAGE and CONFIG files: exit 2 with one message naming the file, object and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from descheduler.cli import main
from descheduler.simulate.inputs import InputError, UsageSeries, load_cluster, load_usage
from tests.support.configs import low_node_load_yaml

CONFIG = low_node_load_yaml()
CLUSTER = """\
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Node
  metadata: {name: n1}
  status:
    allocatable: {cpu: "4", memory: 8Gi, pods: "110"}
    conditions: [{type: Ready, status: "True"}]
- apiVersion: v1
  kind: Pod
  metadata: {name: p1, namespace: default}
  spec:
    nodeName: n1
    containers: [{name: c, resources: {requests: {cpu: 100m}}}]
  status: {phase: Running}
"""
USAGE = """\
nodes:
  n1: {cpu: 1, memory: 1Gi}
pods:
  default/p1: {cpu: 200m, memory: 100Mi, age: 30s}
"""


def run(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    config: str = CONFIG,
    cluster: str = CLUSTER,
    usage: str = USAGE,
) -> tuple[int, str, str]:
    files = {"config.yaml": config, "cluster.yaml": cluster, "usage.yaml": usage}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    code = main([
        "simulate", "--config", str(tmp_path / "config.yaml"), "--cluster", str(tmp_path / "cluster.yaml"),
        "--usage", str(tmp_path / "usage.yaml"), "--output", "json",
    ])  # fmt: skip
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_good_inputs_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(tmp_path, capsys)
    assert (code, err) == (0, "")
    assert '"cycle": 1' in out


BAD_CLUSTERS = [
    ("a: [b", "cluster.yaml: not valid YAML (line 1, column"),
    (
        CLUSTER.replace("cpu: 100m", "cpu: lots"),
        "Pod default/p1: spec.containers[0].resources.requests.cpu",
    ),
    (CLUSTER.replace("nodeName: n1", "nodeName: n9"), "Pod default/p1: spec.nodeName 'n9' is not a Node"),
    (CLUSTER + "---\napiVersion: v1\nkind: Node\nmetadata: {name: n1}\n", "Node n1 appears twice"),
    ("- 1\n- 2\n", "expected a Kubernetes object, got list"),
    ("kind: Pod\nmetadata: {namespace: x}\n", "Pod x/<no name>: metadata.name is required"),
]
BAD_USAGES = [
    ("nodes: [", "usage.yaml: not valid YAML"),
    (
        "nodes:\n  n9: {cpu: 1, memory: 1Gi}\n",
        "nodes.n9: there is no Node named 'n9' in the cluster file",
    ),
    ("pods:\n  default/p9: {cpu: 1, memory: 1Gi}\n", "pods.default/p9: there is no Pod default/p9"),
    ("pods:\n  p1: {cpu: 1, memory: 1Gi}\n", "pods.p1: pod keys are written NAMESPACE/NAME"),
    ("nodes:\n  n1: {cpu: 1x, memory: 1Gi}\n", "nodes.n1.cpu: '1x' is not a Kubernetes quantity"),
    ("nodes:\n  n1: {memory: 1Gi}\n", "nodes.n1: cpu is required in a sample"),
    ("nodes:\n  n1: {cpu: 1, memory: 1Gi, age: 5}\n", "nodes.n1.age: '5' is not a duration"),
    ("nodes:\n  n1: []\n", "nodes.n1: a list of samples must not be empty"),
    ("nodes:\n  n1: [{cpu: 1, memory: 1Gi}, {cpu: 1}]\n", "nodes.n1[1]: memory is required in a sample"),
    ("nodes:\n  n1: 5\n", "nodes.n1: a sample must be a mapping"),
    ("node:\n  n1: {cpu: 1, memory: 1Gi}\n", "unknown key 'node'; the keys are nodes and pods"),
    ("nodes: {}\n---\npods: {}\n", "expected one YAML document"),
    ("- 1\n", "expected a mapping with the keys nodes and pods"),
    ("nodes: [1]\n", "nodes must be a mapping of node name to sample"),
]


@pytest.mark.parametrize(
    ("which", "text", "message"),
    [("cluster", text, message) for text, message in BAD_CLUSTERS]
    + [("usage", text, message) for text, message in BAD_USAGES],
)
def test_a_bad_cluster_or_usage_file_exits_2_with_one_line_naming_the_object_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], which: str, text: str, message: str
) -> None:
    code, out, err = run(tmp_path, capsys, **{which: text})
    assert (code, out) == (2, "")
    assert message in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_bad_configuration_exits_2_with_the_field_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(tmp_path, capsys, config=CONFIG.replace("highThresholds", "highThreshold"))
    assert code == 2
    assert "highThreshold" in err and "did you mean 'highThresholds'" in err
    assert "Traceback" not in err


def test_a_configuration_only_the_planner_can_reject_also_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        tmp_path,
        capsys,
        config=CONFIG.replace(
            "kind: DeschedulerConfiguration", "kind: DeschedulerConfiguration\nnodeSelector: 'a in b'"
        ),
    )
    assert code == 2
    assert "nodeSelector" in err


def test_a_missing_file_exits_2_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "--config", str(tmp_path / "nope.yaml"), "--cluster", "x", "--usage", "y"])
    assert code == 2
    assert "nope.yaml" in capsys.readouterr().err


def test_the_configmap_form_of_the_configuration_is_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    indented = "\n".join("    " + line for line in CONFIG.splitlines())
    configmap = (
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\ndata:\n  config.yaml: |\n{indented}\n"
    )
    code, _, err = run(tmp_path, capsys, config=configmap)
    assert (code, err) == (0, "")


def test_usage_samples_may_list_one_value_per_cycle_and_the_last_repeats(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(CLUSTER)
    (tmp_path / "u.yaml").write_text(
        "nodes:\n  n1: [{cpu: 1, memory: 1Gi}, {cpu: 3, memory: 1Gi, age: 1m}]\n"
    )
    series = load_usage(tmp_path / "u.yaml", load_cluster(tmp_path / "c.yaml"))
    samples = series.nodes["n1"]
    assert [UsageSeries.at(samples, c).resources["cpu"] for c in (1, 2, 3, 9)] == [1000, 3000, 3000, 3000]
    assert UsageSeries.at(samples, 2).age == 60.0


def test_an_unreadable_cluster_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read cluster file"):
        load_cluster(tmp_path / "missing.yaml")


DRA_SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "dra-device-pods"


def test_a_json_dump_with_dra_objects_gives_simulate_slices_claims_and_classes(tmp_path: Path) -> None:
    """``kubectl get nodes,pods,...,resourceslices,resourceclaims,deviceclasses -A -o json`` gzipped: the
    DRA objects reach the snapshot, and simulate moves the device pod only to the node with a free a100."""
    import gzip
    import json

    import yaml

    dump = tmp_path / "cluster.json.gz"
    dump.write_bytes(
        gzip.compress(json.dumps(yaml.safe_load((DRA_SCENARIO / "cluster.yaml").read_text())).encode())
    )
    snapshot = load_cluster(dump)
    assert sorted(s.name for s in snapshot.resource_slices) == [
        "a-gpu.example.com",
        "c-gpu.example.com",
        "d-gpu.example.com",
    ]
    assert sorted(c.key for c in snapshot.resource_claims) == ["ml/shared-gpu", "ml/train-0-gpu-x7k2p"]
    assert [c.name for c in snapshot.device_classes] == ["gpu.example.com"]
    args = ["--config", str(DRA_SCENARIO / "config.yaml"), "--usage", str(DRA_SCENARIO / "usage.yaml")]
    assert main(["simulate", "--cluster", str(dump), *args, "--output", "json", "--cycles", "1"]) == 0


def test_a_bad_resource_slice_in_a_dump_is_reported_by_name_and_field(tmp_path: Path) -> None:
    text = (
        (DRA_SCENARIO / "cluster.yaml")
        .read_text()
        .replace("resourceSliceCount: 1}", "resourceSliceCount: 0}", 1)
    )
    (tmp_path / "cluster.yaml").write_text(text)
    with pytest.raises(InputError, match=r"ResourceSlice a-gpu.example.com: spec.pool.resourceSliceCount"):
        load_cluster(tmp_path / "cluster.yaml")
