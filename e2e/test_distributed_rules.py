"""The catalogue's rules on Thanos (docs/distributed.md): 3 Receive nodes in one hashring with replication
factor 2, a Query over them, a Ruler evaluating the operator's rendered rules through that Query and the
real Alertmanager. Must-fire cases of tests/render/alert_cases.py are remote-written as samples with real
timestamps, to Thanos and, as the reference, to a single Prometheus with the same rule file; one receiver
is killed mid-run. Every case must reach Alertmanager with the labels promtool expects, within one
evaluation interval of when that Prometheus fires it, and Query must show it in ALERTS.

The subset (CHOSEN): cases that fire within about 90 s of real time (a `for` of 1m at most, onsets at
most 3 minutes into the case, two of those minutes written at once as history), one per metric so that
they do not disturb each other, covering the P0s the operator acts on, counters read through
`increase` across the receiver's loss, joins (memory used and free; up and the node's Ready condition)
and each `for` (0s, 10s, 1m). The baseline alerts (a warm-up of 1000 steps and hours of history) and
`for` of 5m and more are left to promtool (tests/render/test_alert_rules.py): they would add minutes of
waiting and test the same path."""

from __future__ import annotations

import datetime as dt
import math
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from e2e.remote_write import Sample, post, samples
from e2e.thanos import TENANT_LABEL, Thanos, thanos_binary, thanos_stack
from tests.conftest import monitor, policy
from tests.processes import alertmanager, free_port, http_json, start, stop, wait_for, wait_http
from tests.render.alert_cases import CASES, Case
from tests.render.test_alert_rules import publisher_input
from tests.toolchains import find_tool
from trainguard.api.common import duration_seconds
from trainguard.render import dump_yaml
from trainguard.render.kubernetes import prometheus_rule, shared_prometheus_rule
from trainguard.render.policy import effective_policy
from trainguard.render.shared import SHARED

pytestmark = pytest.mark.e2e

CHOSEN: tuple[tuple[str, str], ...] = (
    ("TrainingLossNonFinite", "counter went up by one"),
    ("GPUDoubleBitECCError", "DBE counter increased"),
    ("GPUCriticalXid", "XID 79: fallen off the bus"),
    ("GPUNodeDown", "Node NotReady"),
    ("GPUMemoryCritical", "exactly 95% used (boundary, >=)"),
    ("GPUThermalThrottling", "86 C for 5 minutes"),
    ("NetworkPacketLossHigh", "0.2% loss"),
)
HISTORY_S = 120
"""The first two minutes of every case are written at once, as history: the rest as their time comes."""
RUN_S = 240
"""How long the cases play at most (every one fires within about 90 s)."""


def chosen() -> list[tuple[str, Case]]:
    out = []
    for name, why in CHOSEN:
        found = [c for c in CASES[name] if c.why == why and c.fires and not c.monitor]
        assert len(found) == 1, f"{name}: no single must-fire case {why!r} on the default monitor"
        out.append((name, found[0]))
    return out


def rule_file(form: str) -> dict[str, Any]:
    """The groups of the PrometheusRules the operator applies for the test monitor (render/kubernetes.py),
    as a ThanosRuler gets them: the monitor's own (its alerting and long-term groups), and in the shared
    form the shared one, which holds the catalogue's alerts."""
    m = monitor()
    p = effective_policy(m, [policy()])
    own = prometheus_rule(m, p, rule_form=form)["spec"]["groups"]
    shared = shared_prometheus_rule("trainguard")["spec"]["groups"] if form == SHARED else []
    return {"groups": [*shared, *own]}


def timing(rules: dict[str, Any], alertname: str) -> tuple[float, float]:
    """The alert's `for` and its group's evaluation interval, in seconds."""
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == alertname:
                return duration_seconds(rule.get("for", "0s")), duration_seconds(group["interval"])
    raise AssertionError(f"{alertname} is not in the rule file")


def played(form: str, origin_ms: int) -> list[Sample]:
    """Every chosen case's input (and on the shared form what the operator publishes for the monitor),
    its first sample at `origin_ms`."""
    out: list[Sample] = []
    for _, case in chosen():
        step = int(duration_seconds(case.interval) * 1000)
        for s in case.input:
            out += samples(s["series"], s["values"], origin_ms, step)
    if form == "shared":
        n = (HISTORY_S + RUN_S) // 15
        for s in publisher_input({}, n):
            out += samples(s["series"], s["values"], origin_ms, 15_000)
    return sorted(out, key=lambda s: s.timestamp_ms)


def parse_time(text: str) -> float:
    """RFC 3339 as Prometheus and Alertmanager write it (nanoseconds, Z), in seconds since the epoch."""
    m = re.match(r"^(.*?T\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$", text)
    assert m is not None, f"not a timestamp: {text}"
    base = dt.datetime.fromisoformat(m[1] + ("+00:00" if m[3] == "Z" else m[3]))
    return base.timestamp() + (float("0." + m[2]) if m[2] else 0.0)


