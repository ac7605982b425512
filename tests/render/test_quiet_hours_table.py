"""The quiet-hours table (day or night, P0..P3, allowlisted or not -> receivers), on the rendered routes.

amtool 0.25 has no clock (`config routes test` has no --time and ignores time intervals), so the
table is tested twice:
- with amtool, the route tree's matchers: every receiver an alert can reach, by day or by night;
- with a real Alertmanager and a notification sink, the time intervals: two jobs whose quiet hours
  are set around the real clock, one in its night (Europe/Berlin, with `location`) and one in its day,
  and a maintenance window under way. Every alert of the table is posted, and the test waits for
  what must arrive and then checks that nothing else did.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import time
import zoneinfo
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import monitor, policy
from tests.processes import alertmanager, http_json
from tests.render.amconfig import routes_test, write_config
from tests.render.notification_sink import Sink, serve
from trainguard.catalog.severity import grade_labels, grade_of
from trainguard.diagnosis.morning import SEVERITY as REPORT_SEVERITY
from trainguard.render import dump_yaml
from trainguard.render.alertmanager import plain_route
from trainguard.render.policy import effective_policy
from trainguard.render.receivers import plain_receivers
from trainguard.render.routing import GROUP_BY, MORNING_REPORT, Names, monitor_route
from trainguard.render.time_intervals import time_intervals

pytestmark = pytest.mark.tools

SEVERITIES = ("P0", "P1", "P2", "P3")
ALLOWLISTED = {"P0": "GPUNodeDown", "P1": "GPUMemoryCritical", "P2": "GPUNodeDown", "P3": "GPUMemoryCritical"}
"""Allowlisted by default; at P2 and P3 as a policy's severity override would post them."""
OTHER = {
    "P0": "TrainingJobStalled",
    "P1": "GPUThermalThrottling",
    "P2": "DataLoaderSlow",
    "P3": "GPUMemoryHigh",
}

# (severity, allowlisted) -> receivers notified. "operator" is the operator's remediation receiver.
DAY: dict[tuple[str, bool], set[str]] = {
    ("P0", True): {"operator", "phone", "im"},
    ("P0", False): {"operator", "phone", "im"},
    ("P1", True): {"operator", "im"},
    ("P1", False): {"operator", "im"},
    ("P2", True): {"email", "ticket"},
    ("P2", False): {"email", "ticket"},
    ("P3", True): set(),
    ("P3", False): set(),
}
NIGHT: dict[tuple[str, bool], set[str]] = {
    ("P0", True): {"operator", "phone", "im"},
    ("P0", False): {"operator"},
    ("P1", True): {"operator", "phone", "im"},
    ("P1", False): {"operator"},
    ("P2", True): {"phone", "email", "ticket"},
    ("P2", False): {"email", "ticket"},
    ("P3", True): {"phone"},
    ("P3", False): set(),
}

JOB = {"namespace": "ml", "training_job": "llama-pretrain"}
R = "ml/default/"


# ---- amtool: the matchers -------------------------------------------------------------------------

QUIET = {"spec.quietHours": {"enabled": True, "timezone": "Europe/Berlin", "start": "22:00", "end": "07:00"}}


@pytest.mark.parametrize(
    ("severity", "alertname", "expected"),
    [
        # a receiver listed twice has its day route and its night route
        ("P0", ALLOWLISTED["P0"], ["oncall-phone", "oncall-phone", "im+resolved", "im+resolved"]),
        ("P0", OTHER["P0"], ["oncall-phone", "im+resolved"]),
        ("P1", ALLOWLISTED["P1"], ["im", "im", "oncall-phone"]),
        ("P1", OTHER["P1"], ["im"]),
        ("P2", ALLOWLISTED["P2"], ["email", "ticket", "oncall-phone"]),
        ("P2", OTHER["P2"], ["email", "ticket"]),
        ("P3", ALLOWLISTED["P3"], ["oncall-phone"]),
        ("P3", OTHER["P3"], []),
    ],
)
def test_amtool_routes_of_the_table(
    amtool: str, tmp_path: Path, severity: str, alertname: str, expected: list[str]
) -> None:
    config = write_config(tmp_path, **QUIET)
    labels = JOB | grade_labels(severity) | {"alertname": alertname, "node": "gpu-1"}
    routes_test(amtool, config, labels, [R + r for r in expected] or ["trainguard-dashboard"])


