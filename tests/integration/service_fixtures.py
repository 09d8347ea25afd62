"""Service-test helpers over the stand-in API server: a cluster built on it, its Lease and eviction
records, and a matcher for the RBAC rules of ``manifests/``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.apiserver import ApiServer, RecordedRequest, objects
from tests.support.service import GI, MANIFESTS, NAMESPACE, SimulatedNodes, UsageBackend

DISCOVERY_PATHS = ("/api", "/apis", "/version", "/healthz", "/livez", "/readyz", "/openapi")
"""Non-resource URLs every authenticated user may GET (the built-in ``system:discovery`` role)."""


@dataclass
class Cluster:
    """The API objects and the usage of one test cluster, created together so they always agree."""

    server: ApiServer
    usage: SimulatedNodes

    def node(self, name: str, *, base_cores: float = 0.3, cpu: int = 4, **labels: str) -> None:
        self.server.create(objects.node(name, cpu=str(cpu), memory="16Gi", labels=labels))
        self.usage.add_node(name, base_cores=base_cores, cpus=cpu, mem_total=16 * GI)

    def deployment(
        self, name: str, pods: Mapping[str, tuple[str, float]], *, namespace: str = "default"
    ) -> None:
        """A Deployment, its ReplicaSet and one running pod per entry (pod name -> (node, cores used)),
        owned as the controllers own them (real uids), so the planner resolves workload and replicas."""
        deployment = self.server.create(objects.deployment(name, namespace=namespace, replicas=len(pods)))
        rs_name = f"{name}-5d4f8b7c9"
        rs = objects.replicaset(rs_name, namespace=namespace, replicas=len(pods), deployment=name)
        rs["metadata"]["ownerReferences"][0]["uid"] = deployment["metadata"]["uid"]
        rs["metadata"]["labels"] = {"app": name}
        rs["spec"]["selector"] = {"matchLabels": {"app": name}}
        rs["spec"]["template"]["metadata"]["labels"] = {"app": name}
        created_rs = self.server.create(rs)
        for pod_name, (node, cores) in pods.items():
            pod = objects.pod(
                pod_name, namespace=namespace, node=node, labels={"app": name}, owner=("ReplicaSet", rs_name)
            )
            pod["metadata"]["ownerReferences"][0]["uid"] = created_rs["metadata"]["uid"]
            self.server.create(pod)
            self.usage.add_pod(namespace, pod_name, node, cores)

    def daemon_pod(self, name: str, node: str, cores: float = 0.1, *, namespace: str = "kube-system") -> None:
        """A DaemonSet's pod: never a candidate, whatever its usage."""
        self.server.create(
            objects.pod(
                name, namespace=namespace, node=node, labels={"app": "agent"}, owner=("DaemonSet", "agent")
            )
        )
        self.usage.add_pod(namespace, name, node, cores)


@contextlib.contextmanager
def live_cluster(
    workdir: Path, backend: UsageBackend, build: Callable[[Cluster], None], *, full_window: bool = False
) -> Iterator[Cluster]:
    """An API server (``cluster.server.kubeconfig_path`` is written) holding what ``build`` creates, its
    usage served through ``backend``'s Prometheus, and the simulated kubelets following the server."""
    workdir.mkdir(parents=True, exist_ok=True)
    server = ApiServer().start()
    try:
        server.write_kubeconfig(workdir / "kubeconfig")
        cluster = Cluster(server, SimulatedNodes())
        build(cluster)
        with cluster.usage.following(server):
            backend.install(cluster.usage, full_window=full_window)
            yield cluster
    finally:
        server.stop()
    assert not server.errors, f"the test API server hit unexpected errors: {server.errors}"


def kubeconfig_of(server: ApiServer) -> Path:
    assert server.kubeconfig_path is not None, "no kubeconfig written for this server"
    return server.kubeconfig_path


def lease_holder(server: ApiServer, name: str, namespace: str = NAMESPACE) -> str:
    lease = server.get("leases", namespace, name, group="coordination.k8s.io")
    if lease is None:
        return ""
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def evictions(server: ApiServer, *, user_agent: str | None = None) -> list[RecordedRequest]:
    """Eviction requests the server answered, in order (``user_agent``: a substring to pick one client)."""
    return [
        r
        for r in server.requests_for(verb="create", resource="pods", subresource="eviction")
        if user_agent is None or user_agent in r.user_agent
    ]


def is_dry_run(request: RecordedRequest) -> bool:
    body = request.body if isinstance(request.body, dict) else {}
    options = body.get("deleteOptions") or {}
    return request.query.get("dryRun") == "All" or options.get("dryRun") == ["All"]


@dataclass(frozen=True)
class Rule:
    """One PolicyRule, with the namespace it applies in (``None``: a ClusterRole's, everywhere)."""

    api_groups: frozenset[str]
    resources: frozenset[str]
    verbs: frozenset[str]
    resource_names: frozenset[str]
    namespace: str | None
    source: str

    def allows(self, request: RecordedRequest) -> bool:
        """The rule matching of Kubernetes' RBAC authorizer, for resource requests."""
        if self.namespace is not None and request.namespace != self.namespace:
            return False
        resource = f"{request.resource}/{request.subresource}" if request.subresource else request.resource
        return (
            _covers(self.api_groups, request.group)
            and _covers(self.resources, resource)
            and _covers(self.verbs, request.verb)
            and (not self.resource_names or request.name in self.resource_names)
        )


def _covers(allowed: frozenset[str], value: str) -> bool:
    return "*" in allowed or value in allowed


def _load_rbac_rules(*paths: Path) -> list[Rule]:
    """The rules of the ClusterRoles and Roles in the given manifest files."""
    rules: list[Rule] = []
    for path in paths:
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict) or doc.get("kind") not in ("ClusterRole", "Role"):
                continue
            namespace = doc["metadata"].get("namespace", "default") if doc["kind"] == "Role" else None
            for raw in doc.get("rules") or []:
                rules.append(
                    Rule(
                        api_groups=frozenset(raw.get("apiGroups") or ()),
                        resources=frozenset(raw.get("resources") or ()),
                        verbs=frozenset(raw.get("verbs") or ()),
                        resource_names=frozenset(raw.get("resourceNames") or ()),
                        namespace=namespace,
                        source=f"{path.name} {doc['kind']}/{doc['metadata']['name']}",
                    )
                )
    return rules


def rbac_allows(rules: Sequence[Rule], request: RecordedRequest) -> bool:
    if not request.is_resource:
        return request.verb == "get" and any(
            request.path == p or request.path.startswith(p + "/") for p in DISCOVERY_PATHS
        )
    return any(rule.allows(request) for rule in rules)


def shipped_rbac_rules() -> list[Rule]:
    return _load_rbac_rules(MANIFESTS / "base" / "clusterrole.yaml", MANIFESTS / "base" / "role.yaml")
