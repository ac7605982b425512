"""Alertmanager time intervals: a policy's quiet hours and maintenance windows."""

from __future__ import annotations

import zoneinfo
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from trainguard.api.monitor import TrainingJobMonitor
from trainguard.api.policy import WEEKDAYS, MaintenanceWindow, QuietHours
from trainguard.render.policy import EffectivePolicy

UTC = zoneinfo.ZoneInfo("UTC")


def quiet_hours_name(monitor: TrainingJobMonitor) -> str:
    return f"{monitor.namespace}/{monitor.name}/quiet-hours"


def window_name(monitor: TrainingJobMonitor, window: MaintenanceWindow) -> str:
    return f"{monitor.namespace}/{monitor.name}/maintenance-{window.name}"


def _times(start: str, end: str) -> list[dict[str, str]]:
    if start < end:
        return [{"start_time": start, "end_time": end}]
    out = [{"start_time": start, "end_time": "24:00"}]
    if end != "00:00":
        out.append({"start_time": "00:00", "end_time": end})
    return out


def standard_offset(zone: zoneinfo.ZoneInfo, year: int = 2026) -> timedelta:
    """The zone's UTC offset outside daylight-saving time: of a January and a July date, the one whose
    dst() is zero, since January is summer in the southern hemisphere. If neither or both are, the
    smaller offset."""
    samples = [datetime(year, 1, 15, 12, tzinfo=zone), datetime(year, 7, 15, 12, tzinfo=zone)]
    offsets = [d.utcoffset() or timedelta() for d in samples]
    standard = [o for o, d in zip(offsets, samples, strict=True) if d.dst() == timedelta()]
    return standard[0] if len(standard) == 1 else min(offsets)


def _shift_day(day: str, by: int) -> str:
    return WEEKDAYS[(WEEKDAYS.index(day) + by) % 7]


def quiet_hours_interval(q: QuietHours, with_location: bool) -> list[dict[str, Any]]:
    """Quiet hours as Alertmanager time intervals. Without `location` (AlertmanagerConfig has none),
    times and weekdays are moved to UTC with the zone's standard offset: an hour off in
    daylight-saving time."""
    start, end, day_shift = q.start, q.end, 0
    if not with_location and q.timezone != "UTC":
        offset = standard_offset(zoneinfo.ZoneInfo(q.timezone))
        shift = -int(offset.total_seconds() // 60)

        def minutes(hhmm: str) -> int:
            h, m = map(int, hhmm.split(":"))
            return h * 60 + m + shift

        def hhmm(total: int) -> str:
            total %= 24 * 60
            return f"{total // 60:02d}:{total % 60:02d}"

        day_shift = minutes(start) // (24 * 60)  # -1, 0 or 1: the UTC day the local evening starts on
        start, end = hhmm(minutes(start)), hhmm(minutes(end))
    days = [_shift_day(d, day_shift) for d in q.weekdays]
    out: list[dict[str, Any]] = []
    times = _times(start, end)
    if days and start > end:
        # the part after midnight belongs to the day after each named day
        out.append({"times": times[:1], "weekdays": days})
        if len(times) > 1:
            out.append({"times": times[1:], "weekdays": [_shift_day(d, 1) for d in days]})
    else:
        entry: dict[str, Any] = {"times": times}
        if days:
            entry["weekdays"] = days
        out.append(entry)
    if with_location and q.timezone != "UTC":
        for e in out:
            e["location"] = q.timezone
    return out


def maintenance_interval(w: MaintenanceWindow) -> list[dict[str, Any]]:
    """An absolute window as one interval a UTC day (Alertmanager has no absolute ranges)."""
    start = w.start.astimezone(UTC)
    end = w.end.astimezone(UTC)
    out = []
    day = start.replace(hour=0, minute=0, second=0, microsecond=0)
    while day < end:
        nxt = day + timedelta(days=1)
        lo = max(start, day)
        hi = min(end, nxt)
        out.append(
            {
                "times": [
                    {
                        "start_time": lo.strftime("%H:%M"),
                        "end_time": "24:00" if hi == nxt else hi.strftime("%H:%M"),
                    }
                ],
                "days_of_month": [str(day.day)],
                "months": [str(day.month)],
                "years": [str(day.year)],
            }
        )
        day = nxt
    return out


def time_intervals(
    monitor: TrainingJobMonitor,
    policy: EffectivePolicy,
    interval_name: Callable[[str], str],
    with_location: bool,
) -> list[dict[str, Any]]:
    """The monitor's named intervals, in alertmanager.yml's (snake_case) shape."""
    out = []
    if policy.quiet_hours.enabled:
        out.append(
            {
                "name": interval_name(quiet_hours_name(monitor)),
                "time_intervals": quiet_hours_interval(policy.quiet_hours, with_location),
            }
        )
    for w in policy.maintenance_windows:
        out.append(
            {"name": interval_name(window_name(monitor, w)), "time_intervals": maintenance_interval(w)}
        )
    return out
