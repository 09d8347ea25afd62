"""The Helm chart in ``charts/``: linted and rendered by a real ``helm`` (built from its Go module and cached,
see ``tests/helm/build.py``), every rendered object validated against the Kubernetes schemas, and the
values operators set doing what they say: the configuration (a Koordinator ConfigMap as is), dry-run,
replicas and leader election, RBAC parts, metrics and the ServiceMonitor.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from descheduler.config.load import EffectiveConfig, load_config, load_config_document
from tests.helm.build import BuildError, build_helm
from tests.unit.test_manifests import (
    EXPECTED_CLUSTER_RULES,
    EXPECTED_LEADER_ELECTION_RULES,
    MANIFESTS,
    OLDEST_SUPPORTED_KUBERNETES,
    POLICIES,
    _expand,
    _flow_subjects,
    _held_usernames,
    _render,
    _triples,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "load-aware-descheduler"
KOORDINATOR_GUIDE = REPO / "tests" / "fixtures" / "koordinator-guide-configmap.yaml"
NAMESPACE = "descheduling"
RELEASE = "lad"

Obj = dict[str, Any]


@pytest.fixture(scope="session")
def helm() -> Path:
    try:
        return build_helm()
    except BuildError as exc:
        pytest.fail(str(exc), pytrace=False)


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120, check=False)


def render(helm: Path, *values: str) -> list[Obj]:
    done = run_helm(helm, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *values)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def one(objs: Sequence[Obj], kind: str) -> Obj:
    found = [o for o in objs if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def configuration(objs: Sequence[Obj]) -> EffectiveConfig:
    (configmap,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-config")]
    return load_config_document(configmap, "chart ConfigMap")


def container(objs: Sequence[Obj]) -> Obj:
    first: Obj = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return first


VALUE_SETS: dict[str, list[str]] = {
    "defaults": [],
    "live": ["--set", "dryRun=false"],
    "koordinator-configmap-as-is": ["--set-file", f"config={KOORDINATOR_GUIDE}"],
    "delete-policy-rbac": ["--set", "rbac.podDelete=true,rbac.metricsServer=false"],
    "no-hotspot-taint-rbac": ["--set", "rbac.hotspotTaint=false"],
    "no-admission-policies": ["--set", "admissionPolicies.enabled=false"],
    "surge-restart-rbac": ["--set", "rbac.surgeRestart=true"],
    "service-monitor": [
        "--set",
        "metrics.serviceMonitor.enabled=true,metrics.serviceMonitor.labels.release=kps",
    ],
    "two-replicas": ["--set", "replicas=2"],
    "grafana-dashboard": ["--set", "grafanaDashboard.enabled=true"],
    "no-leader-election": ["--set", "leaderElection.enabled=false"],
    "custom-image-and-ports": [
        "--set",
        "image.repository=registry.example.com/lad,image.tag=1.2.3,ports.healthz=8081,ports.metrics=8082",
    ],
    "network-policy": ["--set", "networkPolicy.enabled=true"],
    "flow-control": ["--set", "flowControl.enabled=true"],
    "network-policy-egress": [
        "--set",
        "networkPolicy.enabled=true,networkPolicy.egress.restrict=true",
        "--set",
        "networkPolicy.egress.apiServer.cidrs={10.0.0.1/32,10.0.0.2/32}",
    ],
}


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_helm_lint_passes_strictly(helm: Path, values: list[str]) -> None:
    done = run_helm(helm, "lint", "--strict", str(CHART), "--namespace", NAMESPACE, *values)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_every_rendered_object_validates_against_the_kubernetes_schema_and_the_config_is_accepted(
    helm: Path, values: list[str]
) -> None:
    import kubernetes_validate  # type: ignore[import-untyped,unused-ignore]

    objs = render(helm, *values)
    for obj in objs:
        if obj["kind"] == "ServiceMonitor":
            continue  # a CRD: no built-in schema; checked against the Service below
        try:
            kubernetes_validate.validate(obj, OLDEST_SUPPORTED_KUBERNETES, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message}", pytrace=False)
    effective = configuration(objs)
    election = effective.config.leader_election
    assert election.resource_namespace == NAMESPACE
    ports = {p["name"]: p["containerPort"] for p in container(objs)["ports"]}
    assert effective.config.healthz_bind_address.endswith(f":{ports['healthz']}")
    assert effective.config.metrics_bind_address.endswith(f":{ports['metrics']}")


def test_a_koordinator_configmap_given_as_is_keeps_its_decisions(helm: Path) -> None:
    ours = configuration(render(helm, "--set-file", f"config={KOORDINATOR_GUIDE}"))
    theirs = load_config(KOORDINATOR_GUIDE)
    assert ours.low_node_load == theirs.low_node_load
    assert ours.migration == theirs.migration
    assert ours.config.profiles[0].name == "koord-descheduler"


def test_dry_run_is_the_default_and_a_flag_that_wins_over_the_configuration(helm: Path) -> None:
    assert "--dry-run" in container(render(helm))["args"]
    live = render(helm, "--set", "dryRun=false")
    assert "--dry-run" not in container(live)["args"]
    assert configuration(live).dry_run is False


def rules_of(objs: Sequence[Obj]) -> set[tuple[str, str, str]]:
    return set().union(*(_triples(rule) for rule in one(objs, "ClusterRole")["rules"]))


def test_the_cluster_role_is_the_manifests_one_and_grows_only_by_the_optional_parts(helm: Path) -> None:
    """The hotspot taint's node ``patch`` is on by default, as in the manifests (there in its own role)."""
    assert rules_of(render(helm)) - _expand(EXPECTED_CLUSTER_RULES) == {("", "nodes", "patch")}
    assert rules_of(render(helm, *VALUE_SETS["no-hotspot-taint-rbac"])) == _expand(EXPECTED_CLUSTER_RULES)
    optional = rules_of(render(helm, *VALUE_SETS["delete-policy-rbac"]))
    assert optional - _expand(EXPECTED_CLUSTER_RULES) == {("", "pods", "delete"), ("", "nodes", "patch")}
    assert ("metrics.k8s.io", "nodes", "get") not in optional
    restarting = rules_of(render(helm, *VALUE_SETS["surge-restart-rbac"]))
    assert restarting - _expand(EXPECTED_CLUSTER_RULES) == {
        ("apps", "deployments", "patch"),
        ("", "nodes", "patch"),
    }


