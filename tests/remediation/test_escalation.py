"""Escalation by the operator: which P1s Alertmanager shows unacknowledged long enough to re-post as
P0, the copy posted, when a copy is resolved, and the same decisions on a real Alertmanager."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import monitor, policy
from tests.processes import alertmanager, http_json
from tests.remediation.escalation_inputs import JOB, MIN, NAME, NOW, NS, ON, am, posted
from tests.render.amconfig import write_config
from trainguard.catalog.severity import MAPPED, styled
from trainguard.remediation.escalation import (
    COPY_TTL_S,
    REFRESH_S,
    Settings,
    due,
    ended,
    escalated,
    format_time,
    parse_time,
    settings,
)
from trainguard.remediation.executor import choose_checkpoint
from trainguard.remediation.model import ClusterState, Signal, StepKind
from trainguard.remediation.plan import plan, record_id
from trainguard.remediation.signals import from_alertmanager


def names(alerts: list[dict[str, Any]]) -> list[str]:
    return [a["labels"]["alertname"] for a in alerts]


def due_for_job(alerts: list[dict[str, Any]], escalation: Settings = ON, **kw: Any) -> list[dict[str, Any]]:
    return due(alerts, escalation, NOW, namespace=NS, training_job=NAME, **kw)


def test_only_the_unacknowledged_old_enough_p1_of_the_monitor_is_due() -> None:
    alerts = [
        am("GPUThermalThrottling", "P1", 16 * MIN, gpu="0", node="n1"),  # the one
        am("GPUMemoryCritical", "P1", 30 * MIN, "suppressed", silenced_by=("sil-1",), gpu="1"),
        am("NetworkPacketLossHigh", "P1", 30 * MIN, "suppressed", inhibited_by=("fp-nodedown",)),
        am("CheckpointStale", "P1", 14 * MIN),  # too young
        am("GradientExplosion", "P1", 30 * MIN, "unprocessed"),  # not routed yet
        am("TrainingLossNonFinite", "P0", 30 * MIN),  # already a P0
        am("DataLoaderSlow", "P2", 30 * MIN),  # P2s are not escalated
        am("GPUThermalThrottling", "P1", 30 * MIN, training_job="bert-finetune", gpu="0"),  # another job
        am("GPUThermalThrottling", "P1", 30 * MIN, namespace="other", gpu="0"),  # same name, other ns
    ]
    assert names(due_for_job(alerts)) == ["GPUThermalThrottling"]
    assert due_for_job(alerts)[0]["labels"]["node"] == "n1"


def test_the_delay_counts_from_when_it_fired() -> None:
    assert names(due_for_job([am("CheckpointStale", "P1", 15 * MIN)])) == ["CheckpointStale"]
    assert due_for_job([am("CheckpointStale", "P1", 15 * MIN - 1)]) == []
    later = Settings(enabled=True, after_s=60 * MIN)
    assert due_for_job([am("CheckpointStale", "P1", 30 * MIN)], later) == []


def test_nothing_is_due_when_escalation_is_off() -> None:
    assert due_for_job([am("GPUThermalThrottling", "P1", 60 * MIN)], Settings(enabled=False)) == []


def test_an_alert_without_a_readable_start_is_never_escalated_at_once() -> None:
    for starts in (None, "0001-01-01T00:00:00Z", "yesterday", "2023-11-14T22:13:20"):
        alert = am("GPUThermalThrottling", "P1", 60 * MIN)
        alert["startsAt"] = starts
        assert due_for_job([alert]) == [], starts


def test_already_escalated_is_not_due_until_its_copy_nears_its_end() -> None:
    p1 = am("GPUThermalThrottling", "P1", 20 * MIN, gpu="0", node="n1")
    fresh = escalated(p1, ON, NOW)
    fresh_read = am("GPUThermalThrottling", "P0", 20 * MIN, ends_in_s=COPY_TTL_S, fingerprint="fp-copy")
    fresh_read["labels"] = fresh["labels"]
    assert due_for_job([p1, fresh_read]) == [], "a copy that stays up is not posted again"

    lapsing = fresh_read | {"endsAt": format_time(NOW + REFRESH_S - 1)}
    assert due_for_job([p1, lapsing]) == [p1], "a copy about to lapse is refreshed"

    no_end = {k: v for k, v in fresh_read.items() if k != "endsAt"}
    assert due_for_job([p1, no_end]) == [p1], "a copy whose end is unknown is refreshed, never left to lapse"

    other_gpu = fresh_read | {"labels": fresh["labels"] | {"gpu": "1"}}
    assert due_for_job([p1, other_gpu]) == [p1], "a copy of another instance is not this one's"


def test_a_p1_inhibited_only_by_escalated_copies_stays_escalated() -> None:
    # the job's P0-mutes-P1 inhibition makes a copy (a P0) inhibit its own P1; that must not resolve
    # the copy on the next pass and escalate it again on the one after
    p1 = am("GPUThermalThrottling", "P1", 20 * MIN, "suppressed", inhibited_by=("fp-copy",), gpu="0")
    copy = am("GPUThermalThrottling", "P0", 20 * MIN, fingerprint="fp-copy", ends_in_s=COPY_TTL_S)
    copy["labels"] = escalated(p1, ON, NOW)["labels"]
    assert due_for_job([p1, copy]) == []
    assert ended([p1, copy], ON, NOW, namespace=NS, training_job=NAME) == []
    # inhibited by a real P0 as well: no longer escalatable, the copy ends
    both = p1 | {"status": p1["status"] | {"inhibitedBy": ["fp-copy", "fp-real-p0"]}}
    assert names(ended([both, copy], ON, NOW, namespace=NS, training_job=NAME)) == ["GPUThermalThrottling"]


def test_the_copy_is_the_p1_raised_to_p0_with_the_delay_in_its_summary() -> None:
    p1 = am("GPUThermalThrottling", "P1", 20 * MIN, gpu="0", node="n1", prometheus="monitoring/k8s")
    copy = escalated(p1, ON, NOW)
    assert copy["labels"] == p1["labels"] | {"priority": "P0", "severity": "P0", "escalated_from": "P1"}
    assert copy["annotations"] == {
        "summary": "[escalated after 15m] GPUThermalThrottling summary",
        "runbook_url": "https://runbooks/x",
    }
    assert copy["startsAt"] == p1["startsAt"], "the P1's start: the fault's, not the escalation's"
    assert parse_time(copy["endsAt"]) == NOW + COPY_TTL_S
    assert copy["generatorURL"] == "http://prometheus/graph"
    assert set(copy) == {"labels", "annotations", "startsAt", "endsAt", "generatorURL"}, "postable only"
    assert p1["labels"]["severity"] == "P1", "the P1 read back is not changed"
    assert escalated(p1, ON, NOW + 60)["labels"] == copy["labels"], "one alert in Alertmanager per P1"


def test_a_mapped_p1_is_escalated_on_its_priority_and_its_copy_keeps_its_severity_word() -> None:
    """In the mapped style the P1 says severity="warning": its grade is in priority. Its copy is a P0 by
    priority and stays a warning, so kube-prometheus-stack's critical-mutes-warning rule (same namespace
    and alertname) cannot let it mute the same P1 of another job, nor that job's copy this one."""
    p1 = am("GPUThermalThrottling", "warning", 20 * MIN, gpu="0", priority="P1")
    assert names(due_for_job([p1])) == ["GPUThermalThrottling"]
    copy = escalated(p1, ON, NOW, severity_style=MAPPED)
    assert copy["labels"] == p1["labels"] | {"priority": "P0", "severity": "warning", "escalated_from": "P1"}
    assert escalated(p1, ON, NOW)["labels"]["severity"] == "P0", "the grade style keeps severity P0"
    read_back = am("GPUThermalThrottling", "warning", 20 * MIN, fingerprint="fp-copy", ends_in_s=COPY_TTL_S)
    read_back["labels"] = copy["labels"]
    assert due_for_job([p1, read_back]) == [], "the copy is recognised as this P1's"
    assert ended([p1, read_back], ON, NOW, namespace=NS, training_job=NAME) == []


