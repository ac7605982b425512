"""The records' store writes conditionally: each status patch carries the resourceVersion the monitor was
read at, and after a 409 it writes again only when its change still applies. tests/kube/fakes.py's
FakeKube refuses a stale resourceVersion as the apiserver does; its `interleave` lands someone else's
write between the store's read and its patch."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.clock import T0
from tests.conftest import MONITOR, monitor_body
from tests.kube.fakes import FakeKube, merge_patch
from tests.remediation.fakes import KEY
from trainguard.remediation import records
from trainguard.remediation.model import Phase, Plan, Step, StepKind
from trainguard.remediation.store import RecordStore
from trainguard.times import rfc3339

NS, JOB = MONITOR["metadata"]["namespace"], MONITOR["metadata"]["name"]
UID = monitor_body()["metadata"]["uid"]


def rig() -> tuple[RecordStore, FakeKube]:
    kube = FakeKube(monitor_body())
    locks: dict[tuple[str, str], threading.RLock] = {}
    store = RecordStore(kube, lambda ns, n: locks.setdefault((ns, n), threading.RLock()), key=lambda: KEY)
    return store, kube


def new(record_id: str = "rec-1") -> dict[str, Any]:
    steps = (
        Step(StepKind.CORDON, {"node": "gpu-a", "reason": "XID"}),
        Step(StepKind.TAINT, {"node": "gpu-a"}),
    )
    return records.new_record(Plan(record_id, "fp", "X", "nodeFault", steps, node="gpu-a"), T0)


def conditions(kube: FakeKube) -> None:
    """The reconcile's own status write (another field of the same status)."""
    kube.put(merge_patch(kube.get_monitor(NS, JOB), {"status": {"conditions": [{"type": "Ready"}]}}))


def test_a_new_record_is_signed_and_written_conditionally() -> None:
    store, kube = rig()
    body = kube.get_monitor(NS, JOB)
    assert body is not None
    written = store.create(body, new())
    assert records.signed(written, KEY, NS, JOB, UID)
    assert not records.signed(written, KEY, NS, JOB, "u-2"), "the monitor object's, not only its name's"
    assert kube.records(NS, JOB) == [written]


def test_a_new_record_is_written_again_after_an_unrelated_status_write() -> None:
    store, kube = rig()
    body = kube.get_monitor(NS, JOB)
    assert body is not None
    kube.interleave.append(conditions)
    store.create(body, new())
    assert kube.conflicts == 1
    assert [r["id"] for r in kube.records(NS, JOB)] == ["rec-1"]
    assert (kube.get_monitor(NS, JOB) or {})["status"]["conditions"] == [{"type": "Ready"}], "kept"


def test_a_new_record_planned_on_records_that_changed_meanwhile_is_not_written() -> None:
    store, kube = rig()
    body = kube.get_monitor(NS, JOB)
    assert body is not None
    other = records.sign(new("rec-0"), KEY, NS, JOB, UID)
    kube.interleave.append(lambda k: k.put(merge_patch(body, {"status": {"remediations": [other]}})))
    with pytest.raises(records.Superseded):
        store.create(body, new())
    assert [r["id"] for r in kube.records(NS, JOB)] == ["rec-0"], "the plan is made again on what is there"


def test_a_new_record_planned_on_a_monitor_deleted_and_created_again_meanwhile_is_not_written() -> None:
    """The same name and spec, another object: a record signed for the first would be refused by the
    executor, so the plan is made again on the monitor that is there now."""
    store, kube = rig()
    body = kube.get_monitor(NS, JOB)
    assert body is not None
    again = merge_patch(body, {"metadata": {"uid": "u-2"}})
    kube.interleave.append(lambda k: k.put(again))
    with pytest.raises(records.Superseded, match="changed while planning"):
        store.create(body, new())
    assert kube.records(NS, JOB) == []


