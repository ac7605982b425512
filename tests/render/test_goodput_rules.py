"""The goodput recording rules (render/prometheus.py, goodput_rules) through `promtool test rules`, on
both rule forms: seeded series in, the share of time lost by cause and the ETTR out. Must-count and
must-not-count cases: a stall before any alert, a normal checkpoint cadence (a small checkpoint_stall,
no stall), a long write the SDK reported (no stall, from the sidecar's own counters), the same write
unreported (a stall), a stall that became a restart in the records (counted once), a straggler (its
x / (1 + x)) and an even gang (no slow_rank)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.render.alert_cases import JOB, POD, SCRAPE, gang, jitter, series, slow
from tests.render.test_alert_rules import FORMS, form_rules, publisher_input
from tests.toolchains import promtool_test_rules
from trainguard.exporter.training import TrainingState
from trainguard.render import dump_yaml
from trainguard.render.prometheus import ETTR, LOST, LOST_ALL

pytestmark = pytest.mark.tools

SAMPLES_PER_MIN = 4
OPERATOR = JOB | {"pod": "trainguard-0", "instance": "10.0.0.9:8081", "job": "trainguard-operator"}
"""The operator's goodput series: the job's namespace and training_job (honorLabels), its own target."""


def counter(per_sample: list[float]) -> str:
    """promtool values of a counter that grows by per_sample[k] at sample k (from 0)."""
    total, out = 0.0, []
    for inc in per_sample:
        total += inc
        out.append(f"{total:.4f}")
    return " ".join(out)


def between(minutes: int, start: float, end: float, rate: float) -> list[float]:
    """Per-sample growth of a counter rising `rate` seconds per second from minute `start` to `end`."""
    n = minutes * SAMPLES_PER_MIN + 1
    return [
        rate * 15.0 if k and start * SAMPLES_PER_MIN < k <= end * SAMPLES_PER_MIN else 0.0 for k in range(n)
    ]


def pod_counters(stall: list[float], saved: list[float], pod: dict[str, str] = POD) -> list[dict[str, str]]:
    return [
        series("trainguard_train_stall_seconds_total", pod, counter(stall)),
        series("trainguard_checkpoint_save_seconds_total", pod, counter(saved)),
    ]


def lost(cause: str) -> str:
    """One cause's share, labelled as the job (as `exact` and `within` expect)."""
    return f'max without (cause) ({LOST}{{cause="{cause}"}})'


def exact(expr: str, at: str, value: float, digits: float = 0.001) -> dict[str, Any]:
    return {
        "expr": f"round({expr}, {digits})",
        "eval_time": at,
        "exp_samples": [{"labels": _labels(), "value": value}],
    }


def within(expr: str, at: str, low: float, high: float) -> dict[str, Any]:
    """expr lies in [low, high] at `at` (a 1, labelled as the job; nothing when it is absent)."""
    return {
        "expr": f"({expr} >= bool {low}) * ({expr} <= bool {high})",
        "eval_time": at,
        "exp_samples": [{"labels": _labels(), "value": 1}],
    }


def _labels() -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(JOB.items())) + "}"


def run(
    promtool: str,
    tmp: Path,
    form: str,
    series_: list[dict[str, str]],
    tests: list[dict[str, Any]],
    *,
    minutes: int,
) -> None:
    """`tests` on the series of `minutes` minutes (15 s samples), every rule of `form` evaluated every 15 s."""
    rule_file, published = form_rules(form, {})
    inputs = list(series_)
    if published is not None:  # the shared form: what the operator publishes for the job, all along
        inputs += publisher_input({}, minutes * SAMPLES_PER_MIN + 1)
    (tmp / "rules.yml").write_text(dump_yaml(rule_file))
    (tmp / "test.yml").write_text(
        dump_yaml(
            {
                "rule_files": ["rules.yml"],
                "evaluation_interval": SCRAPE,
                # in the file's order: promtool otherwise evaluates groups in map order
                "group_eval_order": [g["name"] for g in rule_file["groups"]],
                "tests": [{"interval": SCRAPE, "input_series": inputs, "promql_expr_test": tests}],
            }
        )
    )
    promtool_test_rules(promtool, tmp)


