"""The API resources the test server serves, with the discovery facts kubectl and clients rely on."""

from __future__ import annotations

from dataclasses import dataclass

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    subresources: tuple[str, ...] = ()
    storage: str = ""
    """Storage shared between API versions (events live once, served as core v1 and events.k8s.io/v1)."""
    status_subresource: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def storage_key(self) -> str:
        return self.storage or f"{self.group}/{self.plural}"

    @property
    def qualified(self) -> str:
        """``pods`` or ``leases.coordination.k8s.io``: how the API server names it in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


RESOURCES: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "namespaces", "Namespace", False, ("ns",), subresources=("status",)),
    ResourceType(
        "", "v1", "nodes", "Node", False, ("no",), subresources=("status",), status_subresource=True
    ),
    ResourceType(
        "", "v1", "pods", "Pod", True, ("po",), subresources=("eviction", "status"), status_subresource=True
    ),
    ResourceType("", "v1", "events", "Event", True, ("ev",), storage="events"),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, ("cm",)),
    ResourceType(
        "",
        "v1",
        "replicationcontrollers",
        "ReplicationController",
        True,
        ("rc",),
        subresources=("status",),
        status_subresource=True,
    ),
    ResourceType(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        True,
        ("deploy",),
        subresources=("status",),
        status_subresource=True,
    ),
    ResourceType(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        True,
        ("rs",),
        subresources=("status",),
        status_subresource=True,
    ),
    ResourceType(
        "apps",
        "v1",
        "statefulsets",
        "StatefulSet",
        True,
        ("sts",),
        subresources=("status",),
        status_subresource=True,
    ),
    ResourceType(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        True,
        ("pdb",),
        subresources=("status",),
        status_subresource=True,
    ),
    ResourceType("events.k8s.io", "v1", "events", "Event", True, ("ev",), storage="events"),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
    ResourceType("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False),
    ResourceType("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False),
    ResourceType(
        "resource.k8s.io",
        "v1",
        "resourceclaims",
        "ResourceClaim",
        True,
        subresources=("status",),
        status_subresource=True,
    ),
    ResourceType("metrics.k8s.io", "v1beta1", "nodes", "NodeMetrics", False, verbs=("get", "list")),
    ResourceType("metrics.k8s.io", "v1beta1", "pods", "PodMetrics", True, verbs=("get", "list")),
)

GROUP_ORDER = ("", "apps", "events.k8s.io", "policy", "coordination.k8s.io", "metrics.k8s.io")


def find(group: str, version: str, plural: str) -> ResourceType | None:
    for res in RESOURCES:
        if res.group == group and res.version == version and res.plural == plural:
            return res
    return None


def by_kind(api_version: str, kind: str) -> ResourceType:
    group, _, version = api_version.rpartition("/")
    for res in RESOURCES:
        if res.group == group and res.version == version and res.kind == kind:
            return res
    raise KeyError(f"the test API server does not serve {kind} in {api_version}")


def by_plural(plural: str, group: str | None = None) -> ResourceType:
    """Resolve ``pods`` / ``leases`` / ``events``; core and the first group win when a plural is shared."""
    for res in RESOURCES:
        if res.plural == plural and (group is None or res.group == group):
            return res
    raise KeyError(f"the test API server does not serve {plural!r}")


def groups() -> dict[str, list[str]]:
    """Group name to served versions (the legacy core group is ``""``)."""
    out: dict[str, list[str]] = {}
    for group in GROUP_ORDER:
        versions = sorted({r.version for r in RESOURCES if r.group == group})
        if versions:
            out[group] = versions
    return out
