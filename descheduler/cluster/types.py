"""The cluster snapshot: only the fields the planner needs, as small immutable values.

Both the offline ``simulate`` loader and the live watch cache produce these, so dry-run, simulate and
the service decide on identical inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

ResourceList = Mapping[str, int]
"""Resource name to integer amount: cpu in millicores, memory and storage in bytes, others in units."""


@dataclass(frozen=True, slots=True)
class LabelSelectorRequirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist (and Gt/Lt for node selector terms)
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A metav1.LabelSelector. An empty selector matches everything."""

    match_labels: Mapping[str, str] = field(default_factory=dict)
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str  # Equal or Exists
    value: str
    effect: str  # empty matches every effect


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """One term of requiredDuringSchedulingIgnoredDuringExecution: all expressions must hold."""

    match_expressions: tuple[LabelSelectorRequirement, ...] = ()
    match_fields: tuple[LabelSelectorRequirement, ...] = ()


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    labels: Mapping[str, str]
    allocatable: ResourceList
    unschedulable: bool = False
    ready: bool = True
    taints: tuple[Taint, ...] = ()
    raw_allocatable: ResourceList | None = None
    """From annotation ``node.koordinator.sh/raw-allocatable``: wins over allocatable for thresholds."""
    pause: str = ""
    """The value of our pause annotation (``parse.PAUSE_ANNOTATION``) when it pauses evictions from the
    node, else "" (see ``parse.pause_value``)."""
    warnings: tuple[str, ...] = field(default=(), compare=False)
    """What was ignored when the node was read, one line each (an unreadable raw-allocatable annotation:
    the node falls back to ``allocatable``); the cache logs each once and lists them in
    ``object_warnings``. Not compared: two reads of the same node are equal whatever was said."""

    @property
    def threshold_base(self) -> ResourceList:
        """What thresholds are percentages of (Koordinator's raw-allocatable when present)."""
        if self.raw_allocatable:
            merged = dict(self.allocatable)
            merged.update(self.raw_allocatable)
            return merged
        return self.allocatable


@dataclass(frozen=True, slots=True)
class OwnerRef:
    kind: str
    name: str
    uid: str
    api_version: str = ""


@dataclass(frozen=True, slots=True)
class PodClaimRef:
    """One entry of a pod's ``spec.resourceClaims``: a shared claim by name, or a template whose
    generated claim (named in ``status.resourceClaimStatuses``) belongs to this pod alone."""

    name: str
    claim_name: str = ""
    """``resourceClaimName``: an existing claim, possibly shared with other pods."""
    template_name: str = ""
    """``resourceClaimTemplateName``: the replacement pod gets a fresh claim from this template."""
    generated_claim_name: str = ""
    """The claim generated from the template for this pod ("" until the controller made it)."""


@dataclass(frozen=True, slots=True)
class HostPort:
    """A container's ``hostPort`` (0 is none and not kept): one per port, protocol and host address."""

    port: int
    protocol: str = "TCP"
    ip: str = ""
    """``hostIP``; "" (unset) and "0.0.0.0" take the port on every address of the node."""