def test_amtool_routes_the_morning_report_to_im_and_email_only(amtool: str, tmp_path: Path) -> None:
    config = write_config(tmp_path, **QUIET)
    labels = JOB | {"alertname": MORNING_REPORT, "severity": REPORT_SEVERITY, "night": "2026-05-05T07:00"}
    routes_test(amtool, config, labels, [R + "im", R + "email"])


def test_without_quiet_hours_there_is_no_report_route_and_no_night_route(amtool: str, tmp_path: Path) -> None:
    config = write_config(tmp_path)
    assert MORNING_REPORT not in config.read_text()
    assert "active_time_intervals" not in config.read_text()
    routes_test(
        amtool, config, JOB | grade_labels("P3") | {"alertname": ALLOWLISTED["P3"]}, ["trainguard-dashboard"]
    )


# ---- a real Alertmanager: the time intervals -------------------------------------------------------


BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")


def _hhmm(t: dt.datetime) -> str:
    return t.astimezone(BERLIN).strftime("%H:%M")


def _policy(name: str, sink: Sink, now: dt.datetime, night: bool) -> Any:
    start, end = (now - dt.timedelta(hours=2), now + dt.timedelta(hours=2)) if night else (
        now + dt.timedelta(hours=3), now + dt.timedelta(hours=5))  # fmt: skip
    window = {"name": "now", "nodes": ["gpu-maint"],
              "start": (now - dt.timedelta(hours=1)).isoformat(), "end": (now + dt.timedelta(hours=1)).isoformat()}  # fmt: skip
    hook = {"type": "webhook", "sendResolved": False}
    return policy(
        **{
            "metadata.name": name,
            "spec.receivers": [
                hook | {"name": "oncall-phone", "roles": ["phone", "sms"], "url": sink.receiver_url("phone")},
                hook | {"name": "im", "roles": ["im"], "url": sink.receiver_url("im")},
                hook | {"name": "email", "roles": ["email"], "url": sink.receiver_url("email")},
                hook | {"name": "ticket", "roles": ["ticket"], "url": sink.receiver_url("ticket")},
            ],
            "spec.quietHours": {"enabled": True, "timezone": "Europe/Berlin", "start": _hhmm(start), "end": _hhmm(end)},
            "spec.maintenanceWindows": [window],
            # the table is about routing: inhibition (a job's P0 silences its P1-P3) is tested elsewhere
            "spec.inhibition": {"nodeDown": False, "jobP0": False, "supersede": False},
        }
    )  # fmt: skip


def _fast(route: dict[str, Any]) -> dict[str, Any]:
    """group_wait 1s everywhere, so that the test waits seconds instead of the P3's 5 minutes."""
    out = dict(route)
    if "group_wait" in out:
        out["group_wait"] = "1s"
    if "routes" in out:
        out["routes"] = [_fast(r) for r in out["routes"]]
    return out


