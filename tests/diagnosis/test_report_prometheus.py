"""The report's edge (diagnosis/fetch.py and the report pass in diagnosis/passes.py) against a real Prometheus: a seeded trace backfilled with
`promtool tsdb create-blocks-from openmetrics`, its ALERTS and the exporter's trace id beside it,
fetched through prometheus-api-client, diagnosed and built into the report.

Stand-ins, because no apiserver runs in this tier: the monitor, its policy and its pods (a plain object
with the Kube methods the edge calls) and the pod-log call (`read_namespaced_pod_log`, which records
its arguments and returns the timestamped text the API would). The logs' path through a real apiserver
and the fake kubelet's /containerLogs is e2e/test_report_pipeline.py's."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import MONITOR, POLICY, merged
from tests.diagnosis.report_inputs import RECORD, TRACE_ID
from tests.diagnosis.traces import AT, JOB, NS, node_name, trace
from tests.kube.fakes import FakeKube, pod
from tests.processes import backfilled_prometheus
from trainguard.clients.prometheus import prometheus_client
from trainguard.diagnosis import signals as sig
from trainguard.diagnosis.fetch import LOG_LIMIT_BYTES, build_report
from trainguard.diagnosis.passes import DiagnosticReports
from trainguard.diagnosis.report import OWN_PLOT_PREFIX
from trainguard.kube import Kube

pytestmark = pytest.mark.tools


def _openmetrics() -> str:
    families: dict[str, list[str]] = {}
    for s in trace("throughput-data", 0).snapshot.series:
        labels = ",".join(f'{k}="{v}"' for k, v in s.labels)
        families.setdefault(s.metric, []).extend(f"{s.metric}{{{labels}}} {v!r} {t:.3f}" for t, v in s.points)
    job = f'namespace="{NS}",training_job="{JOB}"'
    families["trainguard_exporter_info"] = [
        f'trainguard_exporter_info{{{job},pod="{JOB}-worker-0",trace_id="{TRACE_ID}"}} 1 {AT - 60 + 15 * i:.3f}'
        for i in range(8)
    ]
    # a P1 of a rule rendered before `priority`, and a P2 in the mapped severity style
    alert = f'{job},alertname="TrainingThroughputDrop",alertstate="firing",severity="P1",node="gpu-node-0"'
    p2 = f'{job},alertname="DataLoaderSlow",alertstate="firing",priority="P2",severity="warning"'
    families["ALERTS"] = [f"ALERTS{{{a}}} 1 {AT - 300 + 30 * i:.3f}" for a in (alert, p2) for i in range(15)]
    p2_state = f'{job},alertname="DataLoaderSlow",priority="P2",severity="warning"'
    families["ALERTS_FOR_STATE"] = [
        f"ALERTS_FOR_STATE{{{p2_state}}} {AT - 400:.3f} {AT - 300 + 30 * i:.3f}" for i in range(15)
    ]
    return "\n".join([line for lines in families.values() for line in lines] + ["# EOF", ""])


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with backfilled_prometheus(_openmetrics(), tmp_path_factory.mktemp("prometheus"),
                               "--storage.tsdb.retention.time=20y") as url:  # fmt: skip
        yield url


def _stamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


class _Core:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def read_namespaced_pod_log(self, name: str, namespace: str, **kw: Any) -> str:
        self.calls.append({"name": name, "namespace": namespace, **kw})
        return (
            f"{_stamp(AT - 90)} step 1190 long before\n"
            f"{_stamp(AT - 10)} [rank1]: NCCL WARN Timeout waiting for connection\n"
            f"{_stamp(AT + 5)} step 1215 loss 2.28\n"
        )


class LoggingKube(FakeKube):
    """The Kubernetes edge in memory (tests/kube/fakes.py) but for pod_log, which is the real kube.Kube's over
    a stand-in CoreV1Api: what it asks of the apiserver is checked."""

    pod_log = Kube.pod_log

    def __init__(self) -> None:
        monitor = merged(MONITOR, **{"metadata.name": JOB, "metadata.namespace": NS, "metadata.uid": "uid-1"})
        monitor["status"] = {"remediations": [RECORD]}
        policy = merged(
            POLICY, **{"metadata.namespace": NS, "spec.runbookBaseUrl": "https://runbooks.example/tg"}
        )
        selected = monitor["spec"]["selector"]["matchLabels"]
        worker = pod(NS, f"{JOB}-worker-1", selected, "trainer", "trainguard-exporter", spec={"nodeName": "gpu-node-0"},
                     status={"containerStatuses": [{"name": "trainer", "lastState": {"terminated": {
                         "reason": "OOMKilled", "finishedAt": _stamp(AT - 200)}}}]})  # fmt: skip
        other = pod(NS, "web-0", {"app": "web"}, "web")
        super().__init__(monitor, policy, worker, other)
        self.core = _Core()


def test_the_report_is_built_from_prometheus_and_the_pods(prometheus: str, tmp_path: Path) -> None:
    kube = LoggingKube()
    report = build_report(kube, kube, prometheus_client(prometheus), NS, JOB, alert=None, at=AT, now=AT + 600)
    md = report.markdown
    assert "# P1 TrainingThroughputDrop" in md and "node gpu-node-0" in md  # the most severe firing
    assert "### throughput-data-loading" in md
    assert TRACE_ID in md
    assert "https://runbooks.example/tg#trainingthroughputdrop" in md
    assert "[nccl-timeout]" in md and "step 1215" in md and "long before" not in md
    assert "notify: Succeeded" in md
    assert {"throughput", "loss", "data-wait", "allreduce", "gpu-memory"} <= set(report.plots)
    [call] = kube.core.calls  # the exporter's container is not read
    assert call["container"] == "trainer" and call["timestamps"] is True
    assert call["limit_bytes"] == LOG_LIMIT_BYTES and call["since_seconds"] == 630


def test_without_pod_logs_the_pass_reads_none_and_the_report_says_so(prometheus: str) -> None:
    """--no-pod-logs: the RBAC then has no get on pods/log, so not one log request is made."""
    kube = LoggingKube()
    passes = DiagnosticReports(
        kube, kube, lambda: True, prometheus_client(prometheus), clock=lambda: AT, check_s=0, pod_logs=False
    )
    assert passes.run() == 1
    [cm] = kube.created
    assert kube.core.calls == []
    assert "pod logs not read: the operator runs with --no-pod-logs" in cm["data"]["report.md"]


def test_an_unknown_monitor_is_a_lookup_error(prometheus: str) -> None:
    with pytest.raises(LookupError):
        build_report(
            LoggingKube(), LoggingKube(), prometheus_client(prometheus), NS, "nope", alert=None, at=AT, now=AT
        )


def test_each_firing_p2_is_reported_once_into_a_configmap_owned_by_the_monitor(prometheus: str) -> None:
    kube = LoggingKube()
    clock = [AT]
    passes = DiagnosticReports(
        kube, kube, lambda: True, prometheus_client(prometheus), clock=lambda: clock[0], check_s=0
    )
    assert passes.run() == 1
    [cm] = kube.created
    assert cm["metadata"]["ownerReferences"] == [
        {"apiVersion": "trainguard.io/v1alpha1", "kind": "TrainingJobMonitor", "name": JOB, "uid": "uid-1"}
    ]
    assert cm["metadata"]["labels"]["trainguard.io/alert"] == "DataLoaderSlow"  # the P1 is not reported
    assert "# P2 DataLoaderSlow" in cm["data"]["report.md"]
    assert "2025-10-09 08:46:40 UTC" in cm["data"]["report.md"]  # centred on ALERTS_FOR_STATE's activeAt
    assert "<svg" in cm["data"]["report.html"]
    [(reason, message)] = kube.events
    assert (
        reason == "DiagnosticReport"
        and cm["metadata"]["name"] in message
        and "kubectl -n research" in message
    )
    clock[0] += 60
    assert passes.run() == 0 and len(kube.created) == 1
    restarted = DiagnosticReports(kube, kube, lambda: True, prometheus_client(prometheus), clock=lambda: AT)
    assert restarted.run() == 0 and len(kube.events) == 1  # the ConfigMap is there: no second Event


def test_the_alerts_own_series_are_fetched_for_its_pod_and_plotted_first(prometheus: str) -> None:
    kube = LoggingKube()
    pod_ = f"{JOB}-worker-3"
    labels = {"alertname": "DataLoaderSlow", "priority": "P2", "namespace": NS, "training_job": JOB, "pod": pod_,
              "node": node_name(3)}  # fmt: skip
    report = build_report(kube, kube, prometheus_client(prometheus), NS, JOB, alert="DataLoaderSlow", at=AT,
                          now=AT + 600, labels=labels)  # fmt: skip
    first = next(iter(report.plots))
    assert first == f"{OWN_PLOT_PREFIX}{sig.DATA_WAIT}", list(report.plots)
    svg = ET.fromstring(report.plots[first])
    ns = "{http://www.w3.org/2000/svg}"
    assert [p.findtext(f"{ns}title") for p in svg.findall(f"{ns}polyline")] == [pod_]  # its pod, not all 8
    assert svg.find(f"{ns}line[@class='threshold']") is not None
    # the data-loading finding reads the alert's own series: it leads, in place of the catalogue's words
    assert report.data["alertCause"] is None
    assert report.data["findings"][0]["cause"] == "throughput-data-loading"
