"""Prometheus' text exposition read back, always with prometheus_client's own parser: scraped from a
/metrics endpoint over HTTP, or rendered in this process."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterable

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

Samples = dict[str, list[tuple[dict[str, str], float]]]
"""Sample name (with its _total, _count, _bucket, ... suffix) -> each sample's labels and value."""


def samples_of(families: Iterable[Metric]) -> Samples:
    out: Samples = {}
    for fam in families:
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def parse(text: str) -> Samples:
    return samples_of(text_string_to_metric_families(text))


def metric_families(url: str, timeout: float = 5.0) -> dict[str, Metric]:
    """GET {url}/metrics, which must answer 200 with the text exposition: family name -> family."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=timeout) as resp:
        assert resp.status == 200, resp.status
        assert resp.headers.get_content_type() == "text/plain", resp.headers.get("Content-Type")
        text = resp.read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def scrape(url: str, timeout: float = 5.0) -> Samples:
    """GET {url}/metrics: sample name -> (labels, value)."""
    return samples_of(metric_families(url, timeout).values())


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The first sample of `name` whose labels include `labels`; None if there is none."""
    for got, v in samples.get(name, []):
        if all(got.get(k) == want for k, want in labels.items()):
            return v
    return None