def test_a_p1_of_an_older_rule_without_priority_is_still_escalated() -> None:
    p1 = am("GPUThermalThrottling", "P1", 20 * MIN, gpu="0")
    assert "priority" not in p1["labels"]
    copy = escalated(p1, ON, NOW, severity_style=MAPPED)
    assert copy["labels"]["priority"] == "P0" and copy["labels"]["escalated_from"] == "P1"
    # its severity is the P1's grade: the post writes it as the mapped word (catalog/severity.styled)
    assert styled(copy["labels"], MAPPED)["severity"] == "warning"


def delivered(copy: dict[str, Any], now: float) -> Signal:
    """The posted copy as Alertmanager's webhook hands it to the receiver (it keeps the startsAt posted)."""
    alert = {k: copy[k] for k in ("labels", "annotations", "startsAt", "endsAt")} | {"status": "firing"}
    (signal,) = from_alertmanager({"version": "4", "status": "firing", "alerts": [alert]}, now)
    return signal


def test_an_escalated_nan_pins_a_checkpoint_saved_before_the_nan_not_before_its_escalation() -> None:
    """A TrainingLossNonFinite a policy lowered to P1 fired at the NaN and nobody acknowledged it: its P0
    copy reaches the operator through Alertmanager and is planned like any P0 NaN. The pin's cut-off
    comes from the copy's startsAt, so that is the P1's: a checkpoint saved 5 minutes after the NaN is
    not chosen, and the copy posted again on a later pass is the same instance (one record id)."""
    nan = NOW - 20 * MIN
    (p1,) = due_for_job([am("TrainingLossNonFinite", "P1", 20 * MIN)])
    copy = escalated(p1, ON, NOW)
    signal = delivered(copy, NOW + 30)
    done = plan(signal, monitor(), ClusterState(now=NOW + 30, gpu_nodes=4))
    pin = next(s for s in done.steps if s.kind == StepKind.PIN_CHECKPOINT)
    before_ts = float(pin.params["before_ts"])
    assert before_ts - nan <= 0, "the cut-off is at or before the NaN"
    assert signal.starts_at == parse_time(copy["startsAt"]) == nan, "the copy carries the fault's start"
    saved = [{"step": 900, "ts": nan - 10 * MIN}, {"step": 1000, "ts": nan + 5 * MIN}]
    chosen, _ = choose_checkpoint(saved, before_ts, None)
    assert chosen is not None and chosen["step"] == 900, "the checkpoint saved after the NaN is not pinned"

    later = delivered(escalated(p1, ON, NOW + 5 * MIN), NOW + 5 * MIN + 30)
    assert record_id(later) == record_id(signal) == done.record_id