@pytest.mark.parametrize("form", FORMS)
def test_a_stall_before_any_alert_is_lost_time(promtool: str, tmp_path: Path, form: str) -> None:
    """No step from minute 10 to 20 (the sidecar counts the gap as it grows), no record yet: a sixth of
    the hour lost to stall, and nothing to checkpoint_stall or slow_rank."""
    minutes = 62
    stall = between(minutes, 10, 20, 1.0)
    run(promtool, tmp_path, form, pod_counters(stall, [0.0] * len(stall)), [
        exact(lost("stall"), "15m", 1),
        exact(lost("stall"), "30m", 0),
        exact(lost("checkpoint_stall"), "15m", 0),
        within(ETTR, "61m", 0.82, 0.85),
    ], minutes=minutes)  # fmt: skip


@pytest.mark.parametrize("form", FORMS)
def test_a_stall_that_became_a_restart_is_counted_once(promtool: str, tmp_path: Path, form: str) -> None:
    """The same stall, then an alert and a record: the operator counts its restart a minute behind, from
    minute 11 to 21. The job lost 10 minutes (plus its last one), not 20."""
    minutes = 62
    stall = between(minutes, 10, 20, 1.0)
    records = series("trainguard_job_lost_seconds_total", OPERATOR | {"cause": "restart"},
                     counter(between(minutes, 11, 21, 1.0)))  # fmt: skip
    run(promtool, tmp_path, form, [*pod_counters(stall, [0.0] * len(stall)), records], [
        exact(LOST_ALL, "16m", 1),
        within(ETTR, "62m", 0.81, 0.85),
    ], minutes=minutes)  # fmt: skip


@pytest.mark.parametrize("form", FORMS)
def test_records_alone_still_give_an_ettr(promtool: str, tmp_path: Path, form: str) -> None:
    """A job whose trainer has no SDK: no sidecar counters, the records' causes alone."""
    minutes = 62
    records = series("trainguard_job_lost_seconds_total", OPERATOR | {"cause": "redone_work"},
                     counter(between(minutes, 20, 50, 0.5)))  # fmt: skip
    run(promtool, tmp_path, form, [records], [
        exact(LOST_ALL, "30m", 0.5),
        within(ETTR, "62m", 0.73, 0.77),
    ], minutes=minutes)  # fmt: skip


@pytest.mark.parametrize("form", FORMS)
def test_a_steady_share_of_checkpoint_writes_is_checkpoint_stall(
    promtool: str, tmp_path: Path, form: str
) -> None:
    """Writes blocking a tenth of the time: checkpoint_stall 0.1, stall 0, ETTR 0.9."""
    minutes = 62
    saved = [1.5 if k else 0.0 for k in range(minutes * SAMPLES_PER_MIN + 1)]
    run(promtool, tmp_path, form, pod_counters([0.0] * len(saved), saved), [
        exact(lost("checkpoint_stall"), "30m", 0.1),
        exact(lost("stall"), "30m", 0),
        exact(ETTR, "62m", 0.9),
    ], minutes=minutes)  # fmt: skip


