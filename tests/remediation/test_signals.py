"""Signals from Alertmanager's webhook and the sidecars' fast path: shape checks, and one fingerprint
for one fault whichever way it came."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from trainguard.catalog.events import fingerprint
from trainguard.exporter.fastpath import detect_stall, event
from trainguard.remediation.model import Source
from trainguard.remediation.signals import (
    PayloadError,
    from_alertmanager,
    from_fastpath,
    parse_rfc3339,
    signal_fingerprint,
)

NOW = 1_700_000_100.0
IDENTITY = {"namespace": "ml", "pod": "llama-0", "node": "gpu-a", "training_job": "llama-pretrain"}
# what Prometheus and Alertmanager add on the way: target labels, external labels, rule labels
AM_EXTRA = {
    "prometheus": "monitoring/k8s",
    "instance": "10.0.0.7:9400",
    "job": "trainguard-exporter",
    "endpoint": "metrics",
    "container": "trainguard-exporter",
    "cluster": "prod-1",
    "trainguard_monitor": "ml/llama-pretrain",
}


def am_alert(labels: dict[str, str], status: str = "firing", **extra: Any) -> dict[str, Any]:
    return {
        "status": status,
        "labels": labels,
        "annotations": {"summary": "s", "description": "d"},
        "startsAt": "2023-11-14T22:13:20.123456789Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "generatorURL": "http://prometheus:9090/graph?g0.expr=up",
        "fingerprint": "1a30ba71cca2921f",
        **extra,
    }


def am_payload(*alerts: dict[str, Any]) -> dict[str, Any]:
    return {
        "receiver": "trainguard-remediation",
        "status": "firing",
        "alerts": list(alerts),
        "groupLabels": {"alertname": "GPUCriticalXid"},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://alertmanager:9093",
        "version": "4",
        "groupKey": '{}:{alertname="GPUCriticalXid"}',
        "truncatedAlerts": 0,
    }


def xid_labels() -> dict[str, str]:
    return IDENTITY | {"alertname": "GPUCriticalXid", "severity": "P0", "gpu": "3", "UUID": "GPU-abc"}


# ---- one fault, one fingerprint -------------------------------------------------------------------


def test_one_gpu_fault_by_fast_path_and_by_alertmanager_has_one_fingerprint() -> None:
    ev = event("GPUCriticalXid", IDENTITY | {"gpu": "3", "UUID": "GPU-abc", "xid": "79"}, "fatal XID 79", NOW)
    am_labels = IDENTITY | {"alertname": "GPUCriticalXid", "severity": "P0", "gpu": "3", "UUID": "GPU-abc"}
    am_labels |= AM_EXTRA
    fast = from_fastpath(ev, NOW)
    (slow,) = from_alertmanager(am_payload(am_alert(am_labels)), NOW)
    assert fast.fingerprint == slow.fingerprint
    assert fast.fingerprint == fingerprint(ev["labels"])
    assert (fast.source, slow.source) == (Source.SIDECAR, Source.ALERTMANAGER)


def test_a_stall_reported_by_one_rank_matches_the_job_wide_alert() -> None:
    # the sidecar's stall event carries its own pod and node; Prometheus's rule is `max by
    # (namespace, training_job)`, so Alertmanager's alert has neither
    assert detect_stall(NOW - 400, NOW, 300)
    ev = event("TrainingJobStalled", dict(IDENTITY), "no step completed on this rank", NOW)
    job_labels = {"alertname": "TrainingJobStalled", "severity": "P0", "namespace": "ml"}
    job_labels |= {"training_job": "llama-pretrain", "prometheus": "monitoring/k8s"}
    fast = from_fastpath(ev, NOW)
    (slow,) = from_alertmanager(am_payload(am_alert(job_labels)), NOW)
    assert fast.fingerprint == slow.fingerprint
    # and every rank's stall event is the same fault
    other_rank = from_fastpath(event("TrainingJobStalled", IDENTITY | {"node": "gpu-b"}, "x", NOW), NOW)
    assert other_rank.fingerprint == fast.fingerprint
    assert fast.node == "gpu-a"  # the labels themselves are kept


def test_different_gpus_and_nodes_are_different_faults() -> None:
    a = from_fastpath(event("GPULost", IDENTITY | {"gpu": "0"}, "lost", NOW), NOW)
    b = from_fastpath(event("GPULost", IDENTITY | {"gpu": "1"}, "lost", NOW), NOW)
    c = from_fastpath(event("GPULost", IDENTITY | {"gpu": "0", "node": "gpu-b"}, "lost", NOW), NOW)
    assert len({a.fingerprint, b.fingerprint, c.fingerprint}) == 3


def test_the_senders_fingerprint_is_never_trusted() -> None:
    ev = event("GPULost", IDENTITY | {"gpu": "0"}, "lost", NOW)
    forged = dict(ev, fingerprint="0000000000000000")
    assert from_fastpath(forged, NOW).fingerprint == ev["fingerprint"]
    alert = am_alert(xid_labels(), fingerprint="ffffffffffffffff")
    (sig,) = from_alertmanager(am_payload(alert), NOW)
    assert sig.fingerprint == fingerprint(xid_labels())


def test_an_alert_outside_the_catalogue_keeps_every_identifying_label() -> None:
    labels = {"alertname": "TrainingInterrupted", "severity": "P0", "namespace": "ml"}
    labels |= {"training_job": "j", "node": "gpu-a"}
    assert signal_fingerprint(labels) == fingerprint(labels)
    assert signal_fingerprint(labels) != signal_fingerprint(labels | {"node": "gpu-b"})


# ---- Alertmanager ---------------------------------------------------------------------------------


def test_alertmanager_alerts_become_signals_with_labels_annotations_and_time() -> None:
    resolved = am_alert(xid_labels() | {"gpu": "4"}, status="resolved", startsAt="2023-11-14T23:13:20+01:00")
    sigs = from_alertmanager(am_payload(am_alert(xid_labels() | AM_EXTRA), resolved), NOW)
    assert [s.firing for s in sigs] == [True, False]
    first = sigs[0]
    assert (first.alertname, first.severity, first.namespace, first.training_job) == (
        "GPUCriticalXid",
        "P0",
        "ml",
        "llama-pretrain",
    )
    assert first.node == "gpu-a" and first.labels["prometheus"] == "monitoring/k8s"
    assert first.annotations == {"summary": "s", "description": "d"}
    assert first.starts_at == pytest.approx(1_700_000_000.123456789, abs=1e-6)
    assert sigs[1].starts_at == 1_700_000_000.0


def test_rfc3339_as_go_writes_it() -> None:
    assert parse_rfc3339("2023-11-14T22:13:20Z") == 1_700_000_000.0
    assert parse_rfc3339("2023-11-14T22:13:20.5-01:00") == 1_700_003_600.5
    assert parse_rfc3339("1970-01-01T00:00:01.000000001Z") == pytest.approx(1.000000001, abs=1e-12)
    for bad in ("2023-11-14T22:13:20", "2023-11-14", "yesterday", "2023-11-14T22:13:20.1234567891Z"):
        with pytest.raises(ValueError):
            parse_rfc3339(bad)


def test_a_start_in_the_future_or_unset_is_taken_as_now() -> None:
    future = am_alert(xid_labels(), startsAt="2099-01-01T00:00:00Z")
    unset = am_alert(xid_labels() | {"gpu": "5"}, startsAt="0001-01-01T00:00:00Z")
    assert [s.starts_at for s in from_alertmanager(am_payload(future, unset), NOW)] == [NOW, NOW]
    ev = event("GPULost", IDENTITY | {"gpu": "0"}, "lost", NOW + 3600)
    assert from_fastpath(ev, NOW).starts_at == NOW


def _mutated(path: str, value: Any) -> dict[str, Any]:
    """A valid two-alert payload with one value replaced (value None deletes the key)."""
    body = am_payload(am_alert(xid_labels()), am_alert(xid_labels() | {"gpu": "4"}))
    *parents, last = path.split(".")
    node: Any = body
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    key: Any = int(last) if last.isdigit() else last
    if value is None:
        del node[key]
    else:
        node[key] = value
    return body


@pytest.mark.parametrize(
    ("path", "value", "reason"),
    [
        ("alerts.1.labels.namespace", None, "alerts[1].labels.namespace: missing"),
        ("alerts.0.labels.training_job", None, "alerts[0].labels.training_job: missing"),
        ("alerts.1.labels.severity", None, "alerts[1].labels.priority: missing, and no severity either"),
        ("alerts.0.labels.alertname", None, "alerts[0].labels.alertname: missing"),
        ("alerts.0.labels.namespace", "", "alerts[0].labels.namespace: empty"),
        ("alerts.1.labels.namespace", 7, "alerts[1].labels.namespace: expected a string, got a number"),
        ("alerts.0.labels", None, "alerts[0].labels: missing"),
        ("alerts.0.labels", ["a"], "alerts[0].labels: expected an object, got a list"),
        ("alerts.0.annotations", "x", "alerts[0].annotations: expected an object, got a string"),
        ("alerts.0.annotations.summary", False, "alerts[0].annotations.summary: expected a string"),
        ("alerts.1.status", "pending", "alerts[1].status: expected 'firing' or 'resolved'"),
        ("alerts.1.status", None, "alerts[1].status: expected 'firing' or 'resolved', got None"),
        ("alerts.0.startsAt", 1700000000, "alerts[0].startsAt: expected an RFC 3339 string"),
        ("alerts.0.startsAt", "2023-11-14 10pm", "alerts[0].startsAt: not RFC 3339"),
        ("alerts", None, "alerts: missing"),
        ("alerts", {}, "alerts: expected a list, got an object"),
        ("alerts", [], "alerts: empty"),
        ("alerts.1", "GPULost", "alerts[1]: expected an object, got a string"),
        ("version", "3", "version: expected '4', got '3'"),
        ("version", None, "version: expected '4', got None"),
    ],
)
def test_a_malformed_alertmanager_payload_names_the_field(path: str, value: Any, reason: str) -> None:
    with pytest.raises(PayloadError) as err:
        from_alertmanager(_mutated(path, value), NOW)
    assert str(err.value).startswith(reason)


@pytest.mark.parametrize("body", [None, [], "x", 4])
def test_an_alertmanager_body_that_is_not_an_object_is_refused(body: Any) -> None:
    with pytest.raises(PayloadError, match=r"^body: expected an object"):
        from_alertmanager(body, NOW)


# ---- fast path ------------------------------------------------------------------------------------


def test_a_fast_path_event_becomes_a_firing_sidecar_signal() -> None:
    ev = event("TrainingLossNonFinite", dict(IDENTITY), "training produced a non-finite loss", NOW - 1)
    sig = from_fastpath(ev, NOW)
    assert sig.source is Source.SIDECAR and sig.firing
    assert (sig.alertname, sig.severity, sig.starts_at) == ("TrainingLossNonFinite", "P0", NOW - 1)
    assert sig.annotations == {"summary": "training produced a non-finite loss"}
    assert sig.labels == ev["labels"]


def test_a_signal_is_graded_by_priority_whatever_its_severity_says() -> None:
    """The mapped style: severity is kube-prometheus-stack's word, the grade is in priority."""
    mapped = am_alert(xid_labels() | {"priority": "P0", "severity": "critical"})
    older = am_alert(xid_labels() | {"gpu": "4"})  # a rule rendered before priority: severity alone
    assert [s.severity for s in from_alertmanager(am_payload(mapped, older), NOW)] == ["P0", "P0"]