def test_copies_end_when_their_p1_is_gone_acknowledged_or_escalation_is_off() -> None:
    p1 = am("GPUThermalThrottling", "P1", 20 * MIN, gpu="0")
    copy = am("GPUThermalThrottling", "P0", 20 * MIN, fingerprint="fp-copy")
    copy["labels"] = escalated(p1, ON, NOW)["labels"]
    other_job_copy = copy | {"labels": copy["labels"] | {"training_job": "bert-finetune"}}

    assert ended([p1, copy], ON, NOW, namespace=NS, training_job=NAME) == []
    (gone,) = ended([copy, other_job_copy], ON, NOW, namespace=NS, training_job=NAME)
    assert gone["labels"] == copy["labels"] and parse_time(gone["endsAt"]) == NOW
    assert parse_time(gone["startsAt"]) == NOW - 20 * MIN
    acked = p1 | {"status": {"state": "suppressed", "silencedBy": ["sil"], "inhibitedBy": []}}
    assert len(ended([acked, copy], ON, NOW, namespace=NS, training_job=NAME)) == 1
    assert len(ended([p1, copy], Settings(enabled=False), NOW, namespace=NS, training_job=NAME)) == 1


def test_settings_come_from_the_policy() -> None:
    assert settings(policy().spec.escalation) == Settings(enabled=True, after_s=900.0)
    changed = policy(**{"spec.escalation": {"enabled": False, "after": "1h30m"}}).spec.escalation
    assert settings(changed) == Settings(enabled=False, after_s=5400.0)


# ---- on a real Alertmanager: the status fields read back are the ones the decisions use ----


@pytest.fixture(scope="module")
def am_binary() -> str:
    path = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if path is None:
        pytest.skip("Alertmanager is not installed (.ci/run installs prometheus-alertmanager)")
    return path


