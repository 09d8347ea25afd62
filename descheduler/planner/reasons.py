"""Reason codes for every decision the planner does not turn into an eviction, and the eviction reason text.

Codes are stable, kebab-case strings: dashboards, audits and scripts key on them, so they never change
meaning. Each comes with a default message; the planner adds the specifics (limits, counts, names).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# --- why a node takes no part in a cycle ----------------------------------------------------------
NODE_NOT_READY = "not-ready"
NODE_OUTSIDE_SELECTOR = "outside-node-selector"
NODE_OUTSIDE_POOLS = "outside-node-pools"
NODE_NO_USAGE = "no-usage"
NODE_USAGE_ERROR = "usage-error"
NODE_STALE_USAGE = "stale-usage"
NODE_NO_ALLOCATABLE = "no-allocatable"
NODE_AUTOSCALER = "autoscaler-removing"
"""The cluster autoscaler or Karpenter is removing (or about to remove) the node: its pods are leaving
anyway, and nothing should be moved onto it."""

# --- why a pod on a hotspot stays: filters (properties of the pod) ----------------------------------
FILTERED_DAEMONSET = "filtered-daemonset"
FILTERED_MIRROR = "filtered-mirror"
FILTERED_STATIC = "filtered-static"
FILTERED_TERMINATING = "filtered-terminating"
FILTERED_EVICTION_COST = "filtered-eviction-cost"
FILTERED_NAMESPACE = "filtered-namespace"
FILTERED_LABEL_SELECTOR = "filtered-label-selector"
FILTERED_POD_SELECTOR = "filtered-pod-selector"
FILTERED_BARE = "filtered-bare"
FILTERED_CRITICAL = "filtered-critical"
FILTERED_PRIORITY = "filtered-priority"
FILTERED_LOCAL_STORAGE = "filtered-local-storage"
FILTERED_PVC = "filtered-pvc"
FILTERED_RESOURCE_CLAIMS = "filtered-resource-claims"
RESOURCE_CLAIM_SHARED = "resource-claim-shared"
"""With ``evictResourceClaimPods``: a claim used by name or reserved for more than this pod; evicting it
would not free its device (``devices.py``)."""
RESOURCE_CLAIM_UNALLOCATED = "resource-claim-unallocated"
"""A claim from a template not generated, not found or not allocated yet."""
RESOURCE_CLAIM_UNSUPPORTED = "resource-claim-unsupported"
"""What the device check does not model (admin access, a constraint on an All request, a missing
DeviceClass...)."""
RESOURCE_CLAIM_CEL_ERROR = "resource-claim-cel-error"
"""A device selector cannot be evaluated; the message quotes the expression and the error."""
WORKLOAD_UNKNOWN = "workload-unknown"
REPLICAS_ONE = "replicas-1"
REPLICAS_UNPROTECTED = "replicas-unprotected"
NO_POD_USAGE = "no-pod-usage"
OPTED_OUT = "opted-out"
"""The pod carries one of ``optOutAnnotations`` (``karpenter.sh/do-not-disrupt: "true"``...)."""
PAUSED = "paused"
"""Its namespace, node, workload or the pod itself carries our pause annotation; the message says which."""

# --- why a single-replica Deployment's pod is not restarted (``surgeSingleReplica``, ``surge.py``) ------
SURGE_UNKNOWN = "surge-unknown"
"""The Deployment is not in the snapshot, or a field of its strategy or status cannot be read."""
SURGE_RECREATE = "surge-recreate"
SURGE_NO_SURGE = "surge-no-surge"
"""Its effective maxSurge is 0: the new pod would not be created first."""
SURGE_UNAVAILABLE = "surge-max-unavailable"
"""Its effective maxUnavailable is at least 1: the old pod may stop before the new one is ready."""
SURGE_PAUSED = "surge-paused"
SURGE_ROLLING_OUT = "surge-rollout-in-progress"
SURGE_RESTARTING = "surge-restarting"
"""We restarted it recently: in flight or within the objectLimiters window."""

# --- why a pod that could move stays: limits, budgets, destinations ----------------------------------
FREES_NOTHING = "frees-nothing"
"""Its usage is 0 on every resource the node is over on: moving it would not cool the node at all."""
LIMIT_PER_NODE = "limit-per-node"
LIMIT_PER_NAMESPACE = "limit-per-namespace"
LIMIT_TOTAL = "limit-total"
MIGRATING_PER_NODE = "migrating-per-node"
MIGRATING_PER_NAMESPACE = "migrating-per-namespace"
MIGRATING_GLOBALLY = "migrating-globally"
MIGRATING_PER_WORKLOAD = "migrating-per-workload"
UNAVAILABLE_PER_WORKLOAD = "unavailable-per-workload"
OBJECT_LIMITER = "object-limiter"
ALREADY_MIGRATING = "already-migrating"
BUDGET_SPENT = "budget-spent"
"""``churnBudget``: the cluster's or the namespace's evictions in the rolling period are used up."""
PING_PONG_BACKOFF = "ping-pong-backoff"
"""Its workload's replacements kept landing on nodes over their high threshold: left alone for a
cooldown (``pingpong.py``)."""
ATTEMPTED = "attempted-this-cycle"
"""Tried earlier in this cycle without an eviction (refused, failed, not verified): not tried twice."""
PDB = "pdb"
PDB_MULTIPLE = "pdb-multiple"
PDB_REFUSED = "pdb-refused"
"""The API server refused an eviction under this pod's PodDisruptionBudget recently (its Retry-After)."""
NO_DESTINATION = "no-destination"