def role_rules(objs: Sequence[Obj]) -> set[tuple[str, str, str, tuple[str, ...]]]:
    return {
        (g, r, v, tuple(rule.get("resourceNames", [])))
        for rule in one(objs, "Role")["rules"]
        for g, r, v in _triples(rule)
    }


def expected_role_rules(lease: str, *, election: bool = True) -> set[tuple[str, str, str, tuple[str, ...]]]:
    """The manifests' Role for ``lease``: the Lease (with election) and its migration-records ConfigMap."""
    return {
        (g, r, v, tuple(n.replace("<lease>", lease) for n in names))
        for g, r, verbs, names in EXPECTED_LEADER_ELECTION_RULES
        for v in verbs
        if election or r != "leases"
    }


def test_the_role_grants_the_configured_lease_and_its_migration_records_like_the_manifests(
    helm: Path,
) -> None:
    objs = render(helm, "--set", "leaderElection.resourceName=pool-a")
    assert role_rules(objs) == expected_role_rules("pool-a")
    assert configuration(objs).config.leader_election.resource_name == "pool-a"


def test_leader_election_off_keeps_only_the_records_and_many_replicas_then_refuse_to_render(
    helm: Path,
) -> None:
    objs = render(helm, *VALUE_SETS["no-leader-election"])
    assert role_rules(objs) == expected_role_rules("load-aware-descheduler", election=False)
    assert configuration(objs).config.leader_election.leader_elect is False
    done = run_helm(helm, "template", RELEASE, str(CHART), "--set", "replicas=2,leaderElection.enabled=false")
    assert done.returncode != 0
    assert "replicas > 1 needs leaderElection.enabled" in done.stderr


