"""Log excerpts for the report: the pod log lines within +-30 s of the alert, error patterns marked."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

WINDOW_S = 30.0

PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("oom", re.compile(r"out of memory|CUDA_ERROR_OUT_OF_MEMORY|OutOfMemoryError|OOMKilled", re.I)),
    ("nccl-timeout", re.compile(r"NCCL.*(timeout|timed out|watchdog)|Watchdog caught collective", re.I)),
    ("cuda-error", re.compile(r"CUDA error|cudaError|CUBLAS_STATUS|illegal memory access|Xid", re.I)),
    (
        "nccl-error",
        re.compile(r"NCCL (WARN|error)|ncclInternalError|ncclSystemError|ncclUnhandledCudaError", re.I),
    ),
    ("traceback", re.compile(r"^Traceback \(most recent call last\)|^\w+(Error|Exception):", re.I)),
)
"""What a person looks for first, most specific first: the first that matches names the line's kind."""


@dataclass(frozen=True)
class LogLine:
    at: float
    pod: str
    text: str
    container: str = ""

    @property
    def kind(self) -> str:
        return classify(self.text)


def classify(text: str) -> str:
    for name, pattern in PATTERNS:
        if pattern.search(text):
            return name
    return ""


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d))\s?(.*)$")


def parse_timestamped(pod: str, text: str, container: str = "") -> list[LogLine]:
    """Lines as the Kubernetes API returns them with timestamps=true (`<RFC 3339 nano> <line>`). A line
    without a timestamp (a continuation) takes its predecessor's time, so a traceback stays whole."""
    lines: list[LogLine] = []
    last = 0.0
    for raw in text.splitlines():
        m = _STAMP.match(raw)
        if m:
            stamp = m.group(1)
            head, _, frac = stamp.rstrip("Z").partition(".")
            zone = "+00:00" if stamp.endswith("Z") else ""
            if not stamp.endswith("Z"):
                frac, zone = frac[:-6], frac[-6:]
            last = datetime.fromisoformat(head + zone).timestamp() + (float("0." + frac) if frac else 0.0)
            body = m.group(2)
        else:
            body = raw
        lines.append(LogLine(last, pod, body, container))
    return lines


def excerpt(lines: Iterable[LogLine], at: float, window: float = WINDOW_S, limit: int = 200) -> list[LogLine]:
    """The lines within +-window of `at`, in time order; past `limit`, the marked lines are kept first."""
    near = sorted((ln for ln in lines if at - window <= ln.at <= at + window), key=lambda ln: (ln.at, ln.pod))
    if len(near) <= limit:
        return near
    marked = [ln for ln in near if ln.kind]
    rest = [ln for ln in near if not ln.kind][: max(0, limit - len(marked))]
    return sorted(marked[:limit] + rest, key=lambda ln: (ln.at, ln.pod))
