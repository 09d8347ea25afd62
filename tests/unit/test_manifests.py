"""The deployment manifests: rendered with the real ``kubectl kustomize``, validated against real Kubernetes
schemas, and checked for the properties operators rely on (least-privilege RBAC, a locked-down pod, probes
and Service on the configuration's ports, dry-run on first install).

Everything is read from the rendered output, not from the source files, because that is what
``kubectl apply -k manifests/`` sends to the cluster.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from descheduler.units import cpu_millis, memory_bytes

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
NAMESPACE = "load-aware-descheduler"
CONFIG_KEY = "config.yaml"

# Oldest Kubernetes minor we promise to support; the newest schema kubernetes-validate ships is added too.
OLDEST_SUPPORTED_KUBERNETES = "1.30.0"

Obj = dict[str, Any]

# Every object the base must render: (kind, name, namespaced).
EXPECTED_OBJECTS: list[tuple[str, str, bool]] = [
    ("Namespace", NAMESPACE, False),
    ("ServiceAccount", "load-aware-descheduler", True),
    ("ClusterRole", "load-aware-descheduler", False),
    ("ClusterRoleBinding", "load-aware-descheduler", False),
    ("ClusterRole", "load-aware-descheduler-hotspot-taint", False),
    ("ClusterRoleBinding", "load-aware-descheduler-hotspot-taint", False),
    ("ValidatingAdmissionPolicy", "load-aware-descheduler-nodes", False),
    ("ValidatingAdmissionPolicyBinding", "load-aware-descheduler-nodes", False),
    ("ValidatingAdmissionPolicy", "load-aware-descheduler-deployments", False),
    ("ValidatingAdmissionPolicyBinding", "load-aware-descheduler-deployments", False),
    ("Role", "load-aware-descheduler-leader-election", True),
    ("RoleBinding", "load-aware-descheduler-leader-election", True),
    ("ConfigMap", "load-aware-descheduler-config", True),
    ("Deployment", "load-aware-descheduler", True),
    ("Service", "load-aware-descheduler-metrics", True),
]

BASE_ROLE = "load-aware-descheduler"
TAINT_ROLE = "load-aware-descheduler-hotspot-taint"
POLICY_SUBJECT_LABEL = "load-aware-descheduler.io/policy-subject"

# The cluster-wide requests the descheduler makes, and nothing else: (apiGroup, resource, verbs).
EXPECTED_CLUSTER_RULES: list[tuple[str, str, tuple[str, ...]]] = [
    ("", "nodes", ("get", "list", "watch")),
    ("", "pods", ("get", "list", "watch")),
    ("", "replicationcontrollers", ("get", "list", "watch")),
    ("apps", "replicasets", ("get", "list", "watch")),
    ("apps", "deployments", ("get", "list", "watch")),
    ("apps", "statefulsets", ("get", "list", "watch")),
    ("policy", "poddisruptionbudgets", ("get", "list", "watch")),
    ("", "namespaces", ("list", "watch")),  # their pause annotation
    # DRA, read only: watched only with evictResourceClaimPods (a device move needs a free device)
    ("resource.k8s.io", "resourceslices", ("list", "watch")),
    ("resource.k8s.io", "resourceclaims", ("list", "watch")),
    ("resource.k8s.io", "deviceclasses", ("list", "watch")),
    ("", "pods/eviction", ("create",)),
    ("events.k8s.io", "events", ("create",)),
    ("", "events", ("create", "list")),  # list: a deleted migration journal is rebuilt from our Events
    ("metrics.k8s.io", "nodes", ("get", "list")),
    ("metrics.k8s.io", "pods", ("get", "list")),
]

# Leader election and migration records in the descheduler's namespace: (apiGroup, resource, verbs,
# resourceNames). "<lease>" stands for the Lease named in the shipped configuration, "<lease>-migrations"
# for the ConfigMap of migration records named after it.
EXPECTED_LEADER_ELECTION_RULES: list[tuple[str, str, tuple[str, ...], tuple[str, ...]]] = [
    ("coordination.k8s.io", "leases", ("create",), ()),
    ("coordination.k8s.io", "leases", ("get", "update"), ("<lease>",)),
    ("", "configmaps", ("create",), ()),
    ("", "configmaps", ("get", "update"), ("<lease>-migrations",)),
]

# Effective container security settings (container value, else the pod's): (field path, expected value).
SECURITY_EXPECTATIONS: list[tuple[str, object]] = [
    ("runAsNonRoot", True),
    ("allowPrivilegeEscalation", False),
    ("readOnlyRootFilesystem", True),
    ("privileged", False),
    ("capabilities.drop", ["ALL"]),
    ("capabilities.add", None),
    ("seccompProfile.type", "RuntimeDefault"),
]

# Pod-level settings that would undo the container lockdown: (field, forbidden-or-required value check).
POD_EXPECTATIONS: list[tuple[str, Callable[[object], bool], str]] = [
    ("hostNetwork", lambda v: v in (None, False), "must not share the host network"),
    ("hostPID", lambda v: v in (None, False), "must not share the host PID namespace"),
    ("hostIPC", lambda v: v in (None, False), "must not share the host IPC namespace"),
    (
        "securityContext.runAsUser",
        lambda v: isinstance(v, int) and v > 0,
        "must run as a numeric non-root UID",
    ),
    ("securityContext.runAsNonRoot", lambda v: v is True, "must require a non-root user"),
    (
        "securityContext.seccompProfile.type",
        lambda v: v == "RuntimeDefault",
        "must use seccomp RuntimeDefault",
    ),
]


def _dig(obj: object, dotted: str) -> object:
    """Follow a dotted path through nested dicts; None when any step is missing."""
    for key in dotted.split("."):
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def _kubernetes_validate() -> ModuleType:
    try:
        import kubernetes_validate  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        pytest.fail(
            "the kubernetes-validate package is missing; install the dev extra: pip install -e '.[dev]'",
            pytrace=False,
        )
    module: ModuleType = kubernetes_validate
    return module


def _render(folder: Path = MANIFESTS, *flags: str) -> tuple[list[Obj], str]:
    """``kubectl kustomize [flags] folder``: the objects and what kustomize warned about."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail(
            "kubectl is not on PATH; it is needed to render manifests/ with `kubectl kustomize` "
            "(install kubectl >= 1.27)",
            pytrace=False,
        )
    proc = subprocess.run(
        [kubectl, "kustomize", *flags, str(folder)], capture_output=True, text=True, timeout=60, check=False
    )
    if proc.returncode != 0:
        pytest.fail(
            f"`kubectl kustomize {folder}` failed (exit {proc.returncode}):\n{proc.stderr}", pytrace=False
        )
    docs = [doc for doc in yaml.safe_load_all(proc.stdout) if doc]
    return docs, proc.stderr


