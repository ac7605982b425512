"""Rendered Alertmanager configuration, checked by the real amtool: it is valid, and every severity
reaches exactly the receivers of docs/architecture.md, "Routing defaults"."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import monitor, policy
from tests.render.amconfig import routes_test, write_config
from trainguard.api.policy import QuietHours
from trainguard.catalog.severity import grade_labels
from trainguard.render.alertmanager import alertmanager_config_spec
from trainguard.render.policy import effective_policy
from trainguard.render.time_intervals import quiet_hours_interval

pytestmark = pytest.mark.tools

R = "ml/default/"


def test_amtool_accepts_the_config(amtool: str, tmp_path: Path) -> None:
    config = write_config(tmp_path)
    result = subprocess.run(
        [amtool, "check-config", str(config)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def amtool_version(amtool: str) -> tuple[int, int]:
    out = subprocess.run([amtool, "--version"], capture_output=True, text=True, check=False)
    match = re.search(r"version (\d+)\.(\d+)", out.stdout + out.stderr)
    assert match, out
    return int(match.group(1)), int(match.group(2))


def test_amtool_accepts_every_receiver_type(amtool: str, tmp_path: Path) -> None:
    secret = {"name": "am-secrets", "key": "k"}
    receivers = [
        {"name": "hook", "type": "webhook", "urlSecretRef": secret, "roles": ["im"]},
        {
            "name": "slack",
            "type": "slack",
            "url": "https://hooks.slack.invalid/x",
            "channel": "#gpu",
            "roles": ["im"],
        },
        {"name": "wecom", "type": "wecom", "corpId": "c", "agentId": "1", "apiSecretSecretRef": secret},
        {"name": "ding", "type": "dingtalk", "url": "http://127.0.0.1:8060/dingtalk/ops/send"},
        {"name": "feishu", "type": "feishu", "url": "http://127.0.0.1:8061/feishu"},
        {"name": "pd", "type": "pagerduty", "routingKeySecretRef": secret, "roles": ["phone"]},
        {
            "name": "mail",
            "type": "email",
            "to": "oncall@example.com",
            "from": "tg@example.com",
            "smarthost": "smtp:25",
        },
    ]
    if amtool_version(amtool) < (0, 28):
        # webhook url_file arrived in Alertmanager 0.26 and wechat api_secret_file later: older
        # versions (Debian 12 ships 0.25) check the rest, and the two are asserted as rendered
        config = write_config(tmp_path, **{"spec.receivers": receivers})
        text = config.read_text()
        assert "url_file: /etc/alertmanager/secrets/am-secrets/k" in text
        assert "api_secret_file: /etc/alertmanager/secrets/am-secrets/k" in text
        receivers = [r for r in receivers if r["name"] not in ("hook", "wecom")]
    config = write_config(tmp_path, **{"spec.receivers": receivers})
    result = subprocess.run(
        [amtool, "check-config", str(config)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


JOB = {"namespace": "ml", "training_job": "llama-pretrain"}


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        (
            JOB | {**grade_labels("P0"), "alertname": "GPUNodeDown", "node": "n1"},
            # IM is told when a page resolves, and of nothing else resolving: its second receiver
            [R + "oncall-phone", R + "im+resolved"],
        ),
        (
            JOB | {**grade_labels("P0"), "alertname": "TrainingLossNonFinite"},
            [R + "oncall-phone", R + "im+resolved"],
        ),
        (JOB | {**grade_labels("P1"), "alertname": "GPUThermalThrottling"}, [R + "im"]),
        (JOB | {**grade_labels("P2"), "alertname": "DataLoaderSlow"}, [R + "email", R + "ticket"]),
        (JOB | {**grade_labels("P3"), "alertname": "GPUMemoryHigh"}, ["trainguard-dashboard"]),
        (
            JOB | {"training_job": "someone-else", **grade_labels("P0"), "alertname": "X"},
            ["trainguard-dashboard"],
        ),
        (
            {"namespace": "other", "training_job": "llama-pretrain", **grade_labels("P0")},
            ["trainguard-dashboard"],
        ),
    ],
)
def test_each_severity_reaches_its_receivers(
    amtool: str, tmp_path: Path, labels: dict[str, str], expected: list[str]
) -> None:
    routes_test(amtool, write_config(tmp_path), labels, expected)


def test_an_explicit_route_replaces_the_default(amtool: str, tmp_path: Path) -> None:
    config = write_config(tmp_path, **{"spec.routes": [{"severity": "P1", "receivers": ["email", "im"]}]})
    routes_test(amtool, config, JOB | grade_labels("P1"), [R + "email", R + "im"])
    routes_test(amtool, config, JOB | grade_labels("P2"), [R + "email", R + "ticket"])


def test_quiet_hours_add_night_routes_with_time_intervals(amtool: str, tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        **{
            "spec.quietHours": {
                "enabled": True,
                "timezone": "Europe/Berlin",
                "start": "22:00",
                "end": "07:00",
            }
        },
    )
    text = config.read_text()
    assert "location: Europe/Berlin" in text
    # by day and by night: amtool ignores time, so both routes of a receiver show
    routes_test(
        amtool,
        config,
        JOB | {**grade_labels("P0"), "alertname": "GPUNodeDown"},
        [R + "oncall-phone"] * 2 + [R + "im+resolved"] * 2,
    )
    # a non-allowlisted P0 has only its day routes: at night it waits for the morning report
    routes_test(
        amtool,
        config,
        JOB | {**grade_labels("P0"), "alertname": "TrainingJobStalled"},
        [R + "oncall-phone", R + "im+resolved"],
    )
    result = subprocess.run(
        [amtool, "check-config", str(config)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_maintenance_window_mutes_the_named_nodes_only(amtool: str, tmp_path: Path) -> None:
    window = {
        "name": "swap-psu",
        "start": "2026-12-01T22:00:00Z",
        "end": "2026-12-02T03:30:00Z",
        "nodes": ["gpu-node-3"],
    }
    config = write_config(tmp_path, **{"spec.maintenanceWindows": [window]})
    result = subprocess.run(
        [amtool, "check-config", str(config)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    text = config.read_text()
    assert "maintenance-swap-psu" in text
    # the window covers two UTC days, as two intervals
    assert "start_time: '22:00'" in text and "end_time: '24:00'" in text
    assert "end_time: 03:30" in text or "end_time: '03:30'" in text
    routes_test(
        amtool, config, JOB | {**grade_labels("P2"), "node": "gpu-node-3"}, [R + "email", R + "ticket"]
    )


def test_matchers_parse_without_the_classic_fallback(amtool: str, tmp_path: Path) -> None:
    """A regex matcher's escaped dot (a maintenance window's node `gpu.4`, an allowlisted alertname)
    is valid to Alertmanager's matchers parser since 0.27, not just to the classic one it falls back
    to with a warning: a bare `\\.` inside the quotes failed here on Alertmanager 0.35, and would fail
    the whole configuration once the fallback goes (utf8-strict-mode)."""
    window = {"name": "psu", "start": "2026-12-01T22:00:00Z", "end": "2026-12-02T03:30:00Z",
              "nodes": ["gpu-3", "gpu.4"]}  # fmt: skip
    config = write_config(tmp_path, **{"spec.maintenanceWindows": [window]})
    if amtool_version(amtool) >= (0, 27):  # older ones have the classic parser only
        strict = subprocess.run(
            [amtool, "--enable-feature=utf8-strict-mode", "check-config", str(config)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert strict.returncode == 0, strict.stdout + strict.stderr
    labels = JOB | {**grade_labels("P2"), "node": "gpu.4"}
    result = subprocess.run(
        [amtool, "config", "routes", "test", f"--config.file={config}", *(f"{k}={v}" for k, v in labels.items())],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0 and "classic matchers parser" not in result.stderr, result.stderr


def test_alertmanager_config_resource_uses_local_names() -> None:
    m = monitor()
    spec = alertmanager_config_spec(m, effective_policy(m, [policy()]), "trainguard-llama-pretrain-receivers")
    assert spec["route"]["matchers"] == [
        {"name": "training_job", "matchType": "=", "value": "llama-pretrain"}
    ]
    assert [r["name"] for r in spec["receivers"]] == [
        "dashboard", "email", "im", "im+resolved", "oncall-phone", "ticket"
    ]  # fmt: skip
    resolved = {r["name"]: r["webhookConfigs"][0]["sendResolved"] for r in spec["receivers"][1:]}
    assert resolved == {
        "email": False,
        "im": False,
        "im+resolved": True,
        "oncall-phone": False,
        "ticket": False,
    }
    p0 = spec["route"]["routes"][0]
    assert p0["groupWait"] == "5s"
    assert [r["receiver"] for r in p0["routes"]] == ["oncall-phone", "im+resolved"]
    assert all(r["continue"] for r in p0["routes"])


@pytest.mark.parametrize(
    ("zone", "start", "end", "days", "expected"),
    [
        # UTC-8: Monday 22:00-07:00 local is Tuesday 06:00-15:00 UTC
        ("America/Los_Angeles", "22:00", "07:00", ["monday"],
         [{"times": [{"start_time": "06:00", "end_time": "15:00"}], "weekdays": ["tuesday"]}]),
        # UTC+8: 23:00-08:00 local is 15:00-24:00 UTC, the same day
        ("Asia/Shanghai", "23:00", "08:00", ["sunday"],
         [{"times": [{"start_time": "15:00", "end_time": "24:00"}], "weekdays": ["sunday"]}]),
        # UTC+1: 22:00-07:00 local is 21:00-06:00 UTC, crossing midnight: the morning is the next day
        ("Europe/Berlin", "22:00", "07:00", ["sunday"],
         [{"times": [{"start_time": "21:00", "end_time": "24:00"}], "weekdays": ["sunday"]},
          {"times": [{"start_time": "00:00", "end_time": "06:00"}], "weekdays": ["monday"]}]),
        # UTC+9: Monday 02:00-05:00 local is Sunday 17:00-20:00 UTC
        ("Asia/Tokyo", "02:00", "05:00", ["monday"],
         [{"times": [{"start_time": "17:00", "end_time": "20:00"}], "weekdays": ["sunday"]}]),
    ],
)  # fmt: skip
def test_quiet_hours_move_to_utc_with_their_weekdays(
    zone: str, start: str, end: str, days: list[str], expected: list[dict[str, object]]
) -> None:
    q = QuietHours(enabled=True, timezone=zone, start=start, end=end, weekdays=days)  # type: ignore[arg-type]
    assert quiet_hours_interval(q, with_location=False) == expected
    with_location = quiet_hours_interval(q, with_location=True)
    assert all(e["location"] == zone for e in with_location), "plain Alertmanager keeps the zone"
