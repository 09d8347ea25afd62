"""The migration records' ConfigMap over HTTP: created on the first write, read back as written, and
never overwritten by a writer that has not seen the latest version."""

from __future__ import annotations

import pytest

from descheduler.kube.api import KubeApi
from descheduler.kube.journal import DATA_KEY, ConfigMapJournal
from descheduler.planner import AnomalyCount
from descheduler.planner import journal as records
from descheduler.planner.journal import Entry, JournalUnreadable, JournalWriteError
from tests.apiserver import ApiServer, Fault

pytestmark = pytest.mark.integration

NS = "load-aware-descheduler"
NAME = "load-aware-descheduler-migrations"


def journal(api: KubeApi, writer: str = "replica-a") -> ConfigMapJournal:
    return ConfigMapJournal(api, namespace=NS, name=NAME, writer=writer)


def entry(pod: str, status: str = records.EVICTED, at: float = 1_800_000_000.0) -> Entry:
    unsettled = status in records.UNSETTLED
    return Entry(
        pod, f"uid-{pod}", "hot", "uid-web", "Deployment", "web", at, status,
        reason="node is overutilized" if unsettled else "", destination="cool" if unsettled else "",
    )  # fmt: skip


def test_no_configmap_means_no_records_and_the_first_write_creates_it(
    apiserver: ApiServer, kube_api: KubeApi
) -> None:
    store = journal(kube_api)
    assert store.load() == ()
    written = (entry("default/web-1"), entry("default/web-2", records.INTENT, at=1_800_000_001.5))
    store.save(written)
    assert journal(kube_api, "replica-b").load() == written
    cm = apiserver.get("configmaps", NS, NAME)
    assert cm is not None and list(cm["data"]) == [DATA_KEY]


def test_a_writer_that_has_not_seen_the_latest_version_gets_a_conflict_and_must_read_again(
    kube_api: KubeApi,
) -> None:
    old, new = journal(kube_api, "old-leader"), journal(kube_api, "new-leader")
    old.load()
    old.save([entry("default/web-1")])
    new.load()
    new.save([entry("default/web-1"), entry("default/web-2")])
    with pytest.raises(JournalWriteError) as caught:
        old.save([entry("default/web-1"), entry("default/web-3", records.INTENT)])
    assert caught.value.reason == "conflict"
    with pytest.raises(JournalWriteError) as again:
        old.save([entry("default/web-1")])
    assert again.value.reason == "not-loaded", "no blind write after a conflict"
    assert [e.pod for e in old.load()] == ["default/web-1", "default/web-2"]


def test_no_write_before_a_successful_read(kube_api: KubeApi) -> None:
    with pytest.raises(JournalWriteError) as caught:
        journal(kube_api).save([entry("default/web-1")])
    assert caught.value.reason == "not-loaded"


@pytest.mark.parametrize(
    ("status", "reason"), [(403, "forbidden"), (500, "unavailable")], ids=["rbac-forbids", "server-error"]
)
def test_a_read_that_fails_says_why(
    apiserver: ApiServer, kube_api: KubeApi, status: int, reason: str
) -> None:
    apiserver.inject(Fault(resource="configmaps", status=status, message="no"))
    with pytest.raises(JournalUnreadable) as caught:
        journal(kube_api).load()
    assert caught.value.reason == reason
    assert f"ConfigMap {NS}/{NAME}" in str(caught.value)


def test_content_that_is_not_ours_is_named_and_may_be_overwritten(
    apiserver: ApiServer, kube_api: KubeApi
) -> None:
    apiserver.create(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": NAME, "namespace": NS},
         "data": {DATA_KEY: '{"version": 1, "records": [{"pod": "x"}]}'}}
    )  # fmt: skip
    store = journal(kube_api)
    with pytest.raises(JournalUnreadable) as caught:
        store.load()
    assert caught.value.reason == "invalid"
    assert f"ConfigMap {NS}/{NAME} key {DATA_KEY}: records[0].pod" in str(caught.value)
    store.save([entry("default/web-1")])
    assert [e.pod for e in journal(kube_api).load()] == ["default/web-1"]


def test_too_many_records_are_refused_before_the_api_server_would(kube_api: KubeApi) -> None:
    store = journal(kube_api)
    store.load()
    many = [entry(f"default/web-{i:05d}", records.INTENT, at=1_800_000_000.0 + i) for i in range(5000)]
    with pytest.raises(JournalWriteError) as caught:
        store.save(many)
    assert caught.value.reason == "too-large"
    store.save(many[:2000])
    assert len(journal(kube_api).load()) == 2000


def test_the_anomaly_detectors_are_stored_beside_the_records_and_kept_by_record_only_writes(
    kube_api: KubeApi,
) -> None:
    store = journal(kube_api)
    store.load()
    kept = records.Detectors(nodes={"hot": AnomalyCount(2, 1_800_000_000.0, 0, 1_799_999_940.0)})
    store.save([entry("default/web-1")], kept)
    store.save([entry("default/web-1"), entry("default/web-2")])  # a write-ahead: detectors unchanged
    successor = journal(kube_api, "replica-b")
    assert [e.pod for e in successor.load()] == ["default/web-1", "default/web-2"]
    assert successor.detectors() == kept
