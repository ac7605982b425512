"""Quiet hours in an AlertmanagerConfig, which has no time zone, are moved to UTC with the zone's standard
(winter) offset, in the southern hemisphere too, where January is summer."""

from __future__ import annotations

import subprocess
import zoneinfo
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import monitor, policy
from tests.render.amconfig import write_config
from trainguard.render.alertmanager import alertmanager_config_spec
from trainguard.render.policy import effective_policy
from trainguard.render.time_intervals import standard_offset


def quiet_hours(**changes: Any) -> dict[str, Any]:
    return {"enabled": True, "start": "22:00", "end": "07:00"} | changes


def amc_quiet_hours(**changes: Any) -> list[dict[str, Any]]:
    m = monitor()
    p = effective_policy(m, [policy(**{"spec.quietHours": quiet_hours(**changes)})])
    spec = alertmanager_config_spec(m, p, "trainguard-llama-pretrain-receivers")
    (interval,) = [i for i in spec["muteTimeIntervals"] if i["name"] == "quiet-hours"]
    intervals: list[dict[str, Any]] = interval["timeIntervals"]
    return intervals


def test_sydney_nights_use_its_standard_offset_not_january_summer_time() -> None:
    # AEST is UTC+10; January is AEDT (UTC+11), which would give 11:00-20:00
    assert amc_quiet_hours(timezone="Australia/Sydney") == [
        {"times": [{"startTime": "12:00", "endTime": "21:00"}]}
    ]


@pytest.mark.parametrize(
    ("zone", "expected"),
    [
        ("Europe/Berlin", [{"startTime": "21:00", "endTime": "24:00"}, {"startTime": "00:00", "endTime": "06:00"}]),
        ("Asia/Shanghai", [{"startTime": "14:00", "endTime": "23:00"}]),
        ("America/Los_Angeles", [{"startTime": "06:00", "endTime": "15:00"}]),
    ],
)  # fmt: skip
def test_northern_and_dst_free_zones_are_unchanged(zone: str, expected: list[dict[str, str]]) -> None:
    assert amc_quiet_hours(timezone=zone) == [{"times": expected}]


def test_weekdays_move_back_a_day_when_the_utc_start_is_before_midnight() -> None:
    # Monday 06:00-09:00 in Sydney (UTC+10) is Sunday 20:00-23:00 UTC
    assert amc_quiet_hours(timezone="Australia/Sydney", start="06:00", end="09:00", weekdays=["monday"]) == [
        {"times": [{"startTime": "20:00", "endTime": "23:00"}], "weekdays": ["sunday"]}
    ]


def test_weekdays_stay_when_the_utc_night_starts_the_same_day() -> None:
    # Friday 23:00-08:00 in Shanghai (UTC+8) is Friday 15:00-24:00 UTC
    assert amc_quiet_hours(timezone="Asia/Shanghai", start="23:00", end="08:00", weekdays=["friday"]) == [
        {"times": [{"startTime": "15:00", "endTime": "24:00"}], "weekdays": ["friday"]}
    ]


@pytest.mark.parametrize(
    ("zone", "hours"),
    [
        ("Australia/Sydney", 10),
        ("Australia/Lord_Howe", 10.5),
        ("America/Santiago", -4),
        ("Europe/Berlin", 1),
        ("America/New_York", -5),
        ("Asia/Shanghai", 8),
        ("Antarctica/Troll", 0),
    ],
)
def test_standard_offset_is_the_one_without_daylight_saving(zone: str, hours: float) -> None:
    assert standard_offset(zoneinfo.ZoneInfo(zone)) == timedelta(hours=hours)


@pytest.mark.tools
def test_amtool_accepts_southern_quiet_hours_with_weekdays(amtool: str, tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        **{"spec.quietHours": quiet_hours(timezone="Australia/Sydney", weekdays=["friday", "saturday"])},
    )
    text = config.read_text()
    assert "location: Australia/Sydney" in text, "a plain Alertmanager keeps the zone"
    result = subprocess.run(
        [amtool, "check-config", str(config)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
