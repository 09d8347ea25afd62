"""Label selector, node selector, taint and toleration matching as Kubernetes defines them."""

from __future__ import annotations

from collections.abc import Mapping

from descheduler.cluster.types import (
    LabelSelector,
    LabelSelectorRequirement,
    Node,
    NodeSelectorTerm,
    Pod,
    Taint,
    Toleration,
)


def requirement_matches(req: LabelSelectorRequirement, labels: Mapping[str, str]) -> bool:
    present = req.key in labels
    if req.operator == "In":
        return present and labels[req.key] in req.values
    if req.operator == "NotIn":
        return not present or labels[req.key] not in req.values
    if req.operator == "Exists":
        return present
    if req.operator == "DoesNotExist":
        return not present
    if req.operator in ("Gt", "Lt") and present and len(req.values) == 1:
        try:
            have, want = int(labels[req.key]), int(req.values[0])
        except ValueError:
            return False
        return have > want if req.operator == "Gt" else have < want
    return False


def selector_matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """A None selector matches nothing; an empty one matches everything."""
    if selector is None:
        return False
    for key, value in selector.match_labels.items():
        if labels.get(key) != value:
            return False
    return all(requirement_matches(req, labels) for req in selector.match_expressions)


def node_term_matches(term: NodeSelectorTerm, node: Node) -> bool:
    if not term.match_expressions and not term.match_fields:
        return False  # an empty term matches no objects
    fields = {"metadata.name": node.name}
    return all(requirement_matches(r, node.labels) for r in term.match_expressions) and all(
        requirement_matches(r, fields) for r in term.match_fields
    )


def pod_node_affinity_matches(pod: Pod, node: Node) -> bool:
    """nodeSelector and required node affinity (terms are ORed)."""
    for key, value in pod.node_selector.items():
        if node.labels.get(key) != value:
            return False
    if pod.required_node_terms:
        return any(node_term_matches(term, node) for term in pod.required_node_terms)
    return True


def toleration_tolerates(tol: Toleration, taint: Taint) -> bool:
    if tol.effect and tol.effect != taint.effect:
        return False
    if tol.operator == "Exists":
        return not tol.key or tol.key == taint.key
    return tol.key == taint.key and tol.value == taint.value


def untolerated_taint(pod: Pod, node: Node) -> Taint | None:
    """The first NoSchedule/NoExecute taint the pod does not tolerate, if any."""
    for taint in node.taints:
        if taint.effect not in ("NoSchedule", "NoExecute"):
            continue
        if not any(toleration_tolerates(tol, taint) for tol in pod.tolerations):
            return taint
    return None