def claimed(store: RecordStore, kube: FakeKube) -> tuple[Any, dict[str, Any]]:
    body = kube.get_monitor(NS, JOB)
    assert body is not None
    store.create(body, new())
    saver = store.saver(NS, JOB)
    fresh = saver.read("rec-1")
    assert fresh is not None and fresh.record is not None
    return saver, saver(records.claimed(fresh.record, "me"))


def test_an_executors_save_is_written_again_after_an_unrelated_status_write() -> None:
    store, kube = rig()
    saver, record = claimed(store, kube)
    kube.interleave.append(conditions)
    saved = saver(records.mark(record, 0, Phase.IN_PROGRESS, "", T0 + 1))
    assert kube.conflicts == 1
    assert kube.records(NS, JOB)[0]["steps"][0]["phase"] == Phase.IN_PROGRESS == saved["steps"][0]["phase"]


def test_an_executors_save_over_someone_elses_write_of_the_record_is_refused() -> None:
    """Another executor (an old leader's, say) moves the record between this one's read and its patch:
    the patch gets a 409, the read again shows the record moved, and nothing is written."""
    store, kube = rig()
    saver, record = claimed(store, kube)

    def other_executor(k: FakeKube) -> None:
        body = k.get_monitor(NS, JOB) or {}
        theirs = records.mark(records.claimed(record, "other"), 0, Phase.IN_PROGRESS, "", T0 + 1)
        k.put(merge_patch(body, {"status": {"remediations": [theirs]}}))

    kube.interleave.append(other_executor)
    with pytest.raises(records.Superseded):
        saver(records.mark(record, 0, Phase.IN_PROGRESS, "", T0 + 2))
    assert kube.conflicts == 1 and kube.records(NS, JOB)[0]["owner"] == "other"


def test_a_save_of_a_record_someone_else_moved_before_it_read_is_refused_without_a_write() -> None:
    store, kube = rig()
    saver, record = claimed(store, kube)
    finished = records.mark(
        records.mark(record, 0, Phase.SUCCEEDED, "", T0 + 1), 1, Phase.SUCCEEDED, "", T0 + 1
    )
    kube.put(merge_patch(kube.get_monitor(NS, JOB) or {}, {"status": {"remediations": [finished]}}))
    writes = len(kube.status_writes)
    with pytest.raises(records.Superseded):
        saver(records.mark(record, 0, Phase.IN_PROGRESS, "", T0 + 2))
    assert len(kube.status_writes) == writes and kube.conflicts == 0


def test_records_pruned_from_the_status_leave_their_goodput_counts() -> None:
    kube = FakeKube(monitor_body())
    body = kube.get_monitor(NS, JOB)
    assert body is not None
    body["metadata"]["creationTimestamp"] = rfc3339(T0 - 86400)
    paused = [{"id": f"old-{i}", "phase": "Succeeded", "created": rfc3339(T0 - 80000 + 100 * i),
               "updated": rfc3339(T0 - 80000 + 100 * i + 10), "steps": [{"kind": "Pause", "phase": "Succeeded"}]}
              for i in range(records.RECORD_LIMIT)]  # fmt: skip
    kube.put(merge_patch(body, {"status": {"remediations": paused}}))
    locks: dict[tuple[str, str], threading.RLock] = {}
    store = RecordStore(kube, lambda ns, n: locks.setdefault((ns, n), threading.RLock()), key=lambda: KEY,
                        clock=lambda: T0)  # fmt: skip
    fresh = kube.get_monitor(NS, JOB)
    assert fresh is not None
    store.create(fresh, new())
    kept = kube.get_monitor(NS, JOB)
    assert kept is not None
    carried = kept["status"]["goodput"]
    assert carried["restartSeconds"] == records.RECORD_LIMIT * 10, "every pruned and kept record's stop, once"
    assert carried["until"] == rfc3339(T0 - 60)
    assert kube.records(NS, JOB)[0]["id"] == "old-1"