class Writer:
    """Remote-writes samples as their time comes: to a live receiver (the next one when a receiver fails,
    as a load balancer in front of them would) and to the reference Prometheus."""

    def __init__(self, thanos: Thanos, prometheus: str, pending: list[Sample]) -> None:
        self.thanos, self.prometheus, self.pending = thanos, prometheus, pending
        self.next = 0
        self.lag_s = 0.0
        self.failovers = 0

    def _to_thanos(self, batch: list[Sample]) -> None:
        """As Prometheus's remote write does, retried on 5xx (a receiver opens its tenant's TSDB on the
        first write and answers `TSDB not ready` until then) for up to 30 s."""
        n = len(self.thanos.receivers)
        errors: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for i in range(n):
                r = self.thanos.receivers[(self.next + i) % n]
                try:
                    post(r.write_url, batch)
                except urllib.error.HTTPError as exc:
                    # 409, out of order: a retry of samples stored before; Prometheus drops such a batch
                    if exc.code == 409:
                        return
                    self.failovers += 1
                    errors.append(f"{r.name}: {exc}: {exc.read()!r}")
                    continue
                except OSError as exc:  # refused
                    self.failovers += 1
                    errors.append(f"{r.name}: {exc}")
                    continue
                self.next = (self.next + i + 1) % n
                return
            time.sleep(0.2)
        raise AssertionError("no receiver took the samples in 30 s: " + "; ".join(errors[-3:]))

    def due(self, now_ms: int, live: bool) -> None:
        batch = [s for s in self.pending if s.timestamp_ms <= now_ms]
        if not batch:
            return
        self.pending = self.pending[len(batch) :]
        self._to_thanos(batch)
        post(f"{self.prometheus}/api/v1/write", batch)
        if live:
            self.lag_s = max(self.lag_s, time.time() - max(s.timestamp_ms for s in batch) / 1000)


def firing(url: str) -> list[dict[str, Any]]:
    data = http_json(f"{url}/api/v1/alerts")["data"]
    alerts = data.get("alerts") or data.get("Alerts") or []  # the Ruler's: `Alerts`, and none when empty
    return [a for a in alerts if a["state"] == "firing"]


def am_alerts(url: str) -> list[dict[str, Any]]:
    return list(http_json(f"{url}/api/v2/alerts?active=true&silenced=true&inhibited=true"))


def tool(name: str) -> str:
    found = find_tool("upstream", name) or find_tool("debian", name)
    if found is None:
        if os.environ.get("TRAINGUARD_REQUIRE_TOOLS"):
            pytest.fail(f"{name} is required (TRAINGUARD_REQUIRE_TOOLS is set) but not found")
        pytest.skip(f"{name} is not installed (.ci/run installs Debian's, `make upstream-tools` builds one)")
    return found