@dataclass(frozen=True, slots=True)
class PodTerm:
    """A required pod (anti-)affinity term: pods matching ``selector`` in the term's namespaces, in the
    node's topology domain (the nodes sharing its ``topology_key`` label value)."""

    selector: LabelSelector | None
    """None (``labelSelector`` unset) matches no pod."""
    topology_key: str
    namespaces: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None
    """Set: the namespaces whose labels match it too (empty: every namespace)."""


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A ``topologySpreadConstraints`` entry with ``whenUnsatisfiable: DoNotSchedule`` (the others only
    score nodes)."""

    max_skew: int
    topology_key: str
    selector: LabelSelector | None


@dataclass(frozen=True, slots=True)
class Placement:
    """What the scheduler checks of a pod against the other pods: host ports, required pod affinity and
    anti-affinity, hard topology spread. A pod without any has ``Pod.placement`` None."""

    host_ports: tuple[HostPort, ...] = ()
    affinity: tuple[PodTerm, ...] = ()
    anti_affinity: tuple[PodTerm, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()


@dataclass(frozen=True, slots=True)
class Pod:
    namespace: str
    name: str
    uid: str
    node_name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    """Only the annotations the planner reads (see ``parse.KEPT_POD_ANNOTATIONS``)."""
    phase: str = "Running"
    ready: bool = True
    """The Ready condition (without conditions: phase Running); unready pods count as unavailable."""
    terminating: bool = False
    created: float = 0.0
    """creationTimestamp as seconds since the epoch (newest-first ordering)."""
    priority: int | None = None
    priority_class_name: str = ""
    qos_class: str = "BestEffort"
    requests: ResourceList = field(default_factory=dict)
    owner: OwnerRef | None = None
    """The controller owner reference, if any."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    required_node_terms: tuple[NodeSelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    has_local_storage: bool = False
    has_pvc: bool = False
    is_mirror: bool = False
    is_static: bool = False
    has_resource_claims: bool = False
    scheduler_name: str = "default-scheduler"
    resource_claims: tuple[PodClaimRef, ...] = ()
    """``spec.resourceClaims`` joined with ``status.resourceClaimStatuses`` (DRA); empty without claims."""
    placement: Placement | None = None
    """Host ports, required pod (anti-)affinity and hard topology spread; None when it has none."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def is_terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class PodDisruptionBudget:
    namespace: str
    name: str
    selector: LabelSelector | None
    """None selects no pods (policy/v1 semantics for a null selector); empty selects all in namespace."""
    disruptions_allowed: int


@dataclass(frozen=True, slots=True)
class Rollout:
    """A Deployment's update strategy and rollout status, as given (``spec.strategy``, ``spec.paused``,
    ``metadata.generation``, ``status``): whether a rollout restart would surge a new pod before it
    removes the old one (``planner/surge.py`` decides). ``problem`` names a field that could not be read
    (the Deployment is then never restarted, its other uses are unaffected)."""

    strategy: str = "RollingUpdate"
    max_surge: int | str = "25%"
    max_unavailable: int | str = "25%"
    paused: bool = False
    generation: int = 0
    observed_generation: int = 0
    replicas: int = 0
    """``status.replicas``: pods of every ReplicaSet of the Deployment."""
    updated_replicas: int = 0
    ready_replicas: int = 0
    available_replicas: int = 0
    progress_deadline: int = 600
    """``spec.progressDeadlineSeconds`` (Kubernetes' default 600): with ``min_ready`` (``minReadySeconds``),
    how long a restart of ours may take before it counts as failed (``planner/surge.py``)."""
    min_ready: int = 0
    deadline_exceeded: bool = False
    """Condition ``Progressing`` is ``False``, reason ``ProgressDeadlineExceeded``: the rollout stalled."""
    restarted_at: float = 0.0
    """The pod template's ``kubectl.kubernetes.io/restartedAt`` (seconds since the epoch; 0: none or
    unreadable): tells whether a restart patch of ours was applied."""
    resource_version: str = field(default="", compare=False)
    """Not compared: a status heartbeat alone does not make it another rollout."""
    problem: str = ""


@dataclass(frozen=True, slots=True)
class Workload:
    """A controller that owns pods; ``replicas`` is its expected replica count."""

    kind: str
    namespace: str
    name: str
    uid: str
    replicas: int
    owner: OwnerRef | None = None
    pause: str = ""
    """The pause annotation's value when it pauses evictions of this workload's pods, else ""."""
    rollout: Rollout | None = None
    """Deployments only: what a rollout restart would do (``surgeSingleReplica``)."""


@dataclass(frozen=True, slots=True)
class Namespace:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    pause: str = ""
    """The pause annotation's value when it pauses evictions in this namespace, else ""."""


