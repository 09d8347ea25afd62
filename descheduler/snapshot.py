"""``descheduler snapshot``: write a live cluster (and its usage) to files ``simulate`` replays.

An operator who saw an odd decision can capture the cluster as the descheduler sees it and replay it
offline, change the configuration and replay again. The cluster file is what
``kubectl get nodes,pods,pdb,rs,deploy,sts,rc,ns -A -o json`` prints (one ``List``, objects as the API
server returns them), gzipped; it is written page by page, each item copied as it came, never decoded
into dicts. With ``--prometheus`` the dump is read back as ``simulate`` reads it (which also proves it
replays) and the usage file holds every node's and pod's usage as the live service reads it (the same
queries), with each sample's age, as JSON: ``simulate`` reads it like YAML (JSON is YAML), and at 150,000
pods PyYAML's emitter would take some 40 s where ``json`` takes under one.
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

import msgspec
from msgspec import Struct

from descheduler.cluster.types import UsageSample
from descheduler.kube.api import KubeApi
from descheduler.kube.cache import DEFAULT_RESOURCES, RESOURCES
from descheduler.kube.errors import DecodeError, KubeError

EXIT_OK = 0
EXIT_FAILED = 1
PAGE_SIZE = 500


class _PageMeta(Struct, gc=False, rename={"continue_": "continue"}):
    continue_: str | None = None


class _Page(Struct, gc=False, rename="camel"):
    """A LIST page with its items left as the server's bytes: they go to the file as they came."""

    api_version: str | None = None
    items: list[msgspec.Raw] | None = None
    metadata: _PageMeta | None = None


class _Name(Struct, gc=False):
    name: str | None = None
    namespace: str | None = None


class _Placement(Struct, gc=False, rename="camel"):
    node_name: str | None = None


class _Item(Struct, gc=False, rename="camel"):
    """What the writer reads of an item: whether it names its kind, its name, and a pod's node."""

    api_version: str | None = None
    kind: str | None = None
    metadata: _Name | None = None
    spec: _Placement | None = None


_PAGE = msgspec.json.Decoder(_Page)
_ITEM = msgspec.json.Decoder(_Item)


def write_cluster(api: KubeApi, path: Path, page_size: int = PAGE_SIZE) -> tuple[dict[str, int], list[str]]:
    """Every object the descheduler reads, as one gzipped kubectl-style JSON ``List``; counts per kind, and
    the pods left out.

    Items are copied as the API server sent them (typed lists leave ``kind`` and ``apiVersion`` out of
    their items, so those are written in front), never decoded into dicts and encoded again.

    Nodes are listed before pods, and the two LISTs are not one moment: a node deleted (or created) in
    between leaves pods bound to a node the file does not hold, which ``simulate`` rightly refuses. Such
    pods are left out (they are leaving with their node, or arrived after the picture was taken), and
    named in the returned list (``namespace/name on node``) so the operator knows."""
    counts: dict[str, int] = {}
    nodes: set[str] = set()
    left_out: list[str] = []
    with gzip.open(path, "wb", compresslevel=6) as out:
        out.write(b'{"apiVersion": "v1", "items": [\n')
        separator = b""
        for spec in (r for r in RESOURCES if r.name in DEFAULT_RESOURCES):
            token: str | None = None
            counts[spec.kind] = 0
            while True:
                query = {"limit": page_size, "continue": token}
                where = f"GET {spec.path}"
                try:
                    page = _PAGE.decode(api.request_bytes("GET", spec.path, query=query))
                except msgspec.MsgspecError as exc:
                    raise DecodeError(f"{where}: not a list of {spec.name}: {exc}") from None
                version = json.dumps(page.api_version or "v1")
                for raw in page.items or ():
                    try:
                        item = _ITEM.decode(raw)
                    except msgspec.MsgspecError as exc:
                        raise DecodeError(f"{where}: item {counts[spec.kind] + 1}: {exc}") from None
                    name = item.metadata.name if item.metadata is not None else None
                    if spec.kind == "Node":
                        nodes.add(name or "")
                    elif spec.kind == "Pod":
                        node = item.spec.node_name if item.spec is not None else None
                        if node and node not in nodes:
                            namespace = item.metadata.namespace if item.metadata is not None else None
                            left_out.append(f"{namespace or ''}/{name or ''} on {node}")
                            continue
                    out.write(separator + _named(bytes(raw), item, version, spec.kind))
                    separator = b",\n"
                    counts[spec.kind] += 1
                token = page.metadata.continue_ if page.metadata is not None else None
                if not token:
                    break
        out.write(b'\n], "kind": "List", "metadata": {}}\n')
    return counts, left_out


def _named(raw: bytes, item: _Item, version: str, kind: str) -> bytes:
    """The item's JSON with ``apiVersion`` and ``kind`` in front where it lacks them."""
    missing = []
    if item.api_version is None:
        missing.append(f'"apiVersion":{version}')
    if item.kind is None:
        missing.append(f'"kind":{json.dumps(kind)}')
    if not missing:
        return raw
    body = raw.lstrip()[1:]  # after the object's "{"
    joiner = "" if body.lstrip().startswith(b"}") else ","
    return ("{" + ",".join(missing) + joiner).encode() + body


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