@pytest.fixture(scope="module")
def rendering() -> tuple[list[Obj], str]:
    return _render()


@pytest.fixture(scope="module")
def rendered(rendering: tuple[list[Obj], str]) -> list[Obj]:
    return rendering[0]


def _base_name(obj: Obj, name: str) -> str:
    """A generated ConfigMap's name without kustomize's content-hash suffix."""
    actual: str = obj["metadata"]["name"]
    if obj["kind"] == "ConfigMap" and re.fullmatch(re.escape(name) + r"-[a-z0-9]{10}", actual):
        return name
    return actual


def _one(objs: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [o for o in objs if o["kind"] == kind and (name is None or _base_name(o, name) == name)]
    assert len(found) == 1, (
        f"expected exactly one {kind} {name or ''} in the rendered manifests, found {len(found)}"
    )
    return found[0]


@pytest.fixture(scope="module")
def deployment(rendered: list[Obj]) -> Obj:
    return _one(rendered, "Deployment")


@pytest.fixture(scope="module")
def pod_spec(deployment: Obj) -> Obj:
    spec: Obj = deployment["spec"]["template"]["spec"]
    return spec


@pytest.fixture(scope="module")
def container(pod_spec: Obj) -> Obj:
    containers = pod_spec["containers"]
    assert len(containers) == 1, f"expected one container in the Deployment, found {len(containers)}"
    first: Obj = containers[0]
    return first


@pytest.fixture(scope="module")
def config(rendered: list[Obj], container: Obj, pod_spec: Obj) -> Obj:
    """The configuration the pod actually reads: follow --config through the volume mount to the ConfigMap."""
    args = container.get("args", [])
    assert "--config" in args, f"the container must be started with --config, args are {args}"
    config_path = Path(args[args.index("--config") + 1])
    mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
    mount = mounts.get(str(config_path.parent))
    assert mount is not None, (
        f"no volume is mounted at {config_path.parent}, where --config {config_path} lives"
    )
    volume = next(v for v in pod_spec["volumes"] if v["name"] == mount["name"])
    assert "configMap" in volume, f"volume {volume['name']} holding the config must come from a ConfigMap"
    items = {item["path"]: item["key"] for item in volume["configMap"].get("items", [])}
    assert not items or config_path.name in items, (
        f"the ConfigMap volume projects {items}, not {config_path.name}"
    )
    key = items.get(config_path.name, config_path.name)
    configmap = _one(rendered, "ConfigMap", volume["configMap"]["name"])
    assert key in configmap.get("data", {}), f"ConfigMap {configmap['metadata']['name']} has no key {key}"
    loaded = yaml.safe_load(configmap["data"][key])
    assert isinstance(loaded, dict), "the shipped configuration must be a YAML mapping"
    return loaded


def _port_of(bind_address: str) -> int:
    return int(bind_address.rsplit(":", 1)[1])


def _container_port(container: Obj, port: int | str) -> int:
    """Resolve a probe/Service port (number or container port name) to a number."""
    if isinstance(port, int):
        return port
    by_name = {p["name"]: p["containerPort"] for p in container.get("ports", []) if "name" in p}
    assert port in by_name, f"port name {port!r} is not a container port ({sorted(by_name)})"
    number: int = by_name[port]
    return number


# --- rendering and schemas -------------------------------------------------------------------------------


def test_kustomize_renders_exactly_the_expected_objects_in_the_right_namespace(rendered: list[Obj]) -> None:
    got = sorted((o["kind"], _base_name(o, "load-aware-descheduler-config")) for o in rendered)
    assert got == sorted((kind, name) for kind, name, _ in EXPECTED_OBJECTS)
    for kind, name, namespaced in EXPECTED_OBJECTS:
        ns = _one(rendered, kind, name)["metadata"].get("namespace")
        assert ns == (NAMESPACE if namespaced else None), f"{kind}/{name} has namespace {ns!r}"


def test_kustomize_renders_without_warnings(rendering: tuple[list[Obj], str]) -> None:
    """Deprecated kustomization fields print warnings today and break with a future kustomize."""
    warnings = [line for line in rendering[1].splitlines() if re.search(r"warn|deprecat", line, re.I)]
    assert warnings == []


def _schema_versions() -> list[str]:
    try:
        import kubernetes_validate.utils as kv_utils  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        return [OLDEST_SUPPORTED_KUBERNETES]  # the test itself then fails with the install hint
    return [OLDEST_SUPPORTED_KUBERNETES, str(kv_utils.latest_version())]


@pytest.mark.parametrize("version", _schema_versions())
@pytest.mark.parametrize(("kind", "name"), [(kind, name) for kind, name, _ in EXPECTED_OBJECTS])
def test_every_rendered_object_validates_strictly_against_the_kubernetes_schema(
    rendered: list[Obj], kind: str, name: str, version: str
) -> None:
    kv = _kubernetes_validate()
    obj = _one(rendered, kind, name)
    try:
        kv.validate(obj, version, strict=True)
    except kv.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        pytest.fail(
            f"{kind}/{name} is invalid for Kubernetes {exc.version} at {path}: {exc.message}", pytrace=False
        )
    except kv.SchemaNotFoundError as exc:
        pytest.fail(f"{kind}/{name}: {exc.message}", pytrace=False)


MUTATIONS: list[tuple[str, Callable[[Obj], None]]] = [
    (
        "a misspelled securityContext field",
        lambda d: d["spec"]["template"]["spec"]["containers"][0]["securityContext"].update(
            readOnlyRootFilesytem=True
        ),
    ),
    (
        "a misspelled probe field",
        lambda d: d["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"].update(
            paht="/healthz"
        ),
    ),
    ("replicas written as a string", lambda d: d["spec"].update(replicas="one")),
]


@pytest.mark.parametrize(("what", "mutate"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_strict_schema_validation_rejects_a_deployment_with(
    deployment: Obj, what: str, mutate: Callable[[Obj], None]
) -> None:
    """Proves the schema check above has teeth: strict mode must refuse what the API server would drop."""
    kv = _kubernetes_validate()
    broken = copy.deepcopy(deployment)
    mutate(broken)
    with pytest.raises(kv.ValidationError):
        kv.validate(broken, OLDEST_SUPPORTED_KUBERNETES, strict=True)


# --- the pod ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "expected"), SECURITY_EXPECTATIONS, ids=[f for f, _ in SECURITY_EXPECTATIONS]
)
def test_container_security_context_is_locked_down(
    pod_spec: Obj, container: Obj, field: str, expected: object
) -> None:
    value = _dig(container.get("securityContext", {}), field)
    if value is None and field in ("runAsNonRoot", "seccompProfile.type"):
        value = _dig(pod_spec.get("securityContext", {}), field)  # these two are inherited from the pod
    assert value == expected, f"securityContext.{field} is {value!r}, expected {expected!r}"


@pytest.mark.parametrize(("field", "check", "why"), POD_EXPECTATIONS, ids=[f for f, _, _ in POD_EXPECTATIONS])
def test_pod_level_settings_do_not_undo_the_lockdown(
    pod_spec: Obj, field: str, check: Callable[[object], bool], why: str
) -> None:
    value = _dig(pod_spec, field)
    assert check(value), f"pod spec {field} = {value!r}: the descheduler pod {why}"


def test_pod_mounts_no_host_paths_and_writes_only_to_an_empty_dir(pod_spec: Obj, container: Obj) -> None:
    kinds = {v["name"]: set(v) - {"name"} for v in pod_spec.get("volumes", [])}
    assert all("hostPath" not in k for k in kinds.values()), kinds
    writable = [m["name"] for m in container.get("volumeMounts", []) if not m.get("readOnly", False)]
    assert all(kinds[name] == {"emptyDir"} for name in writable), f"writable mounts {writable}: {kinds}"


def test_deployment_runs_one_replica_with_leader_election(deployment: Obj, config: Obj) -> None:
    assert deployment["spec"]["replicas"] == 1
    assert config["leaderElection"]["leaderElect"] is True


def test_deployment_uses_a_tagged_image(container: Obj) -> None:
    image: str = container["image"]
    name, _, tag = image.rpartition(":")
    assert name and "/" not in tag and tag not in ("", "latest"), (
        f"image {image!r} must carry an explicit version tag"
    )


@pytest.mark.parametrize("resource", ["cpu", "memory"])
def test_container_has_requests_not_above_limits(container: Obj, resource: str) -> None:
    parse = cpu_millis if resource == "cpu" else memory_bytes
    requests = container["resources"].get("requests", {})
    limits = container["resources"].get("limits", {})
    assert resource in requests and resource in limits, f"{resource} needs both a request and a limit"
    assert 0 < parse(requests[resource]) <= parse(limits[resource])


def test_grace_period_leaves_time_for_an_in_flight_eviction(pod_spec: Obj) -> None:
    """The eviction call in flight at SIGTERM may take up to the client's request timeout (30s)."""
    assert pod_spec.get("terminationGracePeriodSeconds", 30) >= 45


def test_pod_uses_the_conventional_system_cluster_critical_priority_and_ships_no_class_of_its_own(
    rendered: list[Obj], pod_spec: Obj
) -> None:
    assert pod_spec.get("priorityClassName") == "system-cluster-critical"
    assert [o for o in rendered if o["kind"] == "PriorityClass"] == []


def test_pod_runs_as_the_service_account_the_roles_are_bound_to(rendered: list[Obj], pod_spec: Obj) -> None:
    account = _one(rendered, "ServiceAccount", pod_spec["serviceAccountName"])
    expected_subject = {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
    bindings = [o for o in rendered if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert len(bindings) == 3
    for binding in bindings:
        role_kind = binding["kind"].removesuffix("Binding")
        assert binding["subjects"] == [expected_subject], f"{binding['kind']} subjects {binding['subjects']}"
        assert binding["roleRef"]["kind"] == role_kind
        _one(rendered, role_kind, binding["roleRef"]["name"])


# --- configuration, probes and Service ------------------------------------------------------------------


def test_a_first_install_only_audits_through_the_dry_run_flag(config: Obj, container: Obj) -> None:
    assert config["apiVersion"] == "descheduler/v1alpha2"
    assert config["kind"] == "DeschedulerConfiguration"
    assert "--dry-run" in container["args"], "kubectl apply -k manifests/ must install the audit overlay"


def test_configmap_holds_the_configuration_under_a_single_key(rendered: list[Obj]) -> None:
    configmap = _one(rendered, "ConfigMap")
    assert list(configmap["data"]) == [CONFIG_KEY]
    assert "# " in configmap["data"][CONFIG_KEY], "the default configuration should explain its fields"


def test_a_configuration_change_renames_the_configmap_so_the_deployment_rolls(
    rendered: list[Obj], pod_spec: Obj, tmp_path: Path
) -> None:
    configmap = _one(rendered, "ConfigMap")
    mounted = {v["configMap"]["name"] for v in pod_spec["volumes"] if "configMap" in v}
    assert mounted == {configmap["metadata"]["name"]} != {"load-aware-descheduler-config"}
    copy_of = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, copy_of)
    config_file = copy_of / "base" / "config.yaml"
    config_file.write_text(
        config_file.read_text().replace("deschedulingInterval: 60s", "deschedulingInterval: 2m")
    )
    changed = _one(_render(copy_of)[0], "ConfigMap")
    assert changed["metadata"]["name"] != configmap["metadata"]["name"]


PROBES: list[tuple[str, str, str]] = [
    ("livenessProbe", "/healthz", "healthzBindAddress"),
    ("readinessProbe", "/readyz", "healthzBindAddress"),
    ("startupProbe", "/healthz", "healthzBindAddress"),
]


@pytest.mark.parametrize(("probe", "path", "address_field"), PROBES, ids=[p[0] for p in PROBES])
def test_probe_targets_the_health_endpoint_of_the_configuration(
    container: Obj, config: Obj, probe: str, path: str, address_field: str
) -> None:
    http = container[probe]["httpGet"]
    assert http["path"] == path
    assert _container_port(container, http["port"]) == _port_of(config[address_field])


def test_service_exposes_the_metrics_port_of_the_configuration(
    rendered: list[Obj], deployment: Obj, container: Obj, config: Obj
) -> None:
    service = _one(rendered, "Service")
    template_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = service["spec"]["selector"]
    assert selector.items() <= template_labels.items(), (
        f"selector {selector} does not match pods {template_labels}"
    )
    assert selector == deployment["spec"]["selector"]["matchLabels"]
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    assert "metrics" in ports
    assert _container_port(container, ports["metrics"]["targetPort"]) == _port_of(
        config["metricsBindAddress"]
    )


def test_leader_election_lease_lives_where_the_role_grants_access(rendered: list[Obj], config: Obj) -> None:
    election = config["leaderElection"]
    role = _one(rendered, "Role")
    assert election["resourceNamespace"] == role["metadata"]["namespace"] == NAMESPACE
    named = {n for rule in role["rules"] for n in rule.get("resourceNames", [])}
    assert election["resourceName"] in named


def test_namespace_enforces_the_restricted_pod_security_profile(rendered: list[Obj]) -> None:
    labels = _one(rendered, "Namespace", NAMESPACE)["metadata"]["labels"]
    assert labels.get("pod-security.kubernetes.io/enforce") == "restricted"


# --- RBAC ------------------------------------------------------------------------------------------------


def _triples(rule: Obj) -> set[tuple[str, str, str]]:
    return {
        (g, r, v) for g in rule.get("apiGroups", []) for r in rule.get("resources", []) for v in rule["verbs"]
    }


def _expand(table: list[tuple[str, str, tuple[str, ...]]]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for g, r, verbs in table for v in verbs}


def test_cluster_role_grants_exactly_the_requests_the_descheduler_makes(rendered: list[Obj]) -> None:
    rules = _one(rendered, "ClusterRole", BASE_ROLE)["rules"]
    granted = set().union(*(_triples(rule) for rule in rules))
    expected = _expand(EXPECTED_CLUSTER_RULES)
    assert granted - expected == set(), f"more than needed: {sorted(granted - expected)}"
    assert expected - granted == set(), f"missing: {sorted(expected - granted)}"


def test_cluster_role_is_not_limited_by_names_or_extended_to_non_resource_urls(rendered: list[Obj]) -> None:
    for rule in _one(rendered, "ClusterRole", BASE_ROLE)["rules"]:
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule, rule


def test_pod_deletion_is_granted_only_by_the_optional_component(rendered: list[Obj], tmp_path: Path) -> None:
    """The one PDB-bypassing permission exists only where `evictionPolicy: Delete` is chosen."""
    assert not [r for r in _one(rendered, "ClusterRole", BASE_ROLE)["rules"] if "delete" in r["verbs"]]
    with_component = _overlay(tmp_path, components=["components/pod-delete"])
    rules = _one(with_component, "ClusterRole", BASE_ROLE)["rules"]
    granted = set().union(*(_triples(rule) for rule in rules))
    assert granted - _expand(EXPECTED_CLUSTER_RULES) == {("", "pods", "delete")}


def test_leader_election_role_grants_only_the_configured_lease_and_its_migration_records(
    rendered: list[Obj], config: Obj
) -> None:
    lease = config["leaderElection"]["resourceName"]
    granted = {
        (g, r, v, tuple(rule.get("resourceNames", [])))
        for rule in _one(rendered, "Role")["rules"]
        for g, r, v in _triples(rule)
    }
    expected = {
        (g, r, v, tuple(n.replace("<lease>", lease) for n in names))
        for g, r, verbs, names in EXPECTED_LEADER_ELECTION_RULES
        for v in verbs
    }
    assert granted == expected


@pytest.mark.parametrize(
    ("kind", "name"), [("ClusterRole", BASE_ROLE), ("ClusterRole", TAINT_ROLE), ("Role", None)]
)
def test_rbac_rules_use_no_wildcards(rendered: list[Obj], kind: str, name: str | None) -> None:
    for rule in _one(rendered, kind, name)["rules"]:
        for field in ("apiGroups", "resources", "verbs", "resourceNames"):
            values = rule.get(field, [])
            assert not [v for v in values if "*" in v], f"{kind} rule {rule} has a wildcard in {field}"


def test_the_only_shipped_write_to_nodes_is_patch_in_a_role_of_its_own(rendered: list[Obj]) -> None:
    """The hotspot taint is on in what we ship: its node ``patch`` is the one rule of its own ClusterRole
    (components/hotspot-taint, which the base includes); the base ClusterRole writes no node."""
    role = _one(rendered, "ClusterRole", TAINT_ROLE)
    assert set().union(*(_triples(r) for r in role["rules"])) == {("", "nodes", "patch")}
    binding = _one(rendered, "ClusterRoleBinding", TAINT_ROLE)
    assert binding["roleRef"]["name"] == TAINT_ROLE
    assert ("", "nodes", "patch") not in set().union(
        *(_triples(r) for r in _one(rendered, "ClusterRole", BASE_ROLE)["rules"])
    )


def test_the_surge_restart_component_adds_its_one_rule_and_nothing_else(tmp_path: Path) -> None:
    """The shipped manifests never write to Deployments; components/surge-restart adds exactly one
    ``patch`` on them, for surge-first restarts."""
    component, rule = "surge-restart", ("apps", "deployments", "patch")
    overlay = write_overlay(tmp_path / "overlay", [MANIFESTS], [MANIFESTS / "components" / component])
    objs, _ = _render(overlay, "--load-restrictor=LoadRestrictionsNone")
    base, _ = _render()
    added = {(o["kind"], o["metadata"]["name"]) for o in objs} - {
        (o["kind"], o["metadata"]["name"]) for o in base
    }
    name = f"load-aware-descheduler-{component}"
    assert added == {("ClusterRole", name), ("ClusterRoleBinding", name)}
    role = _one(objs, "ClusterRole", name)
    assert set().union(*(_triples(r) for r in role["rules"])) == {rule}
    binding = _one(objs, "ClusterRoleBinding", name)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "load-aware-descheduler", "namespace": NAMESPACE}
    ]
    base_role = _one(base, "ClusterRole", BASE_ROLE)
    assert rule not in set().union(*(_triples(r) for r in base_role["rules"]))


# --- overlays, components and the CronJob example --------------------------------------------------------


def _overlay(tmp_path: Path, *, base: str = "overlays/live", components: list[str]) -> list[Obj]:
    """Render a throw-away overlay of ``base`` with ``components``, as an operator would write one."""
    copy_of = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, copy_of, dirs_exist_ok=True)
    overlay = write_overlay(copy_of / "mine", [copy_of / base], [copy_of / c for c in components])
    return _render(overlay)[0]