def test_a_configuration_change_changes_the_pod_template_so_the_pods_roll(helm: Path) -> None:
    def checksum(*values: str) -> str:
        template = one(render(helm, *values), "Deployment")["spec"]["template"]
        return str(template["metadata"]["annotations"]["checksum/config"])

    assert checksum() == checksum("--set", "image.tag=9.9.9")
    assert checksum() != checksum("--set", "config.deschedulingInterval=2m")


def test_the_service_monitor_selects_the_metrics_service_on_its_port(helm: Path) -> None:
    objs = render(helm, *VALUE_SETS["service-monitor"])
    monitor, service = one(objs, "ServiceMonitor"), one(objs, "Service")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= (
        one(objs, "Deployment")["spec"]["template"]["metadata"]["labels"].items()
    )
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [p["name"] for p in service["spec"]["ports"]]
    assert not [o for o in render(helm) if o["kind"] == "ServiceMonitor"], "off by default"


def test_image_resources_and_priority_follow_the_values(helm: Path) -> None:
    objs = render(helm, *VALUE_SETS["custom-image-and-ports"])
    assert container(objs)["image"] == "registry.example.com/lad:1.2.3"
    assert container(render(helm))["image"] == "load-aware-descheduler:0.1.0"
    pod = one(objs, "Deployment")["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert container(objs)["resources"]["limits"]["memory"] == "1Gi"


def test_the_grafana_dashboard_is_optional_and_is_the_repositorys_dashboard(helm: Path) -> None:
    import json

    assert not [o for o in render(helm) if o["metadata"]["name"].endswith("-dashboard")]
    objs = render(helm, *VALUE_SETS["grafana-dashboard"])
    (board,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboard")]
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    committed = json.loads((REPO / "dashboards" / "descheduler.json").read_text())
    assert json.loads(board["data"]["load-aware-descheduler.json"]) == committed


def test_the_network_policy_is_optional_and_admits_only_the_chosen_peers_to_the_pods_ports(
    helm: Path,
) -> None:
    assert not [o for o in render(helm) if o["kind"] == "NetworkPolicy"], "off by default"
    objs = render(helm, *VALUE_SETS["network-policy"])
    policy = one(objs, "NetworkPolicy")
    pod_labels = one(objs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"], "egress unrestricted unless asked"
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    assert {p["port"] for p in rule["ports"]} == {p["name"] for p in container(objs)["ports"]}
    nobody = one(
        render(helm, *VALUE_SETS["network-policy"], "--set", "networkPolicy.ingress.from=null"),
        "NetworkPolicy",
    )
    assert nobody["spec"]["ingress"] == [], "no peers: no rule (a rule without `from` would admit everyone)"


def test_restricted_egress_reaches_only_the_api_server_prometheus_and_dns(helm: Path) -> None:
    policy = one(render(helm, *VALUE_SETS["network-policy-egress"]), "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    api, prometheus, dns = policy["spec"]["egress"]
    assert api["to"] == [{"ipBlock": {"cidr": "10.0.0.1/32"}}, {"ipBlock": {"cidr": "10.0.0.2/32"}}]
    assert {p["port"] for p in api["ports"]} == {443, 6443}
    assert prometheus["ports"] == [{"port": 9090, "protocol": "TCP"}]
    assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {(53, "UDP"), (53, "TCP")}
    done = run_helm(helm, "template", RELEASE, str(CHART), "--set", "networkPolicy.enabled=true")
    assert done.returncode == 0
    done = run_helm(
        helm,
        "template",
        RELEASE,
        str(CHART),
        "--set",
        "networkPolicy.enabled=true,networkPolicy.egress.restrict=true",
    )
    assert done.returncode != 0 and "networkPolicy.egress.apiServer.cidrs" in done.stderr


CM_HEAD = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: koord\ndata:\n"
BAD_CONFIGS: dict[str, tuple[str, str]] = {
    "unparseable YAML": ("kind: [DeschedulerConfiguration\n", "config: not valid YAML"),
    "a scalar": ("just words\n", "config: not valid YAML"),
    "a list": ("- kind: DeschedulerConfiguration\n", "config: not valid YAML"),
    "a repeated top-level key": (
        "dryRun: true\nkind: DeschedulerConfiguration\ndryRun: false\n",
        'config: key "dryRun" appears more than once',
    ),
    "leaderElection not a mapping": ("leaderElection: true\n", "config: leaderElection must be a mapping"),
    "a ConfigMap with broken data": (
        CM_HEAD + "  config.yaml: |\n    kind: [x\n",
        "config: ConfigMap data key config.yaml: not valid YAML",
    ),
    "a ConfigMap with two data keys": (
        CM_HEAD + "  a.yaml: |\n    kind: DeschedulerConfiguration\n  b.yaml: |\n    dryRun: false\n",
        "exactly one data key, found 2 (a.yaml, b.yaml)",
    ),
    "a ConfigMap repeating its data key": (
        CM_HEAD + "  config.yaml: |\n    dryRun: true\n  config.yaml: |\n    dryRun: false\n",
        'ConfigMap data key "config.yaml" appears more than once',
    ),
    "a ConfigMap whose configuration repeats a key": (
        CM_HEAD + "  config.yaml: |\n    dryRun: true\n    dryRun: false\n",
        'config: ConfigMap data key config.yaml: key "dryRun" appears more than once',
    ),
}


@pytest.mark.parametrize(("text", "message"), BAD_CONFIGS.values(), ids=BAD_CONFIGS.keys())
def test_a_config_the_chart_cannot_read_stops_the_install_with_a_message_naming_it(
    helm: Path, tmp_path: Path, text: str, message: str
) -> None:
    """Before, helm's fromYaml turned such text into an `Error:` key: the install succeeded and the pod
    crash-looped (or, for a repeated key, silently ran with the last value). `helm install` renders with
    the same engine as `helm template`; `helm lint` reports a template's `fail` only as INFO."""
    given = tmp_path / "config.yaml"
    given.write_text(text)
    done = run_helm(helm, "template", RELEASE, str(CHART), "--set-file", f"config={given}")
    assert done.returncode != 0, f"helm template accepted {text!r}"
    assert message in done.stderr and "Error:" not in done.stdout, done.stderr


@pytest.mark.parametrize("as_configmap", [False, True], ids=["configuration", "koordinator-configmap"])
def test_the_users_leader_election_timings_are_kept_and_the_chart_sets_only_where_the_lease_is(
    helm: Path, tmp_path: Path, as_configmap: bool
) -> None:
    text = (
        "apiVersion: descheduler/v1alpha2\nkind: DeschedulerConfiguration\n"
        "leaderElection:\n  leaderElect: false\n  leaseDuration: 40s\n  renewDeadline: 30s\n"
        "  retryPeriod: 5s\n  resourceName: theirs\n  resourceNamespace: kube-system\n"
    )
    if as_configmap:
        text = CM_HEAD + "  config.yaml: |\n" + "".join(f"    {line}\n" for line in text.splitlines())
    given = tmp_path / "config.yaml"
    given.write_text(text)
    election = configuration(render(helm, "--set-file", f"config={given}")).config.leader_election
    assert (election.lease_duration, election.renew_deadline, election.retry_period) == (40.0, 30.0, 5.0)
    assert (election.leader_elect, election.resource_name, election.resource_namespace) == (
        True,
        "load-aware-descheduler",
        NAMESPACE,
    )


# --- steering by default, held to its taint by the admission policies ------------------------------------


def test_the_default_configuration_turns_the_hotspot_taint_on(helm: Path) -> None:
    low_node_load = configuration(render(helm)).low_node_load
    assert low_node_load is not None and low_node_load.hotspot_taint.enabled is True


def policy_specs(objs: Sequence[Obj]) -> dict[str, Obj]:
    """The ValidatingAdmissionPolicies' specs by what they hold (``nodes``, ``deployments``)."""
    return {
        o["metadata"]["name"].rsplit("-", 1)[1]: o["spec"]
        for o in objs
        if o["kind"] == "ValidatingAdmissionPolicy"
    }


@pytest.mark.parametrize("release", [RELEASE, "pool-b"])
def test_the_admission_policies_are_the_manifests_ones_and_hold_the_releases_service_account(
    helm: Path, release: str
) -> None:
    done = run_helm(helm, "template", release, str(CHART), "--namespace", "team-y")
    assert done.returncode == 0, done.stderr
    objs = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    assert policy_specs(objs) == policy_specs(_render(MANIFESTS)[0])
    account = one(objs, "ServiceAccount")["metadata"]["name"]
    assert account.startswith(release)
    for policy, _, _ in POLICIES:
        name = f"{release}-load-aware-descheduler-{policy.rsplit('-', 1)[1]}"
        assert _held_usernames(objs, name) == {f"system:serviceaccount:team-y:{account}"}


def test_the_admission_policies_can_be_left_out_for_clusters_older_than_1_30(helm: Path) -> None:
    objs = render(helm, *VALUE_SETS["no-admission-policies"])
    assert not [o for o in objs if o["kind"].startswith("ValidatingAdmissionPolicy")]
    done = run_helm(helm, "template", RELEASE, str(CHART), "--set", "rbac.create=false")
    assert done.returncode != 0 and "admissionPolicies.enabled" in done.stderr
    kept = run_helm(
        helm, "template", RELEASE, str(CHART), "--set", "rbac.create=false,admissionPolicies.enabled=false"
    )
    assert kept.returncode == 0, kept.stderr


def flow_specs(objs: Sequence[Obj]) -> dict[str, Obj]:
    """The FlowSchema's and PriorityLevelConfiguration's specs by kind, the names they refer to left out."""
    specs = {
        o["kind"]: dict(o["spec"]) for o in objs if o["kind"] in ("FlowSchema", "PriorityLevelConfiguration")
    }
    for spec in specs.values():
        spec.pop("priorityLevelConfiguration", None)
        spec.pop("rules", None)
    return specs


@pytest.mark.parametrize("release", [RELEASE, "pool-b"])
def test_flow_control_is_off_by_default_and_on_is_the_manifests_component_for_the_releases_account(
    helm: Path, release: str, tmp_path: Path
) -> None:
    assert not flow_specs(render(helm))
    done = run_helm(
        helm, "template", release, str(CHART), "--namespace", "team-y", *VALUE_SETS["flow-control"]
    )
    assert done.returncode == 0, done.stderr
    objs = [doc for doc in yaml.safe_load_all(done.stdout) if doc]
    account = one(objs, "ServiceAccount")["metadata"]["name"]
    assert account.startswith(release)
    assert _flow_subjects(objs) == {f"system:serviceaccount:team-y:{account}"}
    schema, level = one(objs, "FlowSchema"), one(objs, "PriorityLevelConfiguration")
    assert schema["spec"]["priorityLevelConfiguration"]["name"] == level["metadata"]["name"]
    shutil.copytree(MANIFESTS, tmp_path / "manifests")
    overlay = tmp_path / "manifests" / "mine"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": ["../overlays/live"], "components": ["../components/apf"]})
    )
    component = _render(overlay)[0]
    assert flow_specs(objs) == flow_specs(component)

    def resource_rules(docs: Sequence[Obj]) -> object:
        return one(docs, "FlowSchema")["spec"]["rules"][0]["resourceRules"]

    assert resource_rules(objs) == resource_rules(component)
