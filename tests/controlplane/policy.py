"""The shipped admission policies tried on the real API server: as the ServiceAccount an install made, every
change the descheduler makes and every change it must not be able to make, with the policies in force and
again with them removed (so a refusal is shown to be the policy's, and the test can fail)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from descheduler.kube.connection import connect
from descheduler.kube.taints import NodeTainter
from descheduler.planner.steer import TAINT_KEY
from tests.controlplane import objects
from tests.controlplane.cluster import ControlPlane

TEAM = {"key": "team", "value": "a", "effect": "PreferNoSchedule"}
"""Another taint on the node: it must stay as it is."""

POLICY_DENIAL = "ValidatingAdmissionPolicy"
NODE_REFUSALS: list[tuple[str, list[str], str]] = [
    ("labelling a node", ["label", "node", "{node}", "team=b"], "may not change a node's labels"),
    (
        "annotating a node",
        ["annotate", "node", "{node}", "note=x"],
        "may not change a node's labels, annotations",
    ),
    # What `kubectl cordon` sends (cordon itself exits 0 even when the server refuses it).
    (
        "cordoning a node",
        ["patch", "node", "{node}", "--type=merge", "-p", '{"spec":{"unschedulable":true}}'],
        "may not cordon or uncordon a node",
    ),
    (
        "removing another taint",
        ["taint", "nodes", "{node}", "team-"],
        "may not add, remove or change any other taint",
    ),
    ("adding another taint", ["taint", "nodes", "{node}", "other=x:NoSchedule"], "any other taint"),
    (
        "putting our key on as NoSchedule",
        ["taint", "nodes", "{node}", f"{TAINT_KEY}=true:NoSchedule"],
        "any other taint",
    ),
]
DEPLOYMENT_REFUSALS: list[tuple[str, list[str], str]] = [
    (
        "changing a Deployment's image",
        ["set", "image", "deployment/web", "app=registry.invalid/other:2"],
        "may not change a Deployment's pod template",
    ),
    (
        "changing a Deployment's replicas",
        ["patch", "deployment", "web", "--type=merge", "-p", '{"spec":{"replicas":3}}'],
        "may not change a Deployment's replicas",
    ),
    (
        "labelling a Deployment",
        ["label", "deployment", "web", "team=b"],
        "may not change a Deployment's replicas",
    ),
]
REFUSALS = NODE_REFUSALS + DEPLOYMENT_REFUSALS


@dataclass
class Proof:
    """What the shipped ServiceAccount could do on the real API server, with the policies and without."""

    account: str
    taint: list[str]
    """Our tainter's results adding then removing our taint, as the ServiceAccount."""
    restart: subprocess.CompletedProcess[str]
    """``kubectl rollout restart`` (a surge restart's patch) as the ServiceAccount."""
    refused: dict[str, subprocess.CompletedProcess[str]]
    """Each forbidden change (server-side dry run) with the policies in place."""
    unpoliced: dict[str, subprocess.CompletedProcess[str]]
    """The same changes with the policies removed."""
    taints_after: list[dict[str, Any]]


def attempt(plane: ControlPlane, identity: Path, namespace: str, node: str, args: list[str]) -> Any:
    """One change as ``identity``, sent with ``--dry-run=server``: admission runs, nothing is stored."""
    argv = [a.replace("{node}", node) for a in args]
    return plane.kubectl(*argv, "-n", namespace, "--dry-run=server", kubeconfig=identity, check=False)


def our_policies(plane: ControlPlane) -> list[str]:
    """Every ValidatingAdmissionPolicy and binding of ours in the cluster (any install, any rename)."""
    names = plane.kubectl(
        "get", "validatingadmissionpolicies,validatingadmissionpolicybindings", "-o", "name"
    ).stdout.split()
    return [n for n in names if "load-aware-descheduler-" in n]


def remove_our_policies(plane: ControlPlane) -> None:
    for name in our_policies(plane):
        plane.kubectl("delete", name, "--wait=true")


def prove_policies(plane: ControlPlane, identity: Path, account: str, namespace: str) -> Proof:
    """As the installed ServiceAccount (``identity``; the install's policies the only ones of ours in the
    cluster): every change tried; then the policies removed and the refused changes tried again."""
    node = f"{namespace}-n"
    plane.add_nodes(namespace, [node])
    plane.kubectl("taint", "nodes", node, "team=a:PreferNoSchedule")
    plane.apply([objects.deployment("web", namespace, replicas=1)], namespace=namespace)
    label = NODE_REFUSALS[0][1]
    plane.wait_for(  # the API server picks a new policy up within a second or so
        "the policy in force",
        lambda: POLICY_DENIAL in attempt(plane, identity, namespace, node, label).stderr,
        timeout_s=30,
    )
    api = connect(str(identity), qps=100, burst=100)
    try:
        tainter = NodeTainter(api, None, dry_run=False)
        taint = [tainter.add(node, "hot").result, tainter.remove(node, "cool").result]
    finally:
        api.close()
    restart = plane.kubectl(
        "rollout", "restart", "deployment/web", "-n", namespace, kubeconfig=identity, check=False
    )
    refused = {what: attempt(plane, identity, namespace, node, args) for what, args, _ in REFUSALS}
    remove_our_policies(plane)
    plane.wait_for(
        "the policy gone",
        lambda: attempt(plane, identity, namespace, node, label).returncode == 0,
        timeout_s=30,
    )
    unpoliced = {what: attempt(plane, identity, namespace, node, args) for what, args, _ in REFUSALS}
    taints = list(plane.get_json("node", node)["spec"].get("taints") or [])
    return Proof(account, taint, restart, refused, unpoliced, taints)
