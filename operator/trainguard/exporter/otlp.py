"""Optional OTLP metrics export (the `otlp` extra): the exporter's prometheus_client registry pushed
over OTLP/HTTP (protobuf), for shops that run an OTLP store instead of Prometheus.

Why a bridge and not observable instruments. The registry is already the contract: its families carry
the catalogue's names, types, labels and histogram buckets (collectors.py). Observable instruments would
have to be created per family before the first collection (families such as the RoCE counters appear
only once a port is seen), the OpenTelemetry API has no observable histogram at all, and the SDK would
re-aggregate what prometheus_client already aggregated. The Go and Java SDKs answer this with a
Prometheus bridge (a MetricProducer on the reader); the Python SDK has no MetricProducer hook, so this
module is that bridge: it collects the registry each interval, maps each family to OTLP data by a pure
function (to_otlp_metrics), and hands the batch to the SDK's OTLP exporter, which owns the encoding,
retries and headers.

The mapping keeps every name a Prometheus scrape would see, so the catalogue's rules run unchanged on
a store that keeps OTLP names as they are (VictoriaMetrics without -opentelemetry.usePrometheusNaming):
a counter is a cumulative monotonic sum named as its sample (`..._total`), a dcgm-exporter counter
(exposed as a gauge under its own name) is a monotonic sum under that name, a gauge is a gauge, and a
histogram is an explicit-bucket histogram named as its family (the store derives _bucket, _sum and
_count). Every data point keeps all of its Prometheus labels, identity included, so a store that
ignores resource attributes still has the series Prometheus has; the resource repeats the identity in
OpenTelemetry's Kubernetes conventions for OTLP-native tools.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    MetricExporter,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.metrics.export import Metric as OTLPMetric
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric as Family
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from trainguard import __version__
from trainguard.catalog import METRICS_BY_NAME, MetricType

log = logging.getLogger("trainguard.exporter.otlp")

SERVICE_NAME = "trainguard-exporter"
SCOPE = InstrumentationScope("trainguard.exporter", __version__)
_CUMULATIVE = AggregationTemporality.CUMULATIVE
_GAUGE_TYPES = frozenset({"gauge", "unknown", "info", "stateset"})


@dataclass(frozen=True)
class OTLPSettings:
    endpoint: str
    """The full OTLP/HTTP metrics URL, e.g. http://vm:8428/opentelemetry/v1/metrics."""
    interval_s: float = 15.0
    headers: Mapping[str, str] | None = None
    """--otlp-header. The SDK adds OTEL_EXPORTER_OTLP_METRICS_HEADERS (else OTEL_EXPORTER_OTLP_HEADERS)
    to these; a key given here wins."""
    timeout_s: float = 10.0


def identity_resource(identity: Mapping[str, str]) -> Resource:
    """The exporter's identity as OpenTelemetry resource attributes. Resource() and not
    Resource.create(): the SDK's own attributes (telemetry.sdk.*) would become labels on every series
    of a store that promotes resource attributes."""
    attrs = {
        "service.name": SERVICE_NAME,
        "service.version": __version__,
        "k8s.namespace.name": identity.get("namespace", ""),
        "k8s.pod.name": identity.get("pod", ""),
        "k8s.node.name": identity.get("node", ""),
        "trainguard.training_job": identity.get("training_job", ""),
    }
    if attrs["k8s.namespace.name"] and attrs["k8s.pod.name"]:
        attrs["service.instance.id"] = f"{attrs['k8s.namespace.name']}/{attrs['k8s.pod.name']}"
    return Resource({k: v for k, v in attrs.items() if v})


def _is_catalogue_counter(name: str) -> bool:
    m = METRICS_BY_NAME.get(name)
    return m is not None and m.type == MetricType.COUNTER


def _attributes(labels: Mapping[str, str]) -> dict[str, str]:
    """A sample's labels as attributes, an empty one left out: Prometheus stores an empty label as no
    label, and so should every store behind OTLP."""
    return {k: v for k, v in labels.items() if v != ""}


def _point(sample: Sample, start_ns: int, now_ns: int) -> NumberDataPoint:
    return NumberDataPoint(attributes=_attributes(sample.labels), start_time_unix_nano=start_ns,
                           time_unix_nano=now_ns, value=float(sample.value))  # fmt: skip


def _counter(fam: Family, start_ns: int, now_ns: int) -> list[OTLPMetric]:
    """A prometheus_client counter: its `_total` samples, under that name, started at `_created` when
    the family has one."""
    created = {_key(s.labels): s.value for s in fam.samples if s.name == fam.name + "_created"}
    points = [
        _point(s, int(created[_key(s.labels)] * 1e9) if _key(s.labels) in created else start_ns, now_ns)
        for s in fam.samples
        if s.name == fam.name + "_total"
    ]
    data = Sum(data_points=points, aggregation_temporality=_CUMULATIVE, is_monotonic=True)
    return [OTLPMetric(name=fam.name + "_total", description=fam.documentation, unit="", data=data)]