# --- why a planned eviction was not sent: the API server's objects disagree (``verify.py``) --------------
VERIFY_POD_CHANGED = "verify-pod-changed"
"""The pod is gone, replaced, moved, terminating or finished, or its controller changed."""
VERIFY_WORKLOAD_CHANGED = "verify-workload-changed"
"""The pod's workload is gone or expects another number of replicas than the cache said."""
VERIFY_REFUSED = "verify-refused"
"""A filter or a per-workload limit refuses the eviction on the server's objects."""
VERIFY_UNREADABLE = "verify-unreadable"
"""The server's objects could not be read (an error or a timeout): nothing is sent on a guess."""

# --- why eviction on a hotspot stopped (node reports) ------------------------------------------------
STOP_NO_LONGER_OVER = "no-longer-over"
STOP_HEADROOM_USED = "headroom-used-up"
STOP_CANDIDATES_EXHAUSTED = "candidates-exhausted"
STOP_NODE_LIMIT = "node-limit-reached"
STOP_GLOBAL_LIMIT = "global-limit-reached"
STOP_NOTHING_TO_DO = "nothing-to-do"
STOP_CURE_IN_MOTION = "cure-in-motion"
"""A hotspot kept confirmed by its previous round waits until that round's pods are gone and their
replacements Ready (``cure.py``)."""


def format_amount(resource: str, amount: int) -> str:
    """A resource amount as people read it: cpu ``2500m``/``3``, bytes ``1.5Gi``, others plain."""
    if resource == "cpu":
        return f"{amount // 1000}" if amount % 1000 == 0 else f"{amount}m"
    if resource in ("memory", "ephemeral-storage", "storage"):
        for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if abs(amount) >= size:
                text = f"{amount / size:.1f}".removesuffix(".0")
                return f"{text}{unit}"
        return str(amount)
    return str(amount)


def percent(amount: int, base: int) -> float:
    """Usage as a percentage of ``base``; 0 when the base is 0 (nothing to be a share of)."""
    return 100.0 * amount / base if base > 0 else 0.0


def overutilized_reason(
    over: Iterable[str],
    usage_percent: Mapping[str, float],
    threshold_percent: Mapping[str, float],
    prod: bool = False,
) -> str:
    """Koordinator's eviction reason, character for character (``low_node_load.go``,
    ``overUtilizedEvictionReason``): ``node is overutilized, node cpu usage(68.53%)>threshold(50.00%)``,
    and in the prod pass ``node is overutilized, prod cpu usage(45.00%)>threshold(40.00%)``.

    Resources are listed in name order, as Koordinator does, so the text is stable across runs and
    operators' greps and alerts written for Koordinator match ours.
    """
    scope = "prod" if prod else "node"
    parts = [
        f"{scope} {name} usage({usage_percent[name]:.2f}%)>threshold({threshold_percent[name]:.2f}%)"
        for name in sorted(over)
    ]
    head = "node is overutilized"
    return f"{head}, {', '.join(parts)}"
