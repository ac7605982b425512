"""The OTLP bridge's mapping (exporter/otlp.py): prometheus_client families to OTLP metrics named and
labelled as a Prometheus scrape names and labels them; the flags, the missing-extra error and the
secrecy of header values. tests/integration/test_otlp_victoria_metrics.py sends the result to a real
VictoriaMetrics."""

from __future__ import annotations

import argparse
import contextlib
import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    Sum,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from tests.exporter.running import running_exporter
from trainguard.exporter import otlp
from trainguard.exporter.flags import add_arguments

START, NOW = 1_000_000_000, 5_000_000_000


def by_name(metrics: list[Any]) -> dict[str, Any]:
    return {m.name: m for m in metrics}


def test_a_counter_is_a_cumulative_monotonic_sum_named_as_its_sample() -> None:
    fam = CounterMetricFamily("trainguard_train_oom", "OOMs.", labels=["namespace", "pod"])
    fam.add_metric(["ml", "llama-0"], 3.0, created=2.5)
    fam.add_metric(["ml", "llama-1"], 1.0)
    (metric,) = otlp.to_otlp_metrics([fam], START, NOW)
    assert metric.name == "trainguard_train_oom_total"
    assert isinstance(metric.data, Sum)
    assert (
        metric.data.is_monotonic and metric.data.aggregation_temporality == AggregationTemporality.CUMULATIVE
    )
    points = {p.attributes["pod"]: p for p in metric.data.data_points}
    assert points["llama-0"].value == 3.0 and points["llama-0"].start_time_unix_nano == 2_500_000_000
    assert points["llama-1"].start_time_unix_nano == START and points["llama-1"].time_unix_nano == NOW
    assert dict(points["llama-0"].attributes) == {"namespace": "ml", "pod": "llama-0"}