def write_overlay(overlay: Path, resources: list[Path], components: list[Path], namespace: str = "") -> Path:
    """Make ``overlay``, a kustomization of ``resources`` with ``components`` (by paths relative to it)."""
    overlay.mkdir()
    kustomization: Obj = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
    if namespace:
        kustomization["namespace"] = namespace
    kustomization["resources"] = [os.path.relpath(r, overlay) for r in resources]
    kustomization["components"] = [os.path.relpath(c, overlay) for c in components]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return overlay


def _configuration(objs: list[Obj]) -> Any:
    from descheduler.config.load import load_config_document

    return load_config_document(_one(objs, "ConfigMap"))


VARIANTS = ["overlays/audit", "overlays/live", "examples/cronjob"]


@pytest.fixture(scope="module", params=VARIANTS)
def variant(request: pytest.FixtureRequest) -> tuple[str, list[Obj]]:
    return request.param, _render(MANIFESTS / request.param)[0]


def test_every_variant_renders_valid_kubernetes_objects_and_a_configuration_the_descheduler_accepts(
    variant: tuple[str, list[Obj]],
) -> None:
    kv = _kubernetes_validate()
    name, objs = variant
    for obj in objs:
        try:
            kv.validate(obj, OLDEST_SUPPORTED_KUBERNETES, strict=True)
        except kv.ValidationError as exc:
            pytest.fail(f"{name}: {obj['kind']}/{obj['metadata']['name']}: {exc.message}", pytrace=False)
    assert _configuration(objs).low_node_load is not None


