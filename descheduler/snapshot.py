"""``descheduler snapshot``: write a live cluster (and its usage) to files ``simulate`` replays.

An operator who saw an odd decision can capture the cluster as the descheduler sees it and replay it
offline, change the configuration and replay again. The cluster file is what
``kubectl get nodes,pods,pdb,rs,deploy,sts,rc,ns -A -o json`` prints (one ``List``, objects as the API
server returns them), gzipped; it is written page by page so a large cluster never sits in memory as
dicts. With ``--prometheus`` the usage file holds every node's and pod's usage as the live service
reads it (the same queries), with each sample's age, as JSON: ``simulate`` reads it like YAML (JSON is
YAML), and at 150,000 pods PyYAML's emitter would take some 40 s where ``json`` takes under one.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from descheduler.cluster.types import UsageSample
from descheduler.kube.api import KubeApi
from descheduler.kube.cache import DEFAULT_RESOURCES, RESOURCES
from descheduler.kube.errors import KubeError

EXIT_OK = 0
EXIT_FAILED = 1
PAGE_SIZE = 500


def write_cluster(api: KubeApi, path: Path, page_size: int = PAGE_SIZE) -> tuple[dict[str, int], list[str]]:
    """Every object the descheduler reads, as one gzipped kubectl-style JSON ``List``; counts per kind, and
    the pods left out.

    Nodes are listed before pods, and the two LISTs are not one moment: a node deleted (or created) in
    between leaves pods bound to a node the file does not hold, which ``simulate`` rightly refuses. Such
    pods are left out (they are leaving with their node, or arrived after the picture was taken), and
    named in the returned list (``namespace/name on node``) so the operator knows."""
    counts: dict[str, int] = {}
    nodes: set[str] = set()
    left_out: list[str] = []
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=6) as out:
        out.write('{"apiVersion": "v1", "items": [\n')
        first = True
        for spec in (r for r in RESOURCES if r.name in DEFAULT_RESOURCES):
            token: str | None = None
            counts[spec.kind] = 0
            while True:
                page: Mapping[str, Any] = api.request(
                    "GET", spec.path, query={"limit": page_size, "continue": token}
                )
                version = str(page.get("apiVersion", "v1"))
                for item in page.get("items") or ():
                    if spec.kind == "Node":
                        nodes.add(str((item.get("metadata") or {}).get("name", "")))
                    elif spec.kind == "Pod":
                        node = (item.get("spec") or {}).get("nodeName")
                        if node and node not in nodes:
                            meta = item.get("metadata") or {}
                            left_out.append(f"{meta.get('namespace', '')}/{meta.get('name', '')} on {node}")
                            continue
                    item = {"apiVersion": version, "kind": spec.kind, **item}
                    out.write(("" if first else ",\n") + json.dumps(item, separators=(",", ":")))
                    first = False
                    counts[spec.kind] += 1
                token = (page.get("metadata") or {}).get("continue") or None
                if not token:
                    break
        out.write('\n], "kind": "List", "metadata": {}}\n')
    return counts, left_out


def _amount(resource: str, value: int) -> str | int:
    return f"{value}m" if resource == "cpu" else value


def _sample(sample: UsageSample, now: float) -> dict[str, Any]:
    out: dict[str, Any] = {name: _amount(name, value) for name, value in sorted(sample.resources.items())}
    out["age"] = f"{max(0, round(now - sample.timestamp))}s"
    return out


def usage_document(
    nodes: Mapping[str, UsageSample], pods: Mapping[str, UsageSample], now: float
) -> dict[str, Any]:
    """The ``simulate`` USAGE document: ``nodes`` and ``pods`` samples with their age at ``now``."""
    return {
        "nodes": {name: _sample(s, now) for name, s in sorted(nodes.items())},
        "pods": {key: _sample(s, now) for key, s in sorted(pods.items())},
    }


def cmd_snapshot(args: argparse.Namespace) -> int:
    from descheduler.kube.connection import connect
    from descheduler.simulate.inputs import InputError, load_cluster

    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    cluster_path = out / "cluster.json.gz"
    api = connect(args.kubeconfig, qps=args.qps, burst=int(args.qps * 2), context=args.context)
    try:
        counts, left_out = write_cluster(api, cluster_path)
    except KubeError as exc:
        print(f"error: reading the cluster: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        api.close()
    print(f"wrote {cluster_path}: " + ", ".join(f"{n} {k}" for k, n in counts.items()), file=sys.stderr)
    if left_out:
        shown = ", ".join(left_out[:10]) + (f" and {len(left_out) - 10} more" if len(left_out) > 10 else "")
        print(
            f"notice: left out {len(left_out)} pod(s) bound to a node that was not in the node list (a node "
            f"went away or came while the cluster was read): {shown}",
            file=sys.stderr,
        )
    if not args.prometheus:
        return EXIT_OK
    from descheduler.usage.prometheus import PrometheusSource
    from descheduler.usage.settings import PrometheusSettings

    try:
        snapshot = load_cluster(cluster_path)
    except InputError as exc:
        print(f"error: the cluster just written cannot be read back: {exc}", file=sys.stderr)
        return EXIT_FAILED
    now = time.time()
    source = PrometheusSource(PrometheusSettings.model_validate({"url": args.prometheus}), clock=lambda: now)
    try:
        usage = source.fetch(snapshot.nodes, snapshot.pods)
        document = usage_document(usage.nodes, dict(usage.pods), now)
    finally:
        source.close()
    usage_path = out / "usage.json"
    usage_path.write_text(json.dumps(document, indent=1) + "\n")
    for node, reason in sorted(usage.node_errors.items()):
        print(f"notice: no usage for node {node}: {reason}", file=sys.stderr)
    print(
        f"wrote {usage_path}: {len(document['nodes'])} nodes, {len(document['pods'])} pods "
        f"({source.cycle_samples} samples touched in Prometheus)",
        file=sys.stderr,
    )
    return EXIT_OK


def add_snapshot_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``snapshot`` on the CLI's subparsers (called by ``descheduler.cli``)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "snapshot",
        help="write a live cluster (and its usage) to files simulate can replay",
        description=__doc__,
        epilog="example: descheduler snapshot --kubeconfig ~/.kube/config --output incident/ "
        "--prometheus http://localhost:9090\n"
        "         descheduler simulate --config config.yaml --cluster incident/cluster.json.gz "
        "--usage incident/usage.json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--kubeconfig", default=None, help="kubeconfig file (default: $KUBECONFIG or in-cluster)"
    )
    parser.add_argument("--context", default=None, help="kubeconfig context")
    parser.add_argument(
        "--output", required=True, metavar="DIR", help="directory for cluster.json.gz and usage.json"
    )
    parser.add_argument(
        "--prometheus", default=None, metavar="URL", help="also write usage.json from this Prometheus"
    )
    parser.add_argument("--qps", type=float, default=20.0, help="client-side request rate limit (default 20)")
    parser.set_defaults(func=cmd_snapshot)
    return parser
