"""What the correlation rules read and what they return: series and events around an alert in, findings
with a cause, a confidence and their evidence out. Plain frozen data, so the rules stay pure and the
tests build snapshots by hand or from the seeded trace generator."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

Labels = tuple[tuple[str, str], ...]
"""A series' labels as sorted (name, value) pairs: hashable, unlike a dict."""


def labels_of(mapping: dict[str, str]) -> Labels:
    return tuple(sorted(mapping.items()))


@dataclass(frozen=True)
class Series:
    """One Prometheus series over the snapshot's time range: (unix seconds, value) points, ascending."""

    metric: str
    labels: Labels
    points: tuple[tuple[float, float], ...]

    def label(self, name: str, default: str = "") -> str:
        for key, value in self.labels:
            if key == name:
                return value
        return default

    def values(self, start: float, end: float) -> list[float]:
        """The values of the points with start <= t <= end."""
        return [v for t, v in self.points if start <= t <= end]


@dataclass(frozen=True)
class JobEvent:
    """Something that happened to the job outside the series: a pod that failed or was OOM-killed, a
    restart, a hung collective in the logs. `fault` marks what counts as a job fault for the hardware
    rule (a hardware signal alone, with the job training on, is not this job's cause)."""

    at: float
    reason: str
    pod: str = ""
    node: str = ""
    message: str = ""
    fault: bool = True


@dataclass(frozen=True)
class Spans:
    """Where the rules look, in seconds relative to the alert's time: the baseline is the job before
    the trouble (it ends well before the alert, as the catalogue's recording rules offset theirs), the
    recent span is what the alert is judging, and the hardware rule accepts signals and job faults
    anywhere from `related_from` before the alert to `after` past it."""

    baseline_from: float = 1800.0
    baseline_to: float = 900.0
    recent: float = 120.0
    related_from: float = 900.0
    after: float = 150.0


@dataclass(frozen=True)
class Snapshot:
    """The series (and events) of one job around one alert, as the edge fetched them."""

    at: float
    series: tuple[Series, ...]
    events: tuple[JobEvent, ...] = ()
    alert: str = ""
    spans: Spans = field(default_factory=Spans)

    def of(self, metric: str) -> list[Series]:
        return [s for s in self.series if s.metric == metric]

    @property
    def baseline(self) -> tuple[float, float]:
        return (self.at - self.spans.baseline_from, self.at - self.spans.baseline_to)

    @property
    def recent(self) -> tuple[float, float]:
        return (self.at - self.spans.recent, self.at)

    @property
    def related(self) -> tuple[float, float]:
        return (self.at - self.spans.related_from, self.at + self.spans.after)

    def pooled(self, metric: str, span: tuple[float, float]) -> list[float]:
        """Every value of every series of `metric` in the span: the job as a whole."""
        return [v for s in self.of(metric) for v in s.values(*span)]


class Cause(StrEnum):
    """The probable causes the rules name. The throughput drop is split by where the step time went."""

    DATA_PIPELINE = "data-pipeline"
    MODEL_HYPERPARAMETERS = "model-hyperparameters"
    THROUGHPUT_DATA = "throughput-data-loading"
    THROUGHPUT_COMMUNICATION = "throughput-communication"
    THROUGHPUT_GPU = "throughput-gpu"
    THROUGHPUT_HOST = "throughput-host"
    HARDWARE = "hardware"
    STRAGGLER = "straggler"


@dataclass(frozen=True)
class Evidence:
    """One supporting fact: a series (metric and the labels that pick it), its value in the span the
    rule judged and, where the rule compared, the reference it was compared with."""

    metric: str
    value: float
    reference: float | None = None
    labels: Labels = ()
    note: str = ""

    def describe(self) -> str:
        where = ",".join(f'{k}="{v}"' for k, v in self.labels)
        text = (
            f"{self.metric}{{{where}}} = {_fmt(self.value)}"
            if where
            else f"{self.metric} = {_fmt(self.value)}"
        )
        if self.reference is not None:
            text += f" (reference {_fmt(self.reference)})"
        return f"{text}: {self.note}" if self.note else text


@dataclass(frozen=True)
class Finding:
    """A probable cause with how sure the rule is (0..1), a sentence a person reads, and its evidence.
    `node`, `gpu` and `pod` name where it is when the rule can say (hardware, straggler)."""

    cause: Cause
    confidence: float
    summary: str
    evidence: tuple[Evidence, ...]
    node: str = ""
    gpu: str = ""
    pod: str = ""
    share: float | None = None
    """For a throughput drop: this component's share of the lost step time."""


def _fmt(value: float) -> str:
    if value == 0 or 1e-3 <= abs(value) < 1e6:
        return f"{value:.4g}"
    return f"{value:.3e}"


def strongest_first(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (-f.confidence, f.cause.value, f.node, f.pod, f.gpu))
