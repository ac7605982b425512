"""`trainguard status`'s pure half: the JobStatus built from a monitor, its alerts and its series, the
training time lost, and the plain and live layouts."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from rich.console import Console

from tests.kube.fakes import FakeKube
from trainguard.cli import build_parser
from trainguard.remediation.goodput import LAG_S, monitor_goodput
from trainguard.status.command import status_notes
from trainguard.status.fetch import Sources, fetch
from trainguard.status.model import JobStatus, Redo, Series, alerts_of, health, job_status, time_lost
from trainguard.status.render import duration, job_data, render_live, render_plain
from trainguard.times import rfc3339

NOW = 1_800_000_000.0
ANSI = re.compile(r"\x1b\[")


def step(kind: str, phase: str = "Succeeded") -> dict[str, Any]:
    return {"kind": kind, "params": {}, "phase": phase, "detail": "", "time": rfc3339(NOW)}


def record(
    rid: str, created: float, updated: float, kinds: list[str], phase: str = "Succeeded", **extra: Any
) -> dict[str, Any]:
    return {"id": rid, "fingerprint": rid, "alert": "GPULost", "class": "nodeFault", "node": "gpu-node-1",
            "gpu": "2", "dryRun": False, "phase": phase, "skipped": "", "message": "",
            "created": rfc3339(created), "updated": rfc3339(updated), "steps": [step(k) for k in kinds],
            **extra}  # fmt: skip


def monitor(
    ready: str = "True", records: list[dict[str, Any]] | None = None, name: str = "llama"
) -> dict[str, Any]:
    return {"apiVersion": "trainguard.io/v1alpha1", "kind": "TrainingJobMonitor",
            "metadata": {"namespace": "ml", "name": name},
            "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "Reconciled" if ready == "True"
                                       else "InvalidPolicy"}], "remediations": records or []}}  # fmt: skip


def alert(name: str, severity: str, **labels: str) -> dict[str, str]:
    return {"alertname": name, "severity": severity, "alertstate": "firing", **labels}


SERIES = Series(throughput=2100.0, baseline=3000.0, checkpoint_step=400.0, checkpoint_time=NOW - 125)


def test_health_is_the_worst_of_a_firing_p0_the_monitor_not_ready_and_a_firing_p1() -> None:
    p0, p1, p2 = (alerts_of([alert("A", s)]) for s in ("P0", "P1", "P2"))
    assert health(True, ()) == "Healthy"
    assert health(True, p2) == "Healthy"
    assert health(True, p1) == "Degraded"
    assert health(False, p1) == "NotReady"
    assert health(False, p0) == "Critical"
    assert job_status(monitor(ready="False"), [], Series(), {}, NOW).ready_reason == "InvalidPolicy"
    assert (
        job_status({"metadata": {"namespace": "a", "name": "b"}}, [], Series(), {}, NOW).health == "NotReady"
    )


def test_time_lost_sums_stop_and_redo_of_the_remediations_that_stopped_training() -> None:
    restart = record(
        "r1", NOW - 3600, NOW - 3600 + 95, ["Pause", "RequestCheckpoint", "Cordon", "RestartGang"]
    )
    paused = record("r2", NOW - 600, NOW - 600 + 40, ["Pause", "PinCheckpoint"])
    dry = record("r3", NOW - 500, NOW - 400, ["Pause", "RestartGang"], phase="DryRun", dryRun=True)
    advice = record("r4", NOW - 300, NOW - 200, ["Advise"])
    skipped = record("r5", NOW - 300, NOW - 250, [], phase="Skipped")
    unfinished = record("r6", NOW - 30, NOW - 10, ["Pause", "RestartGang"], phase="InProgress")
    # 150 steps past the full checkpoint at 2.5 steps/s: 60 s redone
    redo = {"r1": Redo(step=550, checkpoint_step=400, rate=2.5)}
    lost, partial = time_lost([restart, paused, dry, advice, skipped, unfinished], redo)
    assert (lost, partial) == (95 + 60 + 40, False)
    # a restart whose redo Prometheus cannot tell: the stop only, marked as a lower bound
    assert time_lost([restart], {"r1": Redo(550, None, 2.5)}) == (95, True)
    assert time_lost([restart], {}) == (95, True)
    # a checkpoint newer than the step read (the emergency one) redoes nothing, never a negative time
    assert time_lost([restart], {"r1": Redo(390, 400, 2.5)}) == (95, False)


def test_alerts_are_graded_by_priority_in_the_mapped_style_and_by_severity_from_older_rules() -> None:
    got = alerts_of([
        alert("GPUMemoryHigh", "none", priority="P3"),
        alert("GPULost", "critical", priority="P0", node="n1", gpu="2"),
        alert("DataLoaderSlow", "P2"),
    ])  # fmt: skip
    assert [(a.name, a.severity) for a in got] == [
        ("GPULost", "P0"),
        ("DataLoaderSlow", "P2"),
        ("GPUMemoryHigh", "P3"),
    ]


def test_the_job_status_carries_alerts_by_severity_throughput_checkpoint_and_the_newest_remediation() -> None:
    older = record("old", NOW - 7200, NOW - 7100, ["Pause", "RestartGang"])
    newer = record("new", NOW - 300, NOW - 280, ["Advise"]) | {
        "alert": "TrainingGradientExplosion",
        "node": "",
    }
    s = job_status(
        monitor(records=[older, newer]),
        [alert("GPUThermalThrottling", "P2", node="n1", gpu="1"), alert("GPULost", "P0", node="n1", gpu="2"),
         alert("GPUThermalThrottling", "P2", node="n1", gpu="1", pod="p-0"), alert("NetworkPacketLossHigh", "P1")],
        SERIES, {"old": Redo(500, 400, 1.0)}, NOW,
    )  # fmt: skip
    assert s.health == "Critical"
    assert s.by_severity == {"P0": 1, "P1": 1, "P2": 1}
    assert [a.name for a in s.alerts] == ["GPULost", "NetworkPacketLossHigh", "GPUThermalThrottling"]
    assert s.throughput_ratio == 0.7
    assert s.checkpoint_age_s == 125
    assert s.last_remediation is not None and s.last_remediation.alert == "TrainingGradientExplosion"
    assert s.lost_s == 100 + 100 and not s.lost_partial


def test_durations_read_at_a_glance() -> None:
    assert [duration(x) for x in (None, 0, 59.6, 61, 600, 3599, 3600 + 5 * 60, 86400 * 2 + 3600 * 4)] == [
        "-", "0s", "1m00s", "1m01s", "10m", "59m", "1h05m", "2d04h"]  # fmt: skip


def statuses() -> list[JobStatus]:
    healthy = job_status(monitor(name="bert"), [], SERIES, {}, NOW)
    critical = job_status(
        monitor(name="llama-pretrain", records=[record("r1", NOW - 900, NOW - 800, ["Pause", "RestartGang"])]),
        [alert("GPULost", "P0", node="gpu-node-1", gpu="2"), alert("GPUThermalThrottling", "P2")],
        Series(throughput=1500.0, baseline=None, checkpoint_step=None, checkpoint_time=None), {}, NOW,
    )  # fmt: skip
    return [healthy, critical]


def test_the_plain_layout_has_fixed_columns_one_line_per_job_indented_details_and_no_ansi() -> None:
    text = render_plain(statuses())
    assert not ANSI.search(text)
    lines = text.splitlines()
    assert lines[0].split() == [
        "JOB",
        "HEALTH",
        "ALERTS",
        "TOKENS/S/GPU(VS",
        "BASELINE)",
        "CHECKPOINT",
        "LOST",
    ]
    jobs = [ln for ln in lines[1:] if not ln.startswith(" ")]
    assert [j.split()[0] for j in jobs] == ["ml/bert", "ml/llama-pretrain"]
    # every column starts where its header does
    for col in ("HEALTH", "ALERTS", "CHECKPOINT", "LOST"):
        at = lines[0].index(col)
        assert all(j[at - 1] == " " and j[at] != " " for j in jobs), col
    bert, llama = jobs
    assert "Healthy" in bert and "none" in bert and "2100/3000 (70%)" in bert and "step 400 2m05s ago" in bert
    assert "Critical" in llama and "P0:1 P2:1" in llama and "1500/-" in llama and llama.endswith("1m40s+?")
    details = lines[lines.index(llama) + 1 :]
    assert details[0] == "  P0 GPULost node=gpu-node-1 gpu=2"
    assert details[-1].startswith(
        "  last remediation: GPULost on gpu-node-1: Succeeded [Pause,RestartGang] 15m"
    )
    assert render_plain([]) == "no TrainingJobMonitor found\n"


def live_text(color_system: str | None = "standard", width: int = 160) -> str:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system=color_system, width=width,  # type: ignore[arg-type]
                      markup=False, highlight=False)  # fmt: skip
    console.print(
        render_live(statuses(), now_text="2027-01-15 08:00:00", every_s=5, notes=["no --prometheus"])
    )
    return out.getvalue()


def test_the_live_layout_colours_health_and_severity_in_aligned_blocks() -> None:
    text = live_text()
    assert "\x1b[1;31mCritical\x1b[0m" in text and "\x1b[32mHealthy\x1b[0m" in text
    assert "\x1b[1;31mP0:1\x1b[0m" in text and "\x1b[36mP2:1\x1b[0m" in text
    plain = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)
    assert plain.startswith("trainguard status  2027-01-15 08:00:00  every 5s")
    assert "ml/llama-pretrain  Critical" in plain
    assert "  alerts      P0:1 P2:1" in plain
    assert "              P0 GPULost node=gpu-node-1 gpu=2" in plain
    assert "  throughput  2100/3000 (70%)" in plain
    assert "  checkpoint  step 400 2m05s ago" in plain
    assert "  remediation GPULost on gpu-node-1: Succeeded [Pause,RestartGang] 15m ago" in plain
    assert "  time lost   1m40s+?" in plain
    assert plain.rstrip().endswith("trainguard: no --prometheus")


def test_the_live_layout_wraps_at_the_terminals_width_under_its_label() -> None:
    plain = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", live_text(width=40))
    assert all(len(line) <= 40 for line in plain.splitlines())
    at = plain.index("  remediation GPULost")
    continued = plain[at:].splitlines()[1]
    assert continued.startswith(" " * 14) and continued.strip(), plain


def test_status_parses_its_flags() -> None:
    args = build_parser().parse_args(
        [
            "status",
            "-n",
            "ml",
            "--monitor",
            "llama",
            "--watch",
            "--interval",
            "2",
            "--prometheus",
            "http://p:9090",
        ]
    )
    assert (args.namespace, args.monitor, args.watch, args.interval, args.plain) == (
        "ml",
        "llama",
        True,
        2.0,
        False,
    )
    assert args.prometheus == "http://p:9090" and args.alertmanager is None


def test_the_notes_say_what_the_sources_given_cannot_show() -> None:
    """Without Alertmanager the operator's own detections and the fast-path pages are missing from
    the alerts column: a job that looks Healthy must say so, not look like nothing happened."""
    (only_prom,) = status_notes("http://p:9090", None)
    assert "--alertmanager" in only_prom and "fast-path" in only_prom
    assert status_notes("http://p:9090", "http://am:9093") == []
    (only_am,) = status_notes(None, "http://am:9093")
    assert "--prometheus" in only_am and "alerts" not in only_am
    (neither,) = status_notes(None, None)
    assert "--prometheus" in neither and "--alertmanager" in neither


class Prometheus:
    """A stand-in answering instant queries from a table (the queries are checked on a real Prometheus in
    the e2e test); records what was asked."""

    def __init__(self, answers: dict[str, list[dict[str, Any]]], fail: bool = False) -> None:
        self.answers, self.fail, self.asked = answers, fail, list[tuple[str, Any]]()

    def custom_query(self, query: str, params: dict[str, Any] | None = None) -> Any:
        self.asked.append((query, params))
        if self.fail:
            raise OSError("connection refused")
        return next((v for k, v in self.answers.items() if query.startswith(k)), [])


def test_fetch_reads_each_monitors_alerts_series_and_the_redo_at_each_restart() -> None:
    restart = record("r1", NOW - 900, NOW - 800, ["Pause", "RestartGang"])
    bodies = [
        monitor(name="llama", records=[restart]),
        monitor(name="bert") | {"metadata": {"namespace": "other", "name": "bert"}},
    ]
    prom = Prometheus({
        "ALERTS": [{"metric": alert("GPULost", "P0", namespace="ml", training_job="llama"), "value": [NOW, "1"]}],
        "trainguard:train_tokens_per_second_per_gpu:avg{": [{"metric": {}, "value": [NOW, "2400"]}],
        "trainguard_checkpoint_last_step{": [{"metric": {"kind": "full"}, "value": [NOW, "800"]}],
        "max(max_over_time(trainguard_train_step": [{"metric": {}, "value": [NOW, "900"]}],
        "max(max_over_time(trainguard_checkpoint_last_step": [{"metric": {}, "value": [NOW, "700"]}],
        "max(deriv(trainguard_train_step": [{"metric": {}, "value": [NOW, "4"]}],
    })  # fmt: skip
    (got,) = fetch(Sources(FakeKube(*bodies), prom), "ml", None, NOW)
    assert (got.name, got.health, got.series.throughput, got.series.checkpoint_step) == (
        "llama",
        "Critical",
        2400,
        800,
    )
    assert got.series.baseline is None
    assert got.lost_s == 100 + (900 - 700) / 4 and not got.lost_partial
    redo_times = {p["time"] for q, p in prom.asked if q.startswith("max(")}
    assert redo_times == {f"{NOW - 900:.3f}"}, "the redo is read at the record's creation"
    assert all('namespace="ml",training_job="llama"' in q for q, _ in prom.asked)
    assert [s.name for s in fetch(Sources(FakeKube(*bodies), prom), None, None, NOW)] == ["llama", "bert"]
    assert fetch(Sources(FakeKube(*bodies), prom), "ml", "nope", NOW) == []


def test_a_prometheus_that_does_not_answer_leaves_the_series_blank_and_says_so() -> None:
    sources = Sources(FakeKube(monitor()), Prometheus({}, fail=True))
    (got,) = fetch(sources, None, None, NOW)
    assert got.health == "Healthy" and got.series == Series()
    assert sources.errors == ["Prometheus: connection refused"]


def test_each_job_shows_its_goodput_and_top_cause_as_the_operator_exports_them() -> None:
    created = NOW - 2 * 86400
    restart = record("r1", NOW - 7200, NOW - 7200 + 432, ["Pause", "RestartInPlace"])
    body = {**monitor(records=[restart]), "metadata": {"namespace": "ml", "name": "llama",
                                                       "creationTimestamp": rfc3339(created)}}  # fmt: skip
    s = job_status(body, [], SERIES, {}, NOW + LAG_S)
    assert s.goodput == monitor_goodput(body, NOW + LAG_S), "the function the metrics read"
    text = render_plain([s])
    line = next(ln for ln in text.splitlines() if ln.startswith("  goodput: "))
    assert (
        line
        == "  goodput: 99.5% over 1d00h, most lost to restart (7m12s), redone work of 1 restart(s) unknown"
    )
    plain = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", _live([s]))
    assert "  goodput     99.5% over 1d00h, most lost to restart (7m12s)" in plain
    data = job_data(s)["goodput"]
    assert data["ettr"] == pytest.approx(0.995) and data["topCause"] == "restart"
    assert (
        data["lostSeconds"] == {"restart": 432.0, "maintenance": 0.0, "redone_work": 0.0}
        and data["restartsRedoUnknown"] == 1
    )


def test_a_monitor_without_a_creation_time_shows_no_goodput() -> None:
    s = job_status(monitor(), [], SERIES, {}, NOW)
    assert s.goodput is None and "goodput" not in render_plain([s]) and job_data(s)["goodput"] is None


def _live(statuses: list[JobStatus]) -> str:
    out = io.StringIO()
    Console(file=out, force_terminal=True, width=160, markup=False, highlight=False).print(
        render_live(statuses, now_text="2027-01-15 08:00:00", every_s=None)
    )
    return out.getvalue()


def test_a_job_whose_rules_keep_a_group_of_their_own_says_why() -> None:
    """Under the shared form, a monitor that cannot share (status.rules, catalog/rule_forms.py) is named
    with its reasons; a shared one adds no line."""
    own = {
        "form": "own-group",
        "reasons": [{"reason": "ScrapeInterval", "message": "spec.exporter.scrapeInterval 1m: x"}],
    }
    body = {"metadata": {"namespace": "a", "name": "b"}, "status": {"rules": own}}
    s = job_status(body, [], Series(), {}, NOW)
    assert "  rules: a group of its own: spec.exporter.scrapeInterval 1m: x" in render_plain([s])
    assert job_data(s)["rules"] == {"form": "own-group", "reasons": ["spec.exporter.scrapeInterval 1m: x"]}
    shared = job_status(
        {**body, "status": {"rules": {"form": "shared", "reasons": []}}}, [], Series(), {}, NOW
    )
    assert "rules:" not in render_plain([shared]) and job_data(shared)["rules"]["form"] == "shared"
