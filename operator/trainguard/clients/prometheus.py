"""Prometheus's query API, through prometheus-api-client: one way to make the client, with a timeout
on every query. Each reader names the queries it makes as a Protocol of its own."""

from __future__ import annotations

from typing import Any

from prometheus_api_client import PrometheusConnect
from urllib3.util.retry import Retry


def prometheus_client(url: str, timeout: int = 10, *, retries: int | None = None) -> Any:
    """PrometheusConnect with `timeout` seconds per query. `retries` bounds its retrying: its default
    retries a refused connection for seconds before a command could say so."""
    retry = (
        None
        if retries is None
        else Retry(total=retries, backoff_factor=0.2, status_forcelist=[502, 503, 504])
    )
    return PrometheusConnect(url=url, disable_ssl=False, timeout=timeout, retry=retry)