def evaluation_failures(url: str) -> float:
    """The Ruler's failed rule evaluations so far (prometheus_rule_evaluation_failures_total, summed)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("prometheus_rule_evaluation_failures_total")
    )


def evaluated(url: str) -> bool:
    """Every alerting group evaluated once (the long-term groups run every 5 minutes: not waited for)."""
    groups = [g for g in http_json(f"{url}/api/v1/rules")["data"]["groups"] if float(g["interval"]) < 60]
    return bool(groups) and all(not g["lastEvaluation"].startswith("0001") for g in groups)


@pytest.mark.parametrize("form", ["per-monitor", "shared"])
def test_must_fire_cases_fire_on_thanos_as_on_prometheus_with_a_receiver_lost(
    tmp_path: Path, form: str
) -> None:
    binary, am_bin, prom_bin = thanos_binary(), tool("alertmanager"), tool("prometheus")
    rules = rule_file(form)
    (tmp_path / "rules.yml").write_text(dump_yaml(rules))
    # as prometheus-operator gives them to a Prometheus: without the field only a ThanosRuler reads
    plain = [{k: v for k, v in g.items() if k != "partial_response_strategy"} for g in rules["groups"]]
    (tmp_path / "prometheus-rules.yml").write_text(dump_yaml({"groups": plain}))
    (tmp_path / "alertmanager.yml").write_text(
        dump_yaml({"route": {"receiver": "none"}, "receivers": [{"name": "none"}]})
    )
    (tmp_path / "prometheus.yml").write_text(
        dump_yaml(
            {"global": {"evaluation_interval": "15s"}, "rule_files": [str(tmp_path / "prometheus-rules.yml")]}
        )
    )
    prom_port = free_port()
    prom_proc = start(
        [prom_bin, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'prom'}",
         f"--web.listen-address=127.0.0.1:{prom_port}", "--web.enable-remote-write-receiver"],
        tmp_path / "prometheus.log",
    )  # fmt: skip
    prom = f"http://127.0.0.1:{prom_port}"
    try:
        wait_http(f"{prom}/-/ready", timeout=60, proc=prom_proc)
        with (
            alertmanager(am_bin, tmp_path / "alertmanager.yml", tmp_path) as am,
            thanos_stack(binary, tmp_path, tmp_path / "rules.yml", am) as thanos,
        ):
            # both engines evaluate before the first sample exists: each sees the data appear
            wait_for("the reference Prometheus to evaluate its rules", lambda: evaluated(prom), timeout=60)
            wait_for("the Ruler to evaluate its rules", lambda: evaluated(thanos.rule), timeout=60)
            run(thanos, prom=prom, am=am, rules=rules, form=form, tmp=tmp_path)
    finally:
        stop([prom_proc])


def run(thanos: Thanos, *, prom: str, am: str, rules: dict[str, Any], form: str, tmp: Path) -> None:
    cases = chosen()
    expected = {name: {"alertname": name, **case.fires[0]} for name, case in cases}
    live_ms = int(time.time() * 1000)
    writer = Writer(thanos, prom, played(form, live_ms - HISTORY_S * 1000))
    writer.due(live_ms, live=False)  # the history, at once
    killed_at: float | None = None
    # what each side fired, as first seen: an alert over an `increase` resolves a minute later
    got: dict[str, dict[str, Any]] = {}
    fired_prom: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + RUN_S
    while len(got) < len(expected) or len(fired_prom) < len(expected):
        writer.due(int(time.time() * 1000), live=True)
        # the loss, mid-run: once the Ruler fires something, before the later cases' onsets
        if killed_at is None and firing(thanos.rule):
            thanos.receivers[0].proc.kill()
            thanos.receivers[0].proc.wait()
            killed_at = time.time()
        for a in am_alerts(am):
            if a["labels"] in expected.values():
                got.setdefault(a["labels"]["alertname"], a)
        for a in firing(prom):
            if a["labels"] in expected.values():
                fired_prom.setdefault(a["labels"]["alertname"], a)
        if time.monotonic() > deadline:
            raise AssertionError(
                f"after {RUN_S}s: not in Alertmanager from Thanos {sorted(set(expected) - set(got))}, not "
                f"fired by Prometheus {sorted(set(expected) - set(fired_prom))}; Ruler log:\n"
                + (tmp / "rule.log").read_text()[-3000:]
            )
        upcoming = writer.pending[0].timestamp_ms / 1000 if writer.pending else time.time() + 1
        time.sleep(min(1.0, max(0.05, upcoming - time.time())))

    assert killed_at is not None, "the Ruler fired nothing: no receiver was killed"
    onsets: list[float] = []
    report = []
    for name in expected:
        for_s, interval = timing(rules, name)
        active = parse_time(fired_prom[name]["activeAt"])
        onsets.append(active)
        # Prometheus fires at the first evaluation at least `for` after the alert became active
        prometheus_fires = active + math.ceil(for_s / interval) * interval
        thanos_fires = parse_time(got[name]["startsAt"])
        t0 = live_ms / 1000
        report.append(
            f"  {name:24} Prometheus {prometheus_fires - t0:6.1f}  Thanos {thanos_fires - t0:6.1f}  "
            f"{thanos_fires - prometheus_fires:+5.1f}"
        )
        assert abs(thanos_fires - prometheus_fires) <= interval + writer.lag_s, (
            f"{name} fired on Thanos at {thanos_fires:.1f}, {thanos_fires - prometheus_fires:+.1f}s from "
            f"Prometheus ({prometheus_fires:.1f}); more than the {interval:.0f}s evaluation interval "
            f"(+{writer.lag_s:.1f}s of write lag)\n" + "\n".join(report)
        )
    assert killed_at < max(onsets), (
        f"receiver-0 was killed at {killed_at:.1f}, after every alert became active on Prometheus "
        f"(the last at {max(onsets):.1f}): the loss was not mid-run"
    )
    # ALERTS, as the dashboards, the morning report and the GPU-fault witness read it, through Query (over
    # the run: an alert over an `increase` has resolved since)
    q = urllib.parse.quote(f'count_over_time(ALERTS{{alertstate="firing"}}[{RUN_S + HISTORY_S}s])')
    # the receivers' tenant label stays on ALERTS wherever the rule keeps the series' labels
    series = [
        {k: v for k, v in r["metric"].items() if k != TENANT_LABEL}
        for r in http_json(f"{thanos.query}/api/v1/query?query={q}")["data"]["result"]
    ]
    for labels in expected.values():
        assert labels | {"alertstate": "firing"} in series, (
            f"{labels['alertname']} is not in ALERTS through Query: {series}"
        )
    print(
        f"\n{form}: receiver-0 killed {killed_at - live_ms / 1000:.1f}s into the run; {writer.failovers} "
        f"writes failed over; Ruler evaluation failures: {evaluation_failures(thanos.rule):.0f}; write lag "
        f"{writer.lag_s:.2f}s; fired (s into the run, Thanos - Prometheus):\n" + "\n".join(report)
    )
