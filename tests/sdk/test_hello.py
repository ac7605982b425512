"""The hello event: who this trainer is, sent first and again to a sidecar that restarted (its
control answer carries a new `instance`), with the checkpoints recorded before the restart."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.exporter.running import running_exporter
from tests.processes import wait_for
from tests.sdk.fakes import running_sidecar
from trainguard.sdk import Reporter

STARTED = 1_700_000_000.0


def control(instance: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"pause": False, "checkpoint": None, "advisories": [], "resume_from": None}
    if instance is not None:
        body["instance"] = instance
    return body


class Clock:
    def __init__(self) -> None:
        self.now = STARTED

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@pytest.fixture(autouse=True)
def visible_devices(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "GPU-8f2c,GPU-11aa")
    yield


def test_the_first_event_sent_is_hello() -> None:
    with running_sidecar(control("a")) as (sidecar, url):
        tg = Reporter(url, clock=Clock(), flush_interval_s=0.02, control_interval_s=0.02)
        tg.log_step(1, loss=1.0)
        tg.close()
    assert sidecar.batches[0][0] == {"type": "hello", "started_at": STARTED + 1, "pid": os.getpid(),
                                     "visible_devices": "GPU-8f2c,GPU-11aa", "checkpoints": {},
                                     "last_step": None}  # fmt: skip


def test_a_restarted_sidecar_gets_hello_again_with_the_checkpoints_recorded_before() -> None:
    with running_sidecar(control("a")) as (sidecar, url):
        tg = Reporter(url, clock=Clock(), flush_interval_s=0.02, control_interval_s=0.02)
        try:
            tg.checkpoint_saved(100, "incremental", "/ckpt/100")
            tg.checkpoint_saved(200, "incremental", "/ckpt/200")
            tg.checkpoint_saved(150, "full", "/ckpt/full-150", ok=False)  # a failed save is no checkpoint
            wait_for(
                "the three checkpoint reports",
                lambda: sum(e["type"] == "checkpoint" for e in sidecar.events) == 3,
                5,
                0.02,
            )
            gets = sidecar.control_gets
            wait_for("three more control reads", lambda: sidecar.control_gets >= gets + 3, 5, 0.02)
            assert len(sidecar.hellos()) == 1, "the same sidecar gets one hello"
            sidecar.control = control("b")  # it restarted: start time and checkpoint times are gone
            wait_for("the second hello", lambda: len(sidecar.hellos()) == 2, 5, 0.02)
            gets = sidecar.control_gets
            wait_for("three more control reads", lambda: sidecar.control_gets >= gets + 3, 5, 0.02)
            assert len(sidecar.hellos()) == 2
        finally:
            tg.close()
    again = sidecar.hellos()[1]
    assert again["started_at"] == STARTED + 1 and again["pid"] == os.getpid()
    assert again["visible_devices"] == "GPU-8f2c,GPU-11aa"
    assert again["checkpoints"] == {"incremental": {"step": 200, "ts": STARTED + 3, "path": "/ckpt/200"}}


def test_an_older_sidecar_without_instance_gets_one_hello() -> None:
    with running_sidecar(control(None)) as (sidecar, url):
        tg = Reporter(url, flush_interval_s=0.02, control_interval_s=0.02)
        try:
            tg.checkpoint_saved(10, "full", "/ckpt/10")
            wait_for("five control reads", lambda: sidecar.control_gets >= 5, 5, 0.02)
        finally:
            tg.close()
    assert len(sidecar.hellos()) == 1


def test_a_hello_pushed_out_of_a_full_queue_is_sent_again() -> None:
    with running_sidecar(control("a")) as (sidecar, url):
        tg = Reporter(url, start=False, queue_size=3, clock=Clock())
        for step in range(1, 6):  # the sidecar was slow to start: the hello was pushed out
            tg.log_step(step)
        tg.checkpoint_saved(5, "full", "/ckpt/5")
        # the first call asks the sidecar
        assert tg.resume_from() == {"step": 5, "kind": "full", "path": "/ckpt/5", "ts": STARTED + 7}
        tg.flush()
    assert [e["type"] for e in sidecar.events] == ["step", "checkpoint", "hello"]
    assert sidecar.hellos()[0]["checkpoints"] == {"full": {"step": 5, "ts": STARTED + 7, "path": "/ckpt/5"}}


def test_a_restarted_sidecar_gets_the_newest_step_in_the_hello() -> None:
    with running_sidecar(control("a")) as (sidecar, url):
        tg = Reporter(url, clock=Clock(), flush_interval_s=0.02, control_interval_s=0.02)
        try:
            tg.log_step(41, loss=1.0)
            tg.log_step(42, loss=1.0)
            wait_for(
                "the two step reports", lambda: sum(e["type"] == "step" for e in sidecar.events) == 2, 5, 0.02
            )
            # the Reporter must have seen instance "a" before it changes: this test is about a sidecar
            # that restarts after answering (one that restarts before is the last test's case)
            wait_for("a control read", lambda: sidecar.control_gets >= 1, 5, 0.02)
            sidecar.control = control("b")
            wait_for("the second hello", lambda: len(sidecar.hellos()) == 2, 5, 0.02)
        finally:
            tg.close()
    assert sidecar.hellos()[0]["last_step"] is None, "no step yet at the first hello"
    assert sidecar.hellos()[1]["last_step"] == {"step": 42, "ts": STARTED + 3}


def test_a_restarted_exporter_knows_the_last_step_before_the_next_one(tmp_path: Path) -> None:
    """Single-pod job, sidecar restarted: the stall rule must not judge from the job's start (hours
    ago) until the trainer's next step report arrives."""
    sock = str(tmp_path / "sdk.sock")
    tg = Reporter(f"unix://{sock}", flush_interval_s=0.02, control_interval_s=0.02)
    try:
        with running_exporter("--backend", "none", "--no-host", socket_path=sock) as exp:
            tg.log_step(7, loss=1.0)
            wait_for("step 7 on the exporter", lambda: exp.value("trainguard_train_step") == 7, 5, 0.02)
            stepped = exp.value("trainguard_train_last_step_timestamp_seconds")
        with running_exporter("--backend", "none", "--no-host", socket_path=sock) as exp:  # no step since
            wait_for("step 7 on the exporter", lambda: exp.value("trainguard_train_step") == 7, 5, 0.02)
            assert exp.value("trainguard_train_last_step_timestamp_seconds") == stepped
    finally:
        tg.close()


def test_a_sidecar_that_restarts_right_after_taking_the_first_hello_gets_another() -> None:
    """The sidecar took the hello and restarted before the Reporter ever asked for its control: the
    Reporter must have learnt which sidecar took the hello before sending it, or the restarted one
    never hears who this trainer is (the Reporter asks before it sends)."""
    with running_sidecar(control("a")) as (sidecar, url):

        def restart_after_the_hello() -> None:
            if not sidecar.batches:  # the first report: the sidecar restarts once it has taken it
                sidecar.control = control("b")

        sidecar.on_report = restart_after_the_hello
        tg = Reporter(url, clock=Clock(), flush_interval_s=0.02, control_interval_s=0.02)
        try:
            wait_for("the second hello", lambda: len(sidecar.hellos()) == 2, 5, 0.02)
        finally:
            tg.close()