def test_the_live_overlay_acts_and_the_audit_overlay_does_not(
    variant: tuple[str, list[Obj]],
) -> None:
    name, objs = variant
    if name == "examples/cronjob":
        pod = _one(objs, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    else:
        pod = _one(objs, "Deployment")["spec"]["template"]["spec"]
    flagged = "--dry-run" in pod["containers"][0]["args"]
    audits = flagged or _configuration(objs).dry_run
    assert audits is (name == "overlays/audit")


def test_the_cronjob_example_runs_one_cycle_at_a_time_with_a_single_look_configuration(
    tmp_path: Path,
) -> None:
    objs = _render(MANIFESTS / "examples" / "cronjob")[0]
    assert not [o for o in objs if o["kind"] in ("Deployment", "Service")]
    cronjob = _one(objs, "CronJob")
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    job = cronjob["spec"]["jobTemplate"]["spec"]
    assert job["backoffLimit"] == 0
    pod = job["template"]["spec"]
    assert pod["containers"][0]["args"][0] == "once"
    assert pod["serviceAccountName"] == _one(objs, "ServiceAccount")["metadata"]["name"]
    assert pod["volumes"][0]["configMap"]["name"] == _one(objs, "ConfigMap")["metadata"]["name"]
    effective = _configuration(objs)
    assert effective.low_node_load.anomaly_condition.consecutive_abnormalities == 1


def test_the_servicemonitor_component_scrapes_the_metrics_service(tmp_path: Path) -> None:
    objs = _overlay(tmp_path, components=["components/servicemonitor"])
    monitor = _one(objs, "ServiceMonitor")
    service = _one(objs, "Service")
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"] == NAMESPACE
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    ports = {p["name"] for p in service["spec"]["ports"]}
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports


def test_the_network_policy_component_admits_only_monitoring_to_the_pods_ports(tmp_path: Path) -> None:
    kv = _kubernetes_validate()
    objs = _overlay(tmp_path, components=["components/network-policy"])
    policy = _one(objs, "NetworkPolicy")
    for version in _schema_versions():
        kv.validate(policy, version, strict=True)
    deployment = _one(objs, "Deployment")
    assert policy["metadata"]["namespace"] == deployment["metadata"]["namespace"] == NAMESPACE
    selected = policy["spec"]["podSelector"]["matchLabels"].items()
    assert selected and selected <= deployment["spec"]["template"]["metadata"]["labels"].items()
    assert policy["spec"]["policyTypes"] == ["Ingress"], "egress stays open: API server and Prometheus vary"
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]
    named = {p["name"] for p in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert {p["port"] for p in rule["ports"]} == named == {"healthz", "metrics"}
    assert not [o for o in _render(MANIFESTS)[0] if o["kind"] == "NetworkPolicy"], "optional: off by default"


# --- steering by default, held to its taint by the admission policies ------------------------------------

POLICIES: list[tuple[str, str, str]] = [
    ("load-aware-descheduler-nodes", "", "nodes"),
    ("load-aware-descheduler-deployments", "apps", "deployments"),
]
"""The shipped ValidatingAdmissionPolicies: (name, apiGroup, resource each holds the ServiceAccount on)."""


def _usernames(binding: Obj) -> set[str]:
    return {
        f"system:serviceaccount:{s.get('namespace', '')}:{s['name']}"
        for s in binding.get("subjects", [])
        if s["kind"] == "ServiceAccount"
    }


def _held_usernames(objs: list[Obj], policy_name: str) -> set[str]:
    """Who a shipped policy holds, as the API server finds it: the ServiceAccount subjects of the
    ClusterRoleBindings its binding's param selector picks (every binding naming the policy)."""
    bindings = [
        o
        for o in objs
        if o["kind"] == "ValidatingAdmissionPolicyBinding" and o["spec"]["policyName"] == policy_name
    ]
    assert len(bindings) == 1, f"expected one binding of {policy_name}, found {len(bindings)}"
    (binding,) = bindings
    assert binding["spec"]["validationActions"] == ["Deny"]
    wanted = binding["spec"]["paramRef"]["selector"]["matchLabels"].items()
    picked = [
        o
        for o in objs
        if o["kind"] == "ClusterRoleBinding" and wanted <= o["metadata"].get("labels", {}).items()
    ]
    return set().union(*(_usernames(b) for b in picked))


def test_the_shipped_configuration_turns_the_hotspot_taint_on_while_the_model_default_stays_off(
    rendered: list[Obj],
) -> None:
    """A Koordinator ConfigMap brought as is keeps Koordinator's behaviour (no taint); ours steers."""
    from descheduler.config.models import HotspotTaint

    assert _configuration(rendered).low_node_load.hotspot_taint.enabled is True
    assert HotspotTaint().enabled is False


def test_the_bundled_example_configuration_turns_the_hotspot_taint_on_too() -> None:
    from descheduler.config.load import load_config

    example = load_config(REPO / "config" / "examples" / "hotspot" / "config.yaml").low_node_load
    assert example is not None and example.hotspot_taint.enabled is True


@pytest.mark.parametrize(("policy", "group", "resource"), POLICIES, ids=[p[2] for p in POLICIES])
def test_every_variant_holds_its_service_account_to_the_admission_policies(
    variant: tuple[str, list[Obj]], policy: str, group: str, resource: str
) -> None:
    name, objs = variant
    vap = _one(objs, "ValidatingAdmissionPolicy", policy)
    spec = vap["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["paramKind"] == {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding"}
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"]) == ([group], [resource])
    assert set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}
    assert all(v["message"] and v["reason"] == "Forbidden" for v in spec["validations"])
    account = _one(objs, "ServiceAccount")["metadata"]
    ours = f"system:serviceaccount:{account['namespace']}:{account['name']}"
    assert _held_usernames(objs, policy) == {ours}, f"{name}: the policy must find the ServiceAccount"
    granting = [o for o in objs if o["kind"] == "ClusterRoleBinding" and ours in _usernames(o)]
    unlabelled = [
        o["metadata"]["name"] for o in granting if POLICY_SUBJECT_LABEL not in o["metadata"]["labels"]
    ]
    assert unlabelled == [], "every binding that grants the ServiceAccount something names it to the policy"