def test_a_fast_path_event_carries_its_grade_in_priority_and_an_older_sidecars_in_severity() -> None:
    ev = event("GPULost", IDENTITY | {"gpu": "0"}, "lost", NOW)
    assert ev["labels"]["priority"] == ev["labels"]["severity"] == "P0"
    older = copy.deepcopy(ev)
    del older["labels"]["priority"]
    assert from_fastpath(older, NOW).severity == "P0"
    neither = copy.deepcopy(older)
    del neither["labels"]["severity"]
    with pytest.raises(PayloadError, match=r"^labels.priority: missing, and no severity either"):
        from_fastpath(neither, NOW)


def _event_with(key: str, value: Any) -> dict[str, Any]:
    ev = copy.deepcopy(event("GPULost", IDENTITY | {"gpu": "0"}, "lost", NOW))
    target = ev
    *parents, last = key.split(".")
    for p in parents:
        target = target[p]
    if value is None:
        del target[last]
    else:
        target[last] = value
    return ev


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("labels.namespace", None, "labels.namespace: missing"),
        ("labels.training_job", None, "labels.training_job: missing"),
        ("labels.alertname", None, "labels.alertname: missing"),
        ("labels.training_job", ["x"], "labels.training_job: expected a string, got a list"),
        ("labels", None, "labels: missing"),
        ("labels", "ml/x", "labels: expected an object, got a string"),
        ("annotations", [], "annotations: expected an object, got a list"),
        ("startsAt", "1700000000", "startsAt: expected unix seconds, got a string"),
        ("startsAt", True, "startsAt: expected unix seconds, got a boolean"),
        ("startsAt", float("nan"), "startsAt: expected unix seconds, got nan"),
        ("startsAt", -1, "startsAt: expected unix seconds, got -1"),
        ("source", "alertmanager", "source: expected 'sidecar', got 'alertmanager'"),
    ],
)
def test_a_malformed_fast_path_event_names_the_field(key: str, value: Any, reason: str) -> None:
    with pytest.raises(PayloadError) as err:
        from_fastpath(_event_with(key, value), NOW)
    assert str(err.value).startswith(reason)


@pytest.mark.parametrize("body", [None, [event("GPULost", IDENTITY, "lost", NOW)], "x"])
def test_a_fast_path_body_that_is_not_an_object_is_refused(body: Any) -> None:
    with pytest.raises(PayloadError, match=r"^body: expected an object"):
        from_fastpath(body, NOW)