AttributeValue = bool | int | str
"""A device attribute (resource.k8s.io/v1 DeviceAttribute): bool, int, string, or a semantic version
kept as its string in ``Device.versions``."""


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a ResourceSlice. Attribute and capacity names are fully qualified
    (``domain/name``; an unqualified name in the slice gets the driver's name as its domain)."""

    name: str
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    versions: frozenset[str] = frozenset()
    """Qualified names of the attributes that are semantic versions (``version`` in the API)."""
    capacity: Mapping[str, Fraction] = field(default_factory=dict)
    """Exact quantities (``500m`` is 1/2), as CEL compares them."""
    unsupported: str = ""
    """Why this device cannot be reasoned about (shareable: ``allowMultipleAllocations``; binding
    conditions; per-device node selection); such devices are never counted as free."""
    consumes: tuple[tuple[str, Mapping[str, Fraction]], ...] = ()
    """``consumesCounters`` of a partitionable device: (counter set, counter -> amount)."""
    taints: tuple[Taint, ...] = ()
    """Device taints (``DRADeviceTaints``): NoSchedule/NoExecute need a toleration of the request."""


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    """A resource.k8s.io/v1 ResourceSlice: devices of one driver's pool, available to one node, to all
    nodes, or to the nodes a selector picks."""

    name: str
    driver: str
    pool: str
    pool_generation: int
    slice_count: int
    node_name: str = ""
    all_nodes: bool = False
    node_selector: tuple[NodeSelectorTerm, ...] = ()
    """``spec.nodeSelector`` terms (ORed); empty with neither node_name nor all_nodes: no node."""
    devices: tuple[Device, ...] = ()
    counter_sets: Mapping[str, Mapping[str, Fraction]] = field(default_factory=dict)
    """``sharedCounters``: counter set -> counter -> value (a slice holds these or devices)."""


@dataclass(frozen=True, slots=True)
class DeviceClass:
    """A resource.k8s.io/v1 DeviceClass: CEL selectors every device of the class must satisfy."""

    name: str
    selectors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One request of a claim (``spec.devices.requests[]``). ``first_available`` holds the
    subrequests of a ``firstAvailable`` request, in order of preference."""

    name: str
    device_class: str = ""
    selectors: tuple[str, ...] = ()
    allocation_mode: str = "ExactCount"
    count: int = 1
    admin_access: bool = False
    first_available: tuple[DeviceRequest, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    """Device taints this request tolerates."""


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One ``status.allocation.devices.results[]`` entry: the device a request got."""

    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    """A resource.k8s.io/v1 ResourceClaim as the planner needs it."""

    namespace: str
    name: str
    uid: str
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    """``spec.devices.constraints`` as (kind: ``matchAttribute``, ``distinctAttribute`` or "" for one
    not known, the fully qualified attribute, the requests it applies to; empty: all)."""
    allocated: bool = False
    node_name: str = ""
    """The node the allocation is bound to ("" when not allocated or not node-local)."""
    results: tuple[AllocatedDevice, ...] = ()
    reserved_for: tuple[str, ...] = ()
    """UIDs of the pods in ``status.reservedFor``."""
    owner: OwnerRef | None = None
    """The controller owner (the pod, for a claim generated from a template)."""
    problem: str = ""
    """A field that could not be read; the claim's pods then never move."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything the planner may look at in the cluster at one instant."""

    nodes: tuple[Node, ...] = ()
    pods: tuple[Pod, ...] = ()
    pdbs: tuple[PodDisruptionBudget, ...] = ()
    workloads: tuple[Workload, ...] = ()
    namespaces: tuple[Namespace, ...] = ()
    resource_slices: tuple[ResourceSlice, ...] = ()
    resource_claims: tuple[ResourceClaim, ...] = ()
    device_classes: tuple[DeviceClass, ...] = ()
    """DRA objects; read only when ``evictResourceClaimPods`` is on (empty otherwise)."""


@dataclass(frozen=True, slots=True)
class UsageSample:
    """Measured usage of a node or pod. Memory excludes reclaimable page cache."""

    resources: ResourceList
    timestamp: float
    """When the sample was measured, seconds since the epoch."""


@dataclass(frozen=True, slots=True)
class UsageSnapshot:
    """Usage for one cycle. ``node_errors`` says why a node has no trustworthy sample."""

    nodes: Mapping[str, UsageSample] = field(default_factory=dict)
    pods: Mapping[str, UsageSample] = field(default_factory=dict)
    """Keyed by ``namespace/name``."""
    node_errors: Mapping[str, str] = field(default_factory=dict)
