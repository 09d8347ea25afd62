"""A usage exporter that follows the real cluster: it plays the kubelets' metrics for the test's nodes.

It watches the API server with our own cache and keeps a :class:`SimulatedNodes` model in step: a pod
that kwok reports Running on a node uses ``cores[app]`` there; a pod that is deleted, evicted or
terminating stops using it at once. The model is served in node-exporter and cAdvisor formats to the
session's real Prometheus (``UsageBackend``), which the descheduler queries.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping

from descheduler.kube.api import KubeApi
from descheduler.kube.cache import ClusterCache
from tests.support.sampling import sampling
from tests.support.service import GI, SimulatedNodes


class ClusterUsage:
    """Where pods run, as the API server says, turned into node and pod usage."""

    def __init__(
        self,
        api: KubeApi,
        namespace: str,
        nodes: Mapping[str, int],
        cores: Mapping[str, float],
        rss: Mapping[str, float] | None = None,
    ) -> None:
        self.namespace = namespace
        self.cores = dict(cores)
        self.rss = dict(rss or {})
        """Memory (bytes) a pod of each app uses; the model's default (256 MiB) for the others."""
        self.model = SimulatedNodes()
        for name, cpus in nodes.items():
            self.model.add_node(name, base_cores=0.3, cpus=cpus, mem_total=16 * GI)
        self._nodes = set(nodes)
        self._cache = ClusterCache(
            api, resources=("pods",), watch_timeout=30, backoff_initial=0.2, backoff_max=1.0
        )
        self._lock = threading.Lock()
        self.placements: dict[str, str] = {}
        """Every pod ever seen running (name -> node), for the report of where replacements landed."""

    def sync(self) -> None:
        """Make the model match the cache: add running pods, drop pods that stopped or are going."""
        running = {
            p.name: p
            for p in self._cache.snapshot().pods
            if p.namespace == self.namespace
            and p.node_name in self._nodes
            and p.phase == "Running"
            and not p.terminating
            and p.labels.get("app") in self.cores
        }
        with self._lock:
            known = {name for ns, name in self.model.pods() if ns == self.namespace}
            for name in known - running.keys():
                self.model.remove_pod(self.namespace, name)
            for name in running.keys() - known:
                pod = running[name]
                app = pod.labels["app"]
                if app in self.rss:
                    self.model.add_pod(self.namespace, name, pod.node_name, self.cores[app], self.rss[app])
                else:
                    self.model.add_pod(self.namespace, name, pod.node_name, self.cores[app])
                self.placements[name] = pod.node_name

    def node_percent(self, node: str) -> float:
        """The node's true CPU usage now, in percent of its cores."""
        return self.model.cpu_percent(node)

    def memory_percent(self, node: str) -> float:
        """The node's true memory usage now (its own plus its pods' RSS), in percent of its memory."""
        _, own, pods = self.model.usage()[node]
        return 100.0 * (own + sum(rss for *_, rss in pods)) / (16 * GI)

    @contextlib.contextmanager
    def following(self, interval: float = 0.1) -> Iterator[ClusterUsage]:
        self._cache.start()
        if not self._cache.wait_synced(30):
            raise AssertionError("the usage exporter's pod cache did not sync in 30 s")
        self.sync()
        try:
            with sampling(self.sync, "kubelets", interval):
                yield self
        finally:
            self._cache.stop()