def test_a_namespace_and_name_prefix_and_suffix_keep_the_policies_on_the_renamed_service_account(
    tmp_path: Path,
) -> None:
    """Kustomize rewrites the bindings' subjects and the policy names the policy bindings refer to; the
    policies name no ServiceAccount themselves."""
    copy_of = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, copy_of)
    overlay = copy_of / "renamed"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "namespace": "team-x",
                "namePrefix": "pool-a-",
                "nameSuffix": "-v2",
                "resources": ["../overlays/live"],
                "components": ["../components/surge-restart"],
            }
        )
    )
    objs = _render(overlay)[0]
    account = _one(objs, "ServiceAccount")["metadata"]
    assert (account["namespace"], account["name"]) == ("team-x", "pool-a-load-aware-descheduler-v2")
    for policy, _, _ in POLICIES:
        renamed = f"pool-a-{policy}-v2"
        _one(objs, "ValidatingAdmissionPolicy", renamed)
        assert _held_usernames(objs, renamed) == {
            "system:serviceaccount:team-x:pool-a-load-aware-descheduler-v2"
        }
    surge = _one(objs, "ClusterRoleBinding", "pool-a-load-aware-descheduler-surge-restart-v2")
    assert POLICY_SUBJECT_LABEL in surge["metadata"]["labels"]


