"""The edge to Prometheus: the raw firing samples of `ALERTS` over the review's range, in chunks, with
prometheus-api-client; and the alerting rules Prometheus has loaded (`/api/v1/rules`), when it says."""

from __future__ import annotations

import itertools
import json
import math
import urllib.request
from collections.abc import Callable
from typing import Any, Protocol

from trainguard.clients import prometheus as clients
from trainguard.review.history import Series, merge, parse_matrix

SELECTOR = 'ALERTS{alertstate="firing"}'
CHUNK_S = 86400.0
"""One query per day of history: at a 15 s interval, 5,760 samples per firing series and query."""


class PrometheusQuery(Protocol):
    """What the review needs of prometheus_api_client.PrometheusConnect."""

    def custom_query(self, query: str, params: dict[str, Any] | None = None) -> Any: ...


class Unreachable(RuntimeError):
    """Prometheus did not answer, or refused a query; the message says which and why."""


def prometheus_client(url: str, timeout: int = 60) -> PrometheusQuery:
    """The query client with one retry: a refused connection is said at once, not after seconds."""
    client: PrometheusQuery = clients.prometheus_client(url, timeout, retries=1)
    return client


def chunks(start: float, end: float, size: float = CHUNK_S) -> list[tuple[float, float]]:
    """[start, end] cut into consecutive spans of at most `size` seconds."""
    n = max(1, math.ceil((end - start) / size))
    edges = [start + (end - start) * i / n for i in range(n + 1)]
    return list(itertools.pairwise(edges))


def firing_history(
    prom: PrometheusQuery,
    start: float,
    end: float,
    chunk_s: float = CHUNK_S,
    progress: Callable[[int, int, int], None] | None = None,
) -> list[Series]:
    """Every ALERTS series' firing samples in [start, end], one range-vector query per chunk.
    `progress(done, total, samples)` is called after each chunk."""
    spans = chunks(start, end, chunk_s)
    answers = []
    samples = 0
    for i, (a, b) in enumerate(spans, 1):
        seconds = max(1, math.ceil(b - a))
        try:
            result = prom.custom_query(f"{SELECTOR}[{seconds}s]", params={"time": f"{b:.3f}"})
        except Exception as exc:
            raise Unreachable(f"the query of ALERTS up to {b:.0f} failed: {exc}") from exc
        got = parse_matrix(result)
        samples += sum(len(s.timestamps) for s in got)
        answers.append(got)
        if progress:
            progress(i, len(spans), samples)
    return merge(answers)


def check(prom: PrometheusQuery) -> None:
    """One trivial query, so that an unreachable Prometheus is reported before any work."""
    try:
        prom.custom_query("vector(1)")
    except Exception as exc:
        raise Unreachable(str(exc)) from exc


def loaded_rules(url: str, timeout: float = 10.0) -> list[str]:
    """The names of the alerting rules Prometheus has loaded; raises OSError or ValueError when it
    does not say."""
    with urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/rules?type=alert", timeout=timeout) as resp:
        body = json.loads(resp.read())
    if body.get("status") != "success":
        raise ValueError(f"/api/v1/rules answered {body.get('status')!r}")
    names = {
        str(rule["name"])
        for group in body["data"]["groups"]
        for rule in group.get("rules", [])
        if rule.get("type") == "alerting"
    }
    return sorted(names)
