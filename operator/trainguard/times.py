"""RFC 3339 times as Kubernetes, Alertmanager and the remediation records write them, and unix seconds
read back from them: one reading everywhere, so a record and an alert agree on when."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})\Z", re.ASCII
)


def rfc3339(ts: float) -> str:
    """Unix seconds as RFC 3339 in UTC, to the millisecond (`2026-01-02T03:04:05.678Z`)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def unix(text: str) -> float:
    """Unix seconds of an RFC 3339 time as `rfc3339` writes it (any offset accepted); 0 when unreadable,
    so a damaged record counts as long finished rather than as a recent one."""
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return 0.0
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def parse_rfc3339(text: str) -> float:
    """Unix seconds from RFC 3339 as Go writes it (up to nanoseconds). Stricter than
    datetime.fromisoformat, which would take a time without a zone as local time."""
    m = _RFC3339.match(text)
    if m is None:
        raise ValueError(f"not RFC 3339: {text!r}")
    date, clock, frac, zone = m.groups()
    zone = "+00:00" if zone in ("Z", "z") else zone
    stamp = datetime.fromisoformat(f"{date}T{clock}{zone}").timestamp()
    return stamp + (int(frac.ljust(9, "0")) / 1e9 if frac else 0.0)
