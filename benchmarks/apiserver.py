"""The test API server (``tests/apiserver``) serving a synthetic cluster, in or out of process.

``cycle_cost`` runs it in a child process (``python -m benchmarks.apiserver``) so that the server's own
CPU and memory are not counted against the client being measured; ``control_plane_load`` runs it in
process to read its request log.

Objects are committed straight into the server's store (keeping the synthetic uids, which the pods'
owner references point at) rather than POSTed: the benchmarks measure reading, not loading.
"""

from __future__ import annotations

import argparse
import bisect
import json
import subprocess
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

from benchmarks import synth
from tests.apiserver import ApiServer
from tests.apiserver import store as store_mod
from tests.apiserver.resources import by_kind
from tests.apiserver.selectors import compile_field_selector, labels_match, parse_label_selector


def load(server: ApiServer, objects: Iterable[dict[str, Any]]) -> int:
    """Commit objects into the server's store as if created long ago; returns how many."""
    count = 0
    store = server.store
    for obj in objects:
        res = by_kind(obj["apiVersion"], obj["kind"])
        store.commit(res, "ADDED", obj, None)
        count += 1
    store.compact()  # nothing to replay: a watch from the LIST's resourceVersion starts clean
    return count


class FastPagingApiServer(ApiServer):
    """The test API server with LIST pages cut by bisection instead of a scan of every object per page.

    The stand-in filters the whole sorted state for every page, so a paginated LIST of n objects costs
    O(n^2 / limit) on the server: at 150,000 pods that is minutes of server time, which would drown the
    client's cost we want to measure. Here each (revision, selectors) is filtered once and pages are cut by
    bisection; pages, continue tokens and resourceVersions are the same as the stand-in's.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._filtered: dict[tuple[str, int, str, str], tuple[list[str], list[tuple[str, Any]]]] = {}

    def _list(self, res: Any, namespace: str | None, query: dict[str, str]) -> dict[str, Any]:
        if namespace or not query.get("limit"):
            return super()._list(res, namespace, query)
        label_reqs = parse_label_selector(query.get("labelSelector"))
        field_match = compile_field_selector(res.storage_key, query.get("fieldSelector"))
        limit = int(query["limit"])
        token = query.get("continue")
        start = ""
        rv: int | None = None
        if token:
            rv, start = store_mod.decode_continue(token)
        at, items = self.store.sorted_state(res.storage_key, rv)
        cache_key = (res.storage_key, at, query.get("labelSelector") or "", query.get("fieldSelector") or "")
        cached = self._filtered.get(cache_key)
        if cached is None:
            selected = [
                (k, o)
                for k, o in items
                if labels_match(label_reqs, (o.get("metadata") or {}).get("labels") or {}) and field_match(o)
            ]
            cached = ([k for k, _ in selected], selected)
            if len(self._filtered) >= 32:  # one entry per resource and revision is all a sync needs
                self._filtered.pop(next(iter(self._filtered)))
            self._filtered[cache_key] = cached
        keys, selected = cached
        first = bisect.bisect_left(keys, start) if start else 0
        page = selected[first : first + limit]
        meta: dict[str, Any] = {"resourceVersion": str(at)}
        if first + limit < len(selected):
            meta["continue"] = store_mod.encode_continue(at, page[-1][0] + "\x00")
            if not label_reqs and not query.get("fieldSelector"):
                meta["remainingItemCount"] = len(selected) - first - limit
        return {
            "kind": res.list_kind,
            "apiVersion": res.api_version,
            "metadata": meta,
            "items": [self._served(res, o) for _, o in page],
        }


class ServerProcess:
    """A child process serving a synthetic cluster; ``url`` and ``kubeconfig`` are set once it is ready."""

    def __init__(self, spec: synth.SynthSpec, workdir: Path, *, timeout: float = 600.0) -> None:
        self.spec = spec
        self.workdir = workdir
        self.timeout = timeout
        self.url = ""
        self.kubeconfig = workdir / "kubeconfig"
        self.objects = 0
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> ServerProcess:
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.apiserver",
            "--nodes",
            str(self.spec.nodes),
            "--pods-per-node",
            str(self.spec.pods_per_node),
            "--hot-fraction",
            str(self.spec.hot_fraction),
            "--seed",
            str(self.spec.seed),
            "--kubeconfig",
            str(self.kubeconfig),
        ]
        self._proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        ready: list[str] = []
        reader = threading.Thread(target=lambda: ready.append(self._proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(self.timeout)
        if not ready or not ready[0].startswith("READY "):
            self.__exit__(None, None, None)
            raise RuntimeError(f"synthetic API server did not start within {self.timeout:g}s: {ready!r}")
        info = json.loads(ready[0][len("READY ") :])
        self.url, self.objects = info["url"], info["objects"]
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        self._proc = None


def main(argv: list[str] | None = None) -> None:
    """Serve a synthetic cluster until stdin is closed; prints ``READY {json}`` once serving."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--hot-fraction", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    args = parser.parse_args(argv)
    spec = synth.SynthSpec(
        nodes=args.nodes, pods_per_node=args.pods_per_node, hot_fraction=args.hot_fraction, seed=args.seed
    )
    cluster = synth.generate(spec)
    server = FastPagingApiServer(history_limit=10**9)  # no trimming while loading; compacted after
    count = load(server, cluster.objects())
    del cluster
    server.start()
    server.write_kubeconfig(args.kubeconfig)
    print("READY " + json.dumps({"url": server.url, "objects": count}), flush=True)
    try:
        sys.stdin.read()  # the parent closes stdin to stop us
    finally:
        server.stop()


if __name__ == "__main__":
    main()