def test_a_dcgm_counter_exposed_as_a_gauge_stays_a_sum_under_its_own_name() -> None:
    """dcgm-exporter's counters have no _total and are typed gauge on /metrics; the catalogue says
    counter, so OTLP gets a monotonic sum, named exactly as the rules name it."""
    replay = GaugeMetricFamily("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "PCIe retries.", labels=["gpu"])
    replay.add_metric(["0"], 7.0)
    temp = GaugeMetricFamily("DCGM_FI_DEV_GPU_TEMP", "Temperature.", labels=["gpu"])
    temp.add_metric(["0"], 61.0)
    got = by_name(otlp.to_otlp_metrics([replay, temp], START, NOW))
    assert set(got) == {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_GPU_TEMP"}
    assert isinstance(got["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"].data, Sum)
    assert got["DCGM_FI_DEV_PCIE_REPLAY_COUNTER"].data.is_monotonic
    assert isinstance(got["DCGM_FI_DEV_GPU_TEMP"].data, Gauge)
    assert got["DCGM_FI_DEV_GPU_TEMP"].data.data_points[0].value == 61.0


def test_a_histogram_keeps_its_bounds_and_counts_per_bucket() -> None:
    fam = HistogramMetricFamily("trainguard_train_collective_seconds", "Collectives.", labels=["op"])
    fam.add_metric(["all_reduce"], [("0.1", 2.0), ("1.0", 5.0), ("2.5", 5.0), ("+Inf", 6.0)], sum_value=9.5)
    (metric,) = otlp.to_otlp_metrics([fam], START, NOW)
    assert metric.name == "trainguard_train_collective_seconds"  # the store derives _bucket/_sum/_count
    assert isinstance(metric.data, Histogram)
    (point,) = metric.data.data_points
    assert list(point.explicit_bounds) == [0.1, 1.0, 2.5]
    assert list(point.bucket_counts) == [2, 3, 0, 1]
    assert (point.count, point.sum) == (6, 9.5)
    assert dict(point.attributes) == {"op": "all_reduce"}  # no le


def test_an_empty_label_is_left_out_as_prometheus_stores_it() -> None:
    fam = GaugeMetricFamily("trainguard_exporter_collector_up", "Up.", labels=["collector", "error"])
    fam.add_metric(["gpu", ""], 1.0)
    (metric,) = otlp.to_otlp_metrics([fam], START, NOW)
    assert dict(metric.data.data_points[0].attributes) == {"collector": "gpu"}


def test_the_real_registry_maps_to_the_names_and_labels_of_a_scrape() -> None:
    """Every sample name of the simulated exporter's /metrics comes out of the bridge (a histogram as
    its family), with the same label sets, and nothing else does."""
    with running_exporter("--backend", "simulated", "--gpus", "2", "--no-host") as exp:
        scraped = exp.scrape()
        metrics = by_name(otlp.to_otlp_metrics(exp.exporter.registry.collect(), START, NOW))
    histograms = {n for n, m in metrics.items() if isinstance(m.data, Histogram)}
    assert histograms == {"trainguard_train_collective_seconds"}
    expected = {n for n in scraped if not n.endswith("_created")}
    produced = {n for n in metrics if n not in histograms}
    produced |= {f"{h}_{s}" for h in histograms for s in ("bucket", "sum", "count")}
    assert produced == expected, produced ^ expected
    for name, m in metrics.items():
        if name in histograms:
            continue
        got = sorted(sorted(p.attributes.items()) for p in m.data.data_points)
        want = sorted(sorted((k, v) for k, v in labels.items() if v) for labels, _ in scraped[name])
        assert got == want, name
    identity = {"namespace": "ml", "pod": "llama-0", "node": "gpu-node-1", "training_job": "llama-pretrain"}
    for p in metrics["DCGM_FI_DEV_GPU_TEMP"].data.data_points:
        assert {k: p.attributes[k] for k in identity} == identity


def test_the_resource_carries_the_identity_and_nothing_of_the_sdk() -> None:
    resource = otlp.identity_resource(
        {"namespace": "ml", "pod": "llama-0", "node": "gpu-node-1", "training_job": "llama-pretrain"}
    )
    assert dict(resource.attributes) == {
        "service.name": "trainguard-exporter",
        "service.version": "0.1.0",
        "service.instance.id": "ml/llama-0",
        "k8s.namespace.name": "ml",
        "k8s.pod.name": "llama-0",
        "k8s.node.name": "gpu-node-1",
        "trainguard.training_job": "llama-pretrain",
    }
    assert "service.instance.id" not in otlp.identity_resource({"node": "n"}).attributes


class Recording(MetricExporter):
    """An in-process MetricExporter that keeps what it is given (or fails): the pusher's loop under
    test, not the network, which the VictoriaMetrics test covers."""

    def __init__(self, result: MetricExportResult = MetricExportResult.SUCCESS) -> None:
        super().__init__()
        self.result = result
        self.batches: list[MetricsData] = []
        self.shut = False
        self.pushed = threading.Event()

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        self.batches.append(metrics_data)
        self.pushed.set()
        return self.result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.shut = True


def test_the_pusher_pushes_every_interval_and_once_more_on_stop() -> None:
    with running_exporter("--backend", "simulated", "--gpus", "1", "--no-host") as exp:
        sink = Recording()
        pusher = otlp.OTLPPusher(exp.exporter.registry, sink, otlp.identity_resource({}), interval_s=0.05)
        pusher.start()
        assert sink.pushed.wait(10)
        pusher.stop()
    assert sink.shut and pusher.pushes == len(sink.batches) >= 2 and pusher.failures == 0
    (rm,) = sink.batches[-1].resource_metrics
    names = {m.name for m in rm.scope_metrics[0].metrics}
    assert {"DCGM_FI_DEV_GPU_TEMP", "trainguard_train_oom_total"} <= names
    assert rm.scope_metrics[0].scope.name == "trainguard.exporter"


def test_a_failed_push_is_counted_and_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    with running_exporter("--backend", "simulated", "--gpus", "1", "--no-host") as exp:
        pusher = otlp.OTLPPusher(exp.exporter.registry, Recording(MetricExportResult.FAILURE),
                                 otlp.identity_resource({}), interval_s=30)  # fmt: skip
        with caplog.at_level(logging.WARNING):
            assert pusher.push() is False
    assert pusher.failures == 1 and "OTLP export failed" in caplog.text


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(list(argv))


def test_otlp_is_off_by_default_and_the_flags_parse() -> None:
    assert parse().otlp_endpoint is None
    args = parse("--otlp-endpoint", "http://vm:8428/opentelemetry/v1/metrics", "--otlp-interval", "5",
                 "--otlp-header", "Authorization=Bearer a=b", "--otlp-header", "X-Org=7")  # fmt: skip
    assert args.otlp_interval == 5.0
    assert dict(args.otlp_header) == {"Authorization": "Bearer a=b", "X-Org": "7"}


@pytest.mark.parametrize(
    "argv",
    [
        ["--otlp-header", "s3cret-token-without-a-key"],
        ["--otlp-endpoint", "vm:8428/opentelemetry/v1/metrics"],
        ["--otlp-interval", "0"],
    ],
)
def test_a_bad_otlp_flag_is_refused_without_echoing_a_header(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse(*argv)
    assert "s3cret" not in capsys.readouterr().err


@contextlib.contextmanager
def otlp_receiver() -> Iterator[tuple[str, list[tuple[str, dict[str, str], bytes]]]]:
    """A loopback HTTP server that records each POST (path, headers, body) and answers 200: what an
    OTLP/HTTP receiver sees of the pusher's requests."""
    got: list[tuple[str, dict[str, str], bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}", got
    finally:
        server.shutdown()
        server.server_close()


def test_headers_reach_the_receiver_and_the_log_names_only_their_keys(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--otlp-header and OTEL_EXPORTER_OTLP_HEADERS (a Secret's way in) both arrive, the flag winning on
    the same key; no value is logged."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (  # noqa: PLC0415
        ExportMetricsServiceRequest,
    )

    from trainguard.exporter.main import start_otlp  # noqa: PLC0415

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-org=env-0rg,x-api-key=env-loses")
    with otlp_receiver() as (addr, got), running_exporter("--backend", "simulated", "--no-host") as exp:
        args = parse("--otlp-endpoint", f"http://user:pa55word@{addr}/opentelemetry/v1/metrics?k=v",
                     "--otlp-header", "X-Api-Key=s3cret", "--otlp-interval", "3600")  # fmt: skip
        with caplog.at_level(logging.INFO, logger="trainguard.exporter"):
            pusher = start_otlp(otlp, args, exp.exporter)
        pusher.stop()  # the final push
    assert (
        f"http://{addr}/opentelemetry/v1/metrics every 3600s (--otlp-header keys: X-Api-Key)" in caplog.text
    )
    assert not any(secret in caplog.text for secret in ("s3cret", "pa55word", "env-0rg", "env-loses"))
    ((path, headers, body),) = got
    assert path == "/opentelemetry/v1/metrics?k=v"
    assert headers["x-api-key"] == "s3cret" and headers["x-org"] == "env-0rg"
    assert headers["content-type"] == "application/x-protobuf"
    request = ExportMetricsServiceRequest.FromString(body)
    (rm,) = request.resource_metrics
    assert {a.key: a.value.string_value for a in rm.resource.attributes}["k8s.pod.name"] == "llama-0"
    names = {m.name for m in rm.scope_metrics[0].metrics}
    assert {
        "DCGM_FI_DEV_GPU_TEMP",
        "trainguard_train_oom_total",
        "trainguard_train_collective_seconds",
    } <= names


def test_an_endpoint_without_the_extra_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from trainguard.exporter import main  # noqa: PLC0415

    monkeypatch.delitem(sys.modules, "trainguard.exporter.otlp")
    monkeypatch.delattr("trainguard.exporter.otlp", raising=False)
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.metric_exporter", None)
    with pytest.raises(SystemExit) as exc:
        main.otlp_module()
    assert "pip install 'trainguard[exporter,otlp]'" in str(exc.value)
    assert "opentelemetry.exporter.otlp.proto.http.metric_exporter" in str(exc.value)


def test_the_command_stops_at_start_without_the_extra() -> None:
    """`trainguard exporter --otlp-endpoint` in a Python where the SDK cannot be imported (blocked in
    sys.modules, as an install without the extra would fail it): exit 1 with the message, before the
    exporter serves anything."""
    code = (
        "import sys; sys.modules['opentelemetry.sdk.metrics.export'] = None\n"
        "from trainguard.cli import main\n"
        "sys.exit(main(['exporter', '--backend', 'simulated', '--no-host', '--listen', '127.0.0.1:0',"
        " '--otlp-endpoint', 'http://127.0.0.1:9/opentelemetry/v1/metrics']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1, done.stderr
    assert "--otlp-endpoint needs the otlp extra" in done.stderr
    assert "pip install 'trainguard[exporter,otlp]'" in done.stderr
    assert "serving /metrics" not in done.stderr
