"""Remediation first: from a signal's arrival to its record's cordon, reconciles about to start wait
(remediation/urgency.py), and no stream of signals can hold them for more than half the time."""

from __future__ import annotations

import threading
import time
from typing import Any

from tests.clock import Clock
from tests.remediation.fakes import loop_rig, p0_signal
from trainguard.remediation.model import Phase, StepKind
from trainguard.remediation.urgency import Urgency, cordon_pending

JOB = ("ml", "llama-pretrain")
OTHER = ("ml", "other")


def test_a_hold_lasts_until_it_ends_or_for_hold_s() -> None:
    clock = Clock()
    urgency = Urgency(5.0, clock=clock)
    assert not urgency.held()
    urgency.begin(JOB)
    assert urgency.held()
    urgency.end(JOB)
    assert not urgency.held()
    urgency.begin(OTHER)
    clock.sleep(4.9)
    assert urgency.held()
    clock.sleep(0.2)
    assert not urgency.held(), "a hold nobody ends expires"


def test_a_job_whose_signals_keep_coming_opens_a_hold_once_per_cooldown() -> None:
    clock = Clock()
    urgency = Urgency(5.0, cooldown_s=30.0, clock=clock)
    urgency.begin(JOB)
    urgency.end(JOB)
    clock.sleep(10)
    urgency.begin(JOB)  # the same job again: Alertmanager's repeat, the detection pass's next round
    assert not urgency.held()
    urgency.begin(OTHER)  # another job is not held back by it
    assert urgency.held()
    urgency.end(OTHER)
    clock.sleep(21)
    urgency.begin(JOB)
    assert urgency.held()


def test_after_a_whole_hold_closed_the_gate_stays_open_as_long() -> None:
    """Signals of ever new jobs, one a second: the reconciles wait 5 s, then run 5 s, and so on."""
    clock = Clock()
    urgency = Urgency(5.0, clock=clock)
    seen = []
    for n in range(20):
        urgency.begin(("ml", f"job-{n}"))
        seen.append(urgency.held())
        clock.sleep(1)
    assert seen == ([True] * 5 + [False] * 5) * 2


def test_zero_turns_it_off() -> None:
    urgency = Urgency(0)
    urgency.begin(JOB)
    assert not urgency.held()
    assert urgency.wait() == 0.0


def test_a_waiting_reconcile_goes_on_the_moment_the_hold_ends() -> None:
    urgency = Urgency(30.0)
    urgency.begin(JOB)
    threading.Timer(0.2, urgency.end, args=(JOB,)).start()
    started = time.monotonic()
    waited = urgency.wait()
    assert 0.1 < waited < 5 and time.monotonic() - started < 5
    assert urgency.waited_s == waited


def test_a_wait_never_lasts_longer_than_a_hold() -> None:
    urgency = Urgency(0.3)
    urgency.begin(JOB)
    assert 0.2 < urgency.wait() < 2


def test_a_record_holds_until_its_cordon_is_done() -> None:
    def record(*phases: tuple[str, str]) -> dict[str, Any]:
        return {"steps": [{"kind": k, "phase": p} for k, p in phases]}

    assert cordon_pending(record((StepKind.CONFIRM_FAULT, Phase.SUCCEEDED), (StepKind.CORDON, Phase.PLANNED)))
    assert cordon_pending(record((StepKind.CORDON, Phase.IN_PROGRESS)))
    assert not cordon_pending(
        record((StepKind.CORDON, Phase.SUCCEEDED), (StepKind.RESTART_GANG, Phase.PLANNED))
    )
    assert not cordon_pending(record((StepKind.CORDON, Phase.DRY_RUN)))
    assert not cordon_pending(record((StepKind.RESTART_GANG, Phase.PLANNED)))  # no cordon: planned is enough
    assert not cordon_pending(None)


def test_the_p0_loop_holds_from_the_receiver_to_the_cordon_and_no_longer() -> None:
    urgency = Urgency(3600.0, cooldown_s=0)
    responder, kube, cluster = loop_rig(urgency=urgency)
    at_cordon: list[bool] = []
    cordon = cluster.cordon

    def watched(node: str, reason: str, record_id: str) -> str:
        at_cordon.append(urgency.held())
        return cordon(node, reason, record_id)

    cluster.cordon = watched  # type: ignore[method-assign]
    signal = p0_signal("GPUCriticalXid")
    responder.receive([signal])
    assert urgency.held(), "held from the moment the receiver took it"
    assert responder.planner.try_handle(signal)
    assert responder.idle()
    assert at_cordon == [True], "held up to the cordon"
    assert not urgency.held(), "ended once the cordon is done, not when the whole record is"
    assert kube.records(*JOB)[0]["phase"] == Phase.SUCCEEDED

    responder.receive([signal])  # the same fault again: the planner decides it is the same record
    assert urgency.held()
    assert responder.planner.try_handle(signal)
    assert not urgency.held(), "a signal decided without a record ends its hold"


def test_a_signal_for_a_job_nobody_monitors_holds_nothing() -> None:
    urgency = Urgency(3600.0)
    responder, _, _ = loop_rig(urgency=urgency)
    stray = p0_signal("GPUCriticalXid")
    stray.labels["training_job"] = "no-such-job"
    responder.receive([stray])
    assert not urgency.held()


def test_the_gate_counts_its_holds_waits_and_forced_openings_for_the_metrics() -> None:
    clock = Clock()
    urgency = Urgency(5.0, cooldown_s=30.0, clock=clock)
    assert urgency.wait() == 0.0 and urgency.waits == 0, "an open gate is no wait"
    urgency.begin(JOB)
    urgency.begin(JOB)  # within its cooldown: no second hold
    assert urgency.holds == 1
    for n in range(6):  # new jobs, one a second: closed 5 s, then forced open
        urgency.begin(("ml", f"job-{n}"))
        urgency.held()
        clock.sleep(1)
    assert urgency.holds == 7 and urgency.forced_open == 1
    urgency.end(JOB)
    held = Urgency(30.0)
    held.begin(JOB)
    threading.Timer(0.2, held.end, args=(JOB,)).start()
    waited = held.wait()
    assert held.waits == 1 and held.waited_s == waited > 0.1