def sidecar_trace(
    minutes: int, *, save_every_s: float, save_s: float, reported: bool
) -> list[dict[str, str]]:
    """The two counters of a real sidecar (exporter/training.py) scraped every 15 s while a trainer
    steps every 2 s and writes a checkpoint of `save_s` every `save_every_s`, reported through
    Reporter.saving() (its start, then its seconds) or not at all."""
    now = [0.0]
    state = TrainingState(clock=lambda: now[0])
    state.ingest({"type": "hello", "pid": 7, "started_at": 0.0})
    stall, saved, step, next_save = [], [], 0, save_every_s
    t = 0.0
    end = minutes * 60.0
    while t <= end:
        while now[0] + 2.0 <= t:
            if now[0] + 2.0 >= next_save:  # the step that ends at the save, then the write
                now[0] += 2.0
                step += 1
                state.ingest({"type": "step", "step": step, "ts": now[0]})
                if reported:
                    state.ingest({"type": "saving", "ts": now[0]})
                write_end = now[0] + save_s
                while t < write_end and t <= end:  # scrapes during the write
                    now[0] = t
                    view = state.snapshot()
                    stall.append(view.stall_seconds_total)
                    saved.append(view.checkpoint_save_seconds_total)
                    t += 15.0
                now[0] = write_end
                if reported:
                    state.ingest({"type": "checkpoint", "step": step, "kind": "full", "ok": True, "ts": now[0],
                                  "seconds": save_s})  # fmt: skip
                next_save += save_every_s
                continue
            now[0] += 2.0
            step += 1
            state.ingest({"type": "step", "step": step, "ts": now[0]})
        if t > end:
            break
        now[0] = max(now[0], t)
        view = state.snapshot()
        stall.append(view.stall_seconds_total)
        saved.append(view.checkpoint_save_seconds_total)
        t += 15.0
    return [
        series("trainguard_train_stall_seconds_total", POD, " ".join(f"{v:.4f}" for v in stall)),
        series("trainguard_checkpoint_save_seconds_total", POD, " ".join(f"{v:.4f}" for v in saved)),
    ]


@pytest.mark.parametrize("form", FORMS)
def test_a_normal_checkpoint_cadence_is_a_small_checkpoint_stall_and_no_stall(
    promtool: str, tmp_path: Path, form: str
) -> None:
    """A 2-minute write every 20 minutes, announced by the SDK: a tenth of the time to checkpoint_stall,
    none of it a stall, even while a write runs (minute 41, inside the second write)."""
    minutes = 62
    trace = sidecar_trace(minutes, save_every_s=1200.0, save_s=120.0, reported=True)
    run(promtool, tmp_path, form, trace, [
        exact(lost("stall"), "41m", 0),
        exact(f"max_over_time({lost('stall')}[61m:15s])", "61m", 0),
        within(lost("checkpoint_stall"), "41m", 0.95, 1),
        # the hour to 59m holds two whole writes (read a minute back): 4 minutes of 60
        within(ETTR, "59m", 0.925, 0.942),
    ], minutes=minutes)  # fmt: skip


@pytest.mark.parametrize("form", FORMS)
def test_an_unreported_write_is_a_stall(promtool: str, tmp_path: Path, form: str) -> None:
    """The same writes, and a trainer that says nothing of them: the sidecar sees 2-minute gaps, stalls
    beyond the grace; no checkpoint_stall."""
    minutes = 62
    trace = sidecar_trace(minutes, save_every_s=1200.0, save_s=120.0, reported=False)
    run(promtool, tmp_path, form, trace, [
        within(lost("stall"), "41m45s", 0.5, 1),
        exact(lost("checkpoint_stall"), "41m", 0),
        within(ETTR, "62m", 0.88, 0.95),
    ], minutes=minutes)  # fmt: skip


@pytest.mark.parametrize("form", FORMS)
def test_a_straggler_costs_the_gang_its_excess_over_one_plus_it(
    promtool: str, tmp_path: Path, form: str
) -> None:
    """Rank 1 of 4 a quarter slower than its peers: the gang runs at its pace, 0.25 / 1.25 = 0.2 lost."""
    minutes = 30
    run(promtool, tmp_path, form, gang(4, minutes, slow(1, 0.25)), [
        within(lost("slow_rank"), "20m", 0.17, 0.23),
        within(LOST_ALL, "21m", 0.17, 0.23),
    ], minutes=minutes)  # fmt: skip


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("ranks", [2, 4])
def test_an_even_gang_loses_nothing_to_slow_rank(
    promtool: str, tmp_path: Path, form: str, ranks: int
) -> None:
    """Ranks within their +-2% jitter of each other: no slow_rank, as a zero (the job is judged)."""
    minutes = 30
    run(promtool, tmp_path, form, gang(ranks, minutes, lambda i, k: 0.8 * jitter(i, k)), [
        exact(lost("slow_rank"), "20m", 0),
        exact(f"max_over_time({lost('slow_rank')}[15m:15s])", "25m", 0),
    ], minutes=minutes)  # fmt: skip
