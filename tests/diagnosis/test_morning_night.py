"""Which night a morning report covers and when it is due: in the policy's time zone, with weekdays,
across midnight or not, over a daylight-saving change, once per night, within its grace."""

from __future__ import annotations

import datetime as dt
import zoneinfo
from typing import Any

import pytest

from trainguard.api.policy import QuietHours
from trainguard.diagnosis.morning import GRACE_S, due, last_night, next_night_start

BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")


def at(text: str, zone: zoneinfo.ZoneInfo = BERLIN) -> float:
    return dt.datetime.fromisoformat(text).replace(tzinfo=zone).timestamp()


def quiet(**changes: Any) -> QuietHours:
    return QuietHours.model_validate(
        {"enabled": True, "timezone": "Europe/Berlin", "start": "22:00", "end": "07:00"} | changes
    )


def test_the_night_that_ended_this_morning() -> None:
    night = last_night(quiet(), at("2026-05-05T07:30"))
    assert night is not None
    assert (night.start, night.end) == (
        dt.datetime(2026, 5, 4, 22, 0, tzinfo=BERLIN),
        dt.datetime(2026, 5, 5, 7, 0, tzinfo=BERLIN),
    )
    assert night.key == "2026-05-05T07:00"


def test_at_night_the_last_night_is_the_one_before() -> None:
    night = last_night(quiet(), at("2026-05-05T06:59"))
    assert night is not None and night.key == "2026-05-04T07:00"


def test_a_report_is_due_once_the_quiet_hours_end_and_until_the_grace_is_over() -> None:
    q = quiet()
    assert due(q, at("2026-05-05T06:59"), None) is None, "last night's is past its grace"
    night = due(q, at("2026-05-05T07:00"), None)
    assert night is not None and night.key == "2026-05-05T07:00"
    assert due(q, at("2026-05-05T07:00") + GRACE_S, None) is not None
    assert due(q, at("2026-05-05T07:00") + GRACE_S + 1, None) is None


def test_a_night_reported_already_is_not_due_again() -> None:
    assert due(quiet(), at("2026-05-05T07:05"), "2026-05-05T07:00") is None
    assert due(quiet(), at("2026-05-05T07:05"), "2026-05-04T07:00") is not None, "yesterday's marker"


def test_no_quiet_hours_no_report() -> None:
    assert due(quiet(enabled=False), at("2026-05-05T07:05"), None) is None


def test_weekdays_are_the_days_the_night_starts_on() -> None:
    q = quiet(weekdays=["friday"])
    # Friday 2026-05-08 22:00 to Saturday 07:00
    night = due(q, at("2026-05-09T07:10"), None)
    assert night is not None and night.start.weekday() == 4
    assert due(q, at("2026-05-10T07:10"), None) is None, "no quiet hours start on Saturday"


def test_quiet_hours_within_one_day() -> None:
    night = due(quiet(start="12:00", end="14:00"), at("2026-05-05T14:01"), None)
    assert night is not None
    assert night.start == dt.datetime(2026, 5, 5, 12, 0, tzinfo=BERLIN)


def test_a_daylight_saving_night_is_an_hour_shorter_in_real_time() -> None:
    # Berlin moves its clocks from 02:00 to 03:00 on 2026-03-29
    night = last_night(quiet(), at("2026-03-29T07:30"))
    assert night is not None
    assert night.end.timestamp() - night.start.timestamp() == 8 * 3600


def test_the_report_lasts_until_the_next_night_starts() -> None:
    assert next_night_start(quiet(), at("2026-05-05T07:30")) == at("2026-05-05T22:00")
    assert next_night_start(quiet(weekdays=["friday"]), at("2026-05-05T07:30")) == at("2026-05-08T22:00")


@pytest.mark.parametrize("zone", ["UTC", "Asia/Shanghai", "America/Los_Angeles", "Australia/Sydney"])
def test_every_zone_has_its_nights_in_local_time(zone: str) -> None:
    z = zoneinfo.ZoneInfo(zone)
    q = quiet(timezone=zone, start="23:00", end="08:00")
    night = due(q, at("2026-07-01T08:15", z), None)
    assert night is not None
    assert night.start == dt.datetime(2026, 6, 30, 23, 0, tzinfo=z)
    assert night.end == dt.datetime(2026, 7, 1, 8, 0, tzinfo=z)