def config(sink: Sink, now: dt.datetime) -> dict[str, Any]:
    """Both jobs' routes as monitor_route renders them, with the operator's route (the plain
    alertmanager.yml has none: there a plain webhook to the sink stands in for the operator's TLS one)."""
    names = Names(receiver=lambda r: r.key, interval=lambda n: n, dashboard="dashboard", operator="operator")
    receivers: dict[str, dict[str, Any]] = {
        "dashboard": {"name": "dashboard"},
        "operator": {"name": "operator", "webhook_configs": [{"url": sink.receiver_url("operator"), "send_resolved": False}]},
    }  # fmt: skip
    routes, intervals = [], []
    for job, night in (("night-job", True), ("day-job", False)):
        m = monitor(**{"metadata.name": job, "spec.policyRefs": [{"name": job}]})
        p = effective_policy(m, [_policy(job, sink, now, night)])
        for r in p.receivers:
            for receiver in plain_receivers(r.key, r.receiver):
                receivers.setdefault(receiver["name"], receiver)
        routes.append(_fast(plain_route(monitor_route(m, p, names))))
        intervals += time_intervals(m, p, names.interval, with_location=True)
    return {
        "route": {"receiver": "dashboard", "group_by": list(GROUP_BY), "group_wait": "1s", "routes": routes},
        "receivers": list(receivers.values()),
        "time_intervals": intervals,
    }


Case = tuple[str, str, str, str]
"""(job, alertname, grade, node); the morning report's grade is its severity, it has none."""


def _labels(case: Case) -> dict[str, str]:
    job, alertname, grade, node = case
    labels = {"alertname": alertname, "namespace": "ml", "training_job": job, "node": node}
    if alertname == MORNING_REPORT:
        labels.pop("node")
        return labels | {"severity": grade, "night": "2026-05-05T07:00"}
    return labels | grade_labels(grade)


def expected_table() -> dict[Case, set[str]]:
    out: dict[Case, set[str]] = {}
    for job, table in (("day-job", DAY), ("night-job", NIGHT)):
        for (severity, allowlisted), receivers in table.items():
            alertname = (ALLOWLISTED if allowlisted else OTHER)[severity]
            out[(job, alertname, severity, "gpu-1")] = receivers
    # a maintenance window mutes the node's alerts by day and night, the allowlist too; the operator
    # still gets every P0 and P1
    out[("night-job", "GPUNodeDown", "P0", "gpu-maint")] = {"operator"}
    out[("day-job", "TrainingJobStalled", "P0", "gpu-maint")] = {"operator"}
    out[("day-job", "DataLoaderSlow", "P2", "gpu-maint")] = set()
    # the morning report reaches IM and e-mail by day; at night its route is muted
    out[("day-job", MORNING_REPORT, REPORT_SEVERITY, "")] = {"im", "email"}
    out[("night-job", MORNING_REPORT, REPORT_SEVERITY, "")] = set()
    return out


def test_quiet_hours_table_on_a_real_alertmanager(am_binary: str, amtool: str, tmp_path: Path) -> None:
    expected = expected_table()
    now = dt.datetime.now(dt.UTC)
    with serve() as sink:
        path = tmp_path / "alertmanager.yml"
        path.write_text(dump_yaml(config(sink, now)))
        check = subprocess.run([amtool, "check-config", str(path)],
                               capture_output=True, text=True, check=False)  # fmt: skip
        assert check.returncode == 0, check.stdout + check.stderr
        with alertmanager(am_binary, path, tmp_path) as url:
            http_json(f"{url}/api/v2/alerts", [{"labels": _labels(c)} for c in expected])

            def received() -> dict[Case, set[str]]:
                got: dict[Case, set[str]] = {c: set() for c in expected}
                for receiver, labels in sink.deliveries():
                    d = dict(labels)
                    case = (d["training_job"], d["alertname"], grade_of(d), d.get("node", ""))
                    got.setdefault(case, set()).add(receiver)
                return got

            def complete(_: Sink) -> bool:
                got = received()
                return all(want <= got.get(c, set()) for c, want in expected.items())

            sink.wait(complete, timeout=30)
            time.sleep(3)  # every group flushed after 1s: what has not come by now does not come
    got = received()
    wrong = {
        c: (sorted(want), sorted(got.get(c, set()))) for c, want in expected.items() if got.get(c) != want
    }
    assert not wrong, "\n".join(f"{c}: expected {w}, got {g}" for c, (w, g) in sorted(wrong.items()))
    assert set(got) == set(expected), f"unexpected alerts: {set(got) - set(expected)}"
