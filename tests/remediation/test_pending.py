"""The pending signals' list, pure: an entry plans as the signal it was made from, one fault is one entry
however many copies arrive, the list is bounded, and what the leader's pass plans again is the old
entries, oldest first."""

from __future__ import annotations

from dataclasses import replace

from tests.clock import T0
from tests.remediation.fakes import p0_signal
from trainguard.api.monitor import PENDING_LABELS_MAX, TrainingJobMonitorStatus
from trainguard.remediation import pending
from trainguard.remediation.model import Signal, Source
from trainguard.remediation.plan import record_id
from trainguard.remediation.signals import from_alertmanager, from_fastpath
from trainguard.times import rfc3339

JOB = {"namespace": "ml", "training_job": "llama-pretrain"}
XID = {"alertname": "GPUCriticalXid", "severity": "P0", **JOB, "node": "gpu-a", "gpu": "3"}


def copies() -> list[Signal]:
    """One XID 79 as it reaches the operator twelve times: the sidecar's event (twice, a retry), and
    Alertmanager's alert with Prometheus' extra labels, started later, posted ten times (re-posts, the
    operator's replicas, Alertmanager's peers)."""
    sidecar = from_fastpath(
        {"source": "sidecar", "labels": XID | {"pod": "llama-0"}, "startsAt": T0 - 20}, T0
    )
    alert = {"status": "firing", "labels": XID | {"prometheus": "mon/k8s", "instance": "10.0.0.1:9400"},
             "startsAt": rfc3339(T0 - 5)}  # fmt: skip
    am = from_alertmanager({"version": "4", "alerts": [alert]}, T0)[0]
    return [am, am, sidecar, am, am, am, sidecar, am, am, am, am, am]


def test_an_entry_plans_as_the_signal_it_was_made_from() -> None:
    s = replace(p0_signal("GPUCriticalXid"), starts_at=T0 - 5.25)
    e = pending.entry(s, T0)
    back = pending.signal_of(e)
    assert back is not None
    assert e["id"] == record_id(s) == record_id(back)
    assert (back.alertname, back.severity, back.labels, back.fingerprint, back.source) == (
        s.alertname, s.severity, s.labels, s.fingerprint, Source.SIDECAR
    )  # fmt: skip
    assert abs(back.starts_at - s.starts_at) < 0.001
    TrainingJobMonitorStatus.model_validate({"pendingSignals": [e]})  # what the CRD's schema accepts


def test_twelve_copies_of_one_fault_are_one_entry_which_keeps_the_earliest_start() -> None:
    signals = copies()
    assert len({s.fingerprint for s in signals}) == 1 and len({record_id(s) for s in signals}) == 2
    out, refused = pending.with_signals([], signals, T0)
    assert refused == [] and len(out) == 1
    assert out[0]["source"] == "sidecar" and out[0]["startsAt"] == rfc3339(T0 - 20)
    assert out[0]["received"] == rfc3339(T0)
    again, _ = pending.with_signals(out, signals, T0 + 1)
    assert again == out, "copies of a pending fault change nothing: no write"


def test_a_later_copy_does_not_replace_the_entry_and_an_earlier_one_keeps_its_received() -> None:
    am, sidecar = copies()[0], copies()[2]
    first, _ = pending.with_signals([], [am], T0)
    assert first[0]["source"] == "alertmanager"
    out, _ = pending.with_signals(first, [sidecar], T0 + 3)
    assert out[0]["id"] == record_id(sidecar) and out[0]["received"] == rfc3339(T0)


def test_a_full_list_refuses_new_faults_and_still_covers_pending_ones() -> None:
    faults = [
        replace(p0_signal("GPUCriticalXid", f"gpu-{i}"), fingerprint=f"f{i}") for i in range(pending.MAX + 1)
    ]
    out, refused = pending.with_signals([], faults, T0)
    assert len(out) == pending.MAX and refused == [faults[-1]]
    same, refused = pending.with_signals(out, [faults[0]], T0)
    assert same == out and refused == []


def test_labels_beyond_the_bounds_are_dropped_and_those_a_plan_reads_are_kept() -> None:
    extra = {f"label_{i:02}": "x" for i in range(PENDING_LABELS_MAX + 5)} | {"long": "y" * 300}
    s = p0_signal("GPUCriticalXid")
    e = pending.entry(replace(s, labels=extra | s.labels | {"gpu": "3"}), T0)
    assert len(e["labels"]) == PENDING_LABELS_MAX and "long" not in e["labels"]
    assert {
        k: e["labels"][k] for k in ("alertname", "severity", "namespace", "training_job", "node", "gpu")
    } == (s.labels | {"gpu": "3"})
    TrainingJobMonitorStatus.model_validate({"pendingSignals": [e]})


def test_deciding_a_signal_removes_its_entry_and_a_record_every_entry_of_its_fault() -> None:
    am, sidecar = copies()[0], copies()[2]
    other = p0_signal("GPULost", "gpu-b")
    entries = [pending.entry(sidecar, T0), pending.entry(other, T0)]
    assert pending.without(entries, am, recorded=False) == entries, "another instance's entry stays"
    assert pending.without(entries, sidecar, recorded=False) == entries[1:]
    assert pending.without(entries, am, recorded=True) == entries[1:], "a record covers the fault's copies"


def test_the_pass_plans_old_entries_oldest_first_and_leaves_damaged_ones() -> None:
    a, b, c = (p0_signal("GPUCriticalXid", n) for n in ("gpu-a", "gpu-b", "gpu-c"))
    entries = [pending.entry(b, T0 - 30), pending.entry(c, T0 - 2), pending.entry(a, T0 - 60), {"id": "x"}]
    assert [s.node for s in pending.due(entries, T0, grace_s=10)] == ["gpu-a", "gpu-b"]
    assert pending.due(entries, T0, grace_s=100) == []