def _read(url: str, want: int, muted: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Alertmanager's alerts once it has processed them all and muted `muted`: its inhibitor learns of a
    source alert asynchronously, so right after a post a target can read active for a moment (seen
    under load in CI); the operator reads alerts minutes old, never in that moment."""
    deadline = time.monotonic() + 15
    while True:
        got: list[dict[str, Any]] = http_json(f"{url}/api/v2/alerts")
        settled = all(a["status"]["state"] != "unprocessed" for a in got) and all(
            a["status"]["state"] == "suppressed" for a in got if a["labels"]["alertname"] in muted
        )
        if (len(got) == want and settled) or time.monotonic() > deadline:
            return got
        time.sleep(0.2)


@pytest.mark.tools
def test_on_a_real_alertmanager_acknowledged_and_inhibited_p1s_are_not_escalated(
    am_binary: str, tmp_path: Path
) -> None:
    config = write_config(tmp_path)  # the rendered config: node-down and job-P0 inhibitions
    with alertmanager(am_binary, config, tmp_path) as url:
        http_json(
            f"{url}/api/v2/alerts",
            [
                posted("GPUThermalThrottling", "P1", 20 * MIN, node="n1", gpu="0"),
                posted("GPUMemoryCritical", "P1", 20 * MIN, node="n1", gpu="1"),  # acknowledged
                posted("NetworkPacketLossHigh", "P1", 20 * MIN, node="n2", interface="ib0"),  # node down
                posted("GPUNodeDown", "P0", 1 * MIN, node="n2", training_job="bert-finetune"),
                posted("CheckpointStale", "P1", 5 * MIN),  # too young
            ],
        )
        http_json(
            f"{url}/api/v2/silences",
            {
                "matchers": [
                    {"name": "alertname", "value": "GPUMemoryCritical", "isRegex": False, "isEqual": True},
                    *({"name": k, "value": v, "isRegex": False, "isEqual": True} for k, v in JOB.items()),
                ],
                "startsAt": format_time(time.time()),
                "endsAt": format_time(time.time() + 3600),
                "createdBy": "test",
                "comment": "ack",
            },
        )
        alerts = _read(url, 5, muted=("GPUMemoryCritical", "NetworkPacketLossHigh"))
        now = time.time()
        todo = due(alerts, ON, now, namespace=NS, training_job=NAME)
        assert names(todo) == ["GPUThermalThrottling"]

        http_json(f"{url}/api/v2/alerts", [escalated(a, ON, now) for a in todo])
        alerts = _read(url, 6)
        copies = [a for a in alerts if a["labels"].get("escalated_from") == "P1"]
        assert [(a["labels"]["alertname"], a["labels"]["severity"]) for a in copies] == [
            ("GPUThermalThrottling", "P0")
        ]
        p1 = next(
            a
            for a in alerts
            if a["labels"]["alertname"] == "GPUThermalThrottling" and a["labels"]["severity"] == "P1"
        )
        # Alertmanager keeps the startsAt posted, and the earliest on a re-post of the same labels: the
        # copy reaches the operator dated from its P1's start, pass after pass
        assert parse_time(copies[0]["startsAt"]) == parse_time(p1["startsAt"])
        http_json(f"{url}/api/v2/alerts", [escalated(a, ON, time.time() + 60) for a in todo])
        (again,) = [a for a in _read(url, 6) if a["labels"].get("escalated_from") == "P1"]
        assert parse_time(again["startsAt"]) == parse_time(p1["startsAt"])
        assert parse_time(again["endsAt"]) > parse_time(copies[0]["endsAt"]), "the re-post moved only endsAt"
        # the copy does not mute its own P1 (nor the job's other alerts): the job-P0 inhibition's source
        # excludes escalated copies; the P1 stays escalated, nothing more is due
        assert p1["status"]["inhibitedBy"] == []
        assert due(alerts, ON, time.time(), namespace=NS, training_job=NAME) == []
        assert ended(alerts, ON, time.time(), namespace=NS, training_job=NAME) == []

        # acknowledged after escalation: the copy is resolved
        acked = p1 | {"status": {"state": "suppressed", "silencedBy": ["s"], "inhibitedBy": []}}
        resolve = ended([acked, copies[0]], ON, time.time(), namespace=NS, training_job=NAME)
        http_json(f"{url}/api/v2/alerts", resolve)
        assert not any(a["labels"].get("escalated_from") for a in _read(url, 5))