# --- API Priority and Fairness (optional component) ------------------------------------------------------


def _flow_subjects(objs: list[Obj]) -> set[str]:
    """The usernames every FlowSchema's rules match, as the API server reads its ServiceAccount subjects."""
    return {
        f"system:serviceaccount:{s['serviceAccount']['namespace']}:{s['serviceAccount']['name']}"
        for o in objs
        if o["kind"] == "FlowSchema"
        for rule in o["spec"]["rules"]
        for s in rule["subjects"]
        if s["kind"] == "ServiceAccount"
    }


APF_OVERLAYS: list[tuple[str, Obj, str]] = [
    ("as shipped", {}, f"system:serviceaccount:{NAMESPACE}:load-aware-descheduler"),
    (
        "renamed",
        {"namespace": "team-x", "namePrefix": "pool-a-", "nameSuffix": "-v2"},
        "system:serviceaccount:team-x:pool-a-load-aware-descheduler-v2",
    ),
]


@pytest.mark.parametrize(("_case", "renames", "username"), APF_OVERLAYS, ids=[c[0] for c in APF_OVERLAYS])
def test_the_apf_component_sends_every_request_of_the_service_account_to_a_small_level_of_its_own(
    tmp_path: Path, _case: str, renames: Obj, username: str
) -> None:
    copy_of = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, copy_of)
    overlay = copy_of / "mine"
    overlay.mkdir()
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        **renames,
        "resources": ["../overlays/live"],
        "components": ["../components/apf"],
    }
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    objs = _render(overlay)[0]
    account = _one(objs, "ServiceAccount")["metadata"]
    assert username == f"system:serviceaccount:{account['namespace']}:{account['name']}"
    assert _flow_subjects(objs) == {username}
    schema, level = _one(objs, "FlowSchema"), _one(objs, "PriorityLevelConfiguration")
    assert schema["spec"]["priorityLevelConfiguration"]["name"] == level["metadata"]["name"]
    (rule,) = schema["spec"]["rules"]
    assert rule["resourceRules"] == [
        {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": True, "namespaces": ["*"]}
    ]
    assert 200 < schema["spec"]["matchingPrecedence"] < 9000, (
        "after the control plane's, before service-accounts"
    )
    limited = level["spec"]["limited"]
    assert level["spec"]["type"] == "Limited" and limited["limitResponse"]["type"] == "Queue"
    assert 0 < limited["nominalConcurrencyShares"] < 100, "fewer shares than workload-low's 100"
    assert 0 < limited["lendablePercent"] < 100
    kv = _kubernetes_validate()
    for obj in (schema, level):
        kv.validate(obj, "1.30.0", strict=True)


def test_the_apf_component_is_in_no_shipped_overlay(variant: tuple[str, list[Obj]]) -> None:
    name, objs = variant
    assert not [o for o in objs if o["kind"] in ("FlowSchema", "PriorityLevelConfiguration")], name
