"""Synthetic ALERTS histories for the review's tests: firing samples every evaluation, as Prometheus
writes them."""

from __future__ import annotations

from trainguard.review.history import Series

STEP = 15.0
JOB = {"namespace": "ml", "training_job": "llama-pretrain"}


def firing(start: float, evaluations: int, step: float = STEP) -> list[float]:
    """The sample times of an alert firing at `evaluations` consecutive evaluations from `start`."""
    return [start + step * i for i in range(evaluations)]


def series(alertname: str, runs: list[tuple[float, int]], severity: str = "P2", **labels: str) -> Series:
    """One alert instance firing in `runs` of (start, evaluations)."""
    times = [t for start, n in runs for t in firing(start, n)]
    return Series(JOB | {"alertname": alertname, "severity": severity} | labels, tuple(times))
