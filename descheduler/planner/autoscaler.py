"""Nodes an autoscaler is removing: neither a source (their pods are leaving anyway) nor a destination.

The cluster autoscaler and Karpenter mark such nodes with taints before they drain them; evicting from
one spends a disruption on a pod that is about to move anyway, and moving a pod onto one sends it
straight into the next drain.
"""

from __future__ import annotations

from descheduler.cluster.types import Node

AUTOSCALER_TAINTS = {
    "ToBeDeletedByClusterAutoscaler": "the cluster autoscaler is deleting it",
    "DeletionCandidateOfClusterAutoscaler": "the cluster autoscaler marked it as a deletion candidate",
    "karpenter.sh/disrupted": "Karpenter is disrupting it",
    "karpenter.sh/disruption": "Karpenter is disrupting it",
}
"""Taint key -> what it means. ``karpenter.sh/disruption`` is the key before Karpenter v1."""


def removal_mark(node: Node) -> str:
    """Why an autoscaler is removing the node (its taint and what it means), "" if none is."""
    for taint in node.taints:
        meaning = AUTOSCALER_TAINTS.get(taint.key)
        if meaning is not None:
            shown = f"{taint.key}={taint.value}" if taint.value else taint.key
            return f"taint {shown}:{taint.effect}: {meaning}"
    return ""
