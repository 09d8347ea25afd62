"""WatchList refused (the stand-in answers 400/422 to ``sendInitialEvents``, as kube-apiserver 1.35 does
with the WatchList feature gate off): the cache falls back to paginated LIST, says so once per resource,
and does not ask again when it re-syncs after a 410 Gone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import structlog

from descheduler.kube.api import KubeApi
from descheduler.kube.cache import ClusterCache
from tests.apiserver import ApiServer, objects
from tests.apiserver.waiting import eventually

pytestmark = pytest.mark.integration


@pytest.fixture
def watch_list_cache(kube_api: KubeApi) -> Iterator[ClusterCache]:
    c = ClusterCache(
        kube_api,
        page_size=2,
        resources=["pods"],
        watch_timeout=30,
        backoff_initial=0.2,
        backoff_max=1.0,
        watch_list="auto",
    )
    yield c
    c.stop()


@pytest.mark.parametrize("status", [422, 400])
def test_a_refused_watch_list_falls_back_to_list_and_says_so_once(
    apiserver: ApiServer, watch_list_cache: ClusterCache, status: int
) -> None:
    apiserver.watch_list_status = status
    for i in range(5):
        apiserver.create(objects.pod(f"web-{i}", node="node-1"))
    with structlog.testing.capture_logs() as logs:
        watch_list_cache.start()
        assert watch_list_cache.wait_synced(10)
        eventually(lambda: apiserver.open_watches("pods") == 1, what="the pods watch to be open")
        # A 410 Gone re-syncs: by LIST again, without a second WatchList attempt.
        apiserver.send_bookmarks()
        assert apiserver.drop_watches("pods") == 1
        apiserver.delete("pods", "default", "web-0")
        apiserver.compact()
        eventually(lambda: watch_list_cache.stats()["pods"]["relists"] >= 1, what="a relist")
        eventually(lambda: watch_list_cache.stats()["pods"]["lists"] >= 2, what="the second LIST")
    assert {p.key for p in watch_list_cache.snapshot().pods} == {f"default/web-{i}" for i in range(1, 5)}
    refused = [
        r for r in apiserver.requests_for(verb="watch", resource="pods") if "sendInitialEvents" in r.query
    ]
    assert len(refused) == 1 and refused[0].status == status
    (said,) = [e for e in logs if e["event"] == "watch_list_refused"]
    assert (said["resource"], said["fallback"]) == ("pods", "list")
    assert said["reason"].startswith(f"HTTP {status}: ") and "WatchList feature gate" in said["reason"]