def _key(labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


@dataclass
class _HistogramSeries:
    labels: dict[str, str]
    cumulative: dict[float, float] = field(default_factory=dict)
    """le -> the cumulative count of that bucket, +Inf included."""
    sum: float = 0.0
    count: float = 0.0


def _histogram(fam: Family, start_ns: int, now_ns: int) -> list[OTLPMetric]:
    """Cumulative `le` buckets back into OTLP's per-bucket counts; +Inf is the last, implicit bound."""
    series: dict[tuple[tuple[str, str], ...], _HistogramSeries] = {}
    for s in fam.samples:
        labels = _attributes({k: v for k, v in s.labels.items() if k != "le"})
        entry = series.setdefault(_key(labels), _HistogramSeries(labels))
        if s.name == fam.name + "_bucket":
            entry.cumulative[float(s.labels["le"])] = s.value
        elif s.name == fam.name + "_sum":
            entry.sum = s.value
        elif s.name == fam.name + "_count":
            entry.count = s.value
    points = []
    for h in series.values():
        bounds = sorted(b for b in h.cumulative if b != math.inf)
        upto = [h.cumulative[b] for b in bounds]
        total = h.cumulative.get(math.inf, h.count)
        per_bucket = [round(c - p) for c, p in zip([*upto, total], [0.0, *upto], strict=True)]
        points.append(
            HistogramDataPoint(
                attributes=h.labels,
                start_time_unix_nano=start_ns,
                time_unix_nano=now_ns,
                count=round(total),
                sum=h.sum,
                bucket_counts=per_bucket,
                explicit_bounds=bounds,
                # unknown to a Prometheus histogram; None leaves the optional fields unset on the wire
                min=None,  # type: ignore[arg-type]
                max=None,  # type: ignore[arg-type]
            )
        )
    data = Histogram(data_points=points, aggregation_temporality=_CUMULATIVE)
    return [OTLPMetric(name=fam.name, description=fam.documentation, unit="", data=data)]


def _gauges(fam: Family, start_ns: int, now_ns: int) -> list[OTLPMetric]:
    """One OTLP metric per sample name (an info family's sample is `<name>_info`); a catalogue counter
    exposed as a gauge, as dcgm-exporter exposes its counters, is a monotonic sum under its own name."""
    by_name: dict[str, list[NumberDataPoint]] = {}
    for s in fam.samples:
        by_name.setdefault(s.name, []).append(_point(s, start_ns, now_ns))
    out = []
    for name, points in by_name.items():
        data: Sum | Gauge
        if _is_catalogue_counter(name):
            data = Sum(data_points=points, aggregation_temporality=_CUMULATIVE, is_monotonic=True)
        else:
            data = Gauge(data_points=points)
        out.append(OTLPMetric(name=name, description=fam.documentation, unit="", data=data))
    return out


def to_otlp_metrics(families: Iterable[Family], start_ns: int, now_ns: int) -> list[OTLPMetric]:
    """prometheus_client families as OTLP metrics named as a Prometheus scrape names them.

    start_ns is the start of every cumulative series without a `_created` sample (the exporter's
    start: its counters count from there). Summaries and gauge histograms are left out: no family of
    the catalogue is one."""
    out: list[OTLPMetric] = []
    skipped: list[str] = []
    for fam in families:
        if fam.type == "counter":
            out += _counter(fam, start_ns, now_ns)
        elif fam.type == "histogram":
            out += _histogram(fam, start_ns, now_ns)
        elif fam.type in _GAUGE_TYPES:
            out += _gauges(fam, start_ns, now_ns)
        else:
            skipped.append(f"{fam.name} ({fam.type})")
    if skipped:
        log.debug("not exported over OTLP: %s", ", ".join(skipped))
    return [m for m in out if m.data.data_points]


def metrics_data(families: Iterable[Family], resource: Resource, start_ns: int, now_ns: int) -> MetricsData:
    scope = ScopeMetrics(scope=SCOPE, metrics=to_otlp_metrics(families, start_ns, now_ns), schema_url="")
    return MetricsData(
        resource_metrics=[ResourceMetrics(resource=resource, scope_metrics=[scope], schema_url="")]
    )


class OTLPPusher:
    """Pushes the registry every interval from its own thread; a failed push is logged and retried at
    the next interval with fresh values (cumulative data loses nothing in between)."""

    def __init__(
        self,
        registry: CollectorRegistry | Collector,
        exporter: MetricExporter,
        resource: Resource,
        interval_s: float,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.registry = registry
        self.exporter = exporter
        self.resource = resource
        self.interval_s = interval_s
        self.clock_ns = clock_ns
        self.start_ns = clock_ns()
        self.pushes = 0
        self.failures = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def push(self) -> bool:
        try:
            data = metrics_data(self.registry.collect(), self.resource, self.start_ns, self.clock_ns())
            ok = self.exporter.export(data, timeout_millis=max(1000.0, self.interval_s * 1000)) == (
                MetricExportResult.SUCCESS
            )
        except Exception:
            log.exception("OTLP export failed")
            ok = False
        if ok:
            self.pushes += 1
        else:
            self.failures += 1
            log.warning(
                "OTLP export failed (%d so far); the next push is in %gs", self.failures, self.interval_s
            )
        return ok

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.push()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="otlp-push", daemon=True)
        self._thread.start()

    def stop(self, final_push: bool = True) -> None:
        """One last push (unless told not to), so a finished job's final values reach the store; then
        shut the exporter."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.interval_s + 15)
        if final_push:
            self.push()
        self.exporter.shutdown()


def start_pusher(
    registry: CollectorRegistry, identity: Mapping[str, str], settings: OTLPSettings
) -> OTLPPusher:
    """The exporter's wiring: an OTLP/HTTP exporter to settings.endpoint, pushing every interval."""
    exporter = OTLPMetricExporter(
        endpoint=settings.endpoint, headers=dict(settings.headers) if settings.headers else None,
        timeout=settings.timeout_s,
    )  # fmt: skip
    pusher = OTLPPusher(registry, exporter, identity_resource(identity), settings.interval_s)
    pusher.start()
    return pusher
