"""The SDK's hello (sent first, and again for each new exporter instance) gives a restarted sidecar
back what it lost: when training started, its last step and the last checkpoints. The start time is
exported only once a trainer has said hello: a sidecar whose trainer runs no SDK (or is still being
pulled, or loading its model) must not look like a job that has not stepped since the sidecar started."""

from __future__ import annotations

import re
import time

from tests.exporter.running import running_exporter
from trainguard.exporter.training import TrainingState

T0 = 1_700_000_000.0


def state(now: float = T0) -> TrainingState:
    return TrainingState(clock=lambda: now)


def hello(**fields: object) -> dict[str, object]:
    return {"type": "hello", "started_at": T0 - 100, "pid": 42, "visible_devices": None} | fields


def test_no_start_time_is_exported_until_a_trainer_says_hello() -> None:
    with running_exporter("--backend", "none", "--no-host") as exp:
        assert exp.value("trainguard_train_start_timestamp_seconds") is None, "no trainer: no stall reference"
        exp.post("/v1/report", {"events": [{"type": "step", "step": 1}]})
        assert exp.value("trainguard_train_start_timestamp_seconds") is None, "a step is not a hello"
        now = time.time()
        exp.post("/v1/report", {"events": [hello(started_at=now - 3600)]})
        assert exp.value("trainguard_train_start_timestamp_seconds") == now - 3600, "the trainer's start"
        exp.post("/v1/report", {"events": [hello(started_at=now + 60, pid=43)]})
        assert exp.value("trainguard_train_start_timestamp_seconds") == now - 3600, "the earliest hello's"


def test_the_start_is_the_hellos_not_the_exporters() -> None:
    t = state()
    assert t.snapshot().start_ts is None
    t.ingest(hello(started_at=T0 + 30))  # a trainer that started after the sidecar
    assert t.snapshot().start_ts == T0 + 30


def test_a_restarted_sidecar_gets_the_last_step_back_and_judges_a_stall_from_it() -> None:
    t = state()
    t.ingest(hello(started_at=T0 - 7200, last_step={"step": 5000, "ts": T0 - 20}))
    v = t.snapshot()
    assert (v.start_ts, v.step, v.last_step_ts) == (T0 - 7200, 5000, T0 - 20)


def test_the_last_step_of_a_hello_never_rolls_back_a_newer_one() -> None:
    t = state()
    t.ingest({"type": "step", "step": 6000, "ts": T0 - 5})
    t.ingest(hello(last_step={"step": 5000, "ts": T0 - 20}))
    v = t.snapshot()
    assert (v.step, v.last_step_ts) == (6000, T0 - 5)
    t.ingest(hello(last_step={"step": 6001, "ts": T0 - 1}))
    assert (t.snapshot().step, t.snapshot().last_step_ts) == (6001, T0 - 1)


def test_a_missing_or_bad_last_step_changes_nothing() -> None:
    t = state()
    for bad in (None, "soon", {"step": "x", "ts": T0}, {"step": 3, "ts": float("nan")}, {"step": 3}):
        t.ingest(hello(last_step=bad))
    v = t.snapshot()
    assert (v.step, v.last_step_ts) == (None, None)


def test_a_bad_started_at_is_ignored_but_the_trainer_exists_from_its_hello() -> None:
    t = state()
    for bad in ("soon", None, float("nan"), -5.0, 0):
        t.ingest(hello(started_at=bad))
    assert t.snapshot().start_ts == T0, "the hello's arrival"


def test_hello_restores_checkpoints_a_restarted_sidecar_forgot() -> None:
    t = state()
    t.ingest(hello(checkpoints={"full": {"step": 900, "ts": T0 - 50, "path": "/ckpt/900"},
                                "incremental": {"step": 950, "ts": T0 - 10, "path": "/ckpt/950i"}}))  # fmt: skip
    v = t.snapshot()
    assert v.checkpoint_ts == {"full": T0 - 50, "incremental": T0 - 10}
    assert v.checkpoint_step == {"full": 900, "incremental": 950}
    resume = {"step": 950, "kind": "incremental", "path": "/ckpt/950i", "ts": T0 - 10}
    assert t.control_view()["resume_from"] == resume


def test_hello_never_rolls_back_what_the_exporter_knows() -> None:
    t = state()
    t.set_control({"checkpoint": "full"})
    t.ingest({"type": "checkpoint", "kind": "incremental", "step": 1000, "ts": T0 - 5, "path": "/ckpt/1000i"})
    t.ingest(hello(checkpoints={"incremental": {"step": 800, "ts": T0 - 60, "path": "/old"},
                                "full": {"step": 700, "ts": T0 - 70, "path": "/ckpt/700"}}))  # fmt: skip
    v = t.snapshot()
    assert v.checkpoint_step == {"incremental": 1000, "full": 700}, "an older incremental is not restored"
    control = t.control_view()
    assert control["resume_from"] == {
        "step": 1000,
        "kind": "incremental",
        "path": "/ckpt/1000i",
        "ts": T0 - 5,
    }
    assert control["checkpoint"] == "full", "a restored checkpoint is not the one the operator asked for"


def test_hello_carries_the_training_containers_visible_devices() -> None:
    t = state()
    t.ingest(hello(visible_devices="GPU-a,GPU-b"))
    assert t.reported_visible_devices() == "GPU-a,GPU-b"
    t.ingest({"type": "step", "step": 1})
    assert t.reported_visible_devices() == "GPU-a,GPU-b"
    t.ingest(hello(visible_devices="GPU-c"))
    assert t.reported_visible_devices() == "GPU-c", "a newer specific set replaces the older"


def test_a_later_hello_naming_no_gpu_keeps_the_assignment_learnt() -> None:
    """A second process of the pod (a data worker, a launcher) may have no NVIDIA_VISIBLE_DEVICES, or
    "all": that says nothing about which GPUs are the pod's."""
    t = state()
    t.ingest(hello(visible_devices="GPU-a,GPU-b"))
    for vague in (None, "all", "void", "none", "", "ALL"):
        t.ingest(hello(visible_devices=vague, pid=43))
        assert t.reported_visible_devices() == "GPU-a,GPU-b", vague
    t.ingest({"type": "hello", "pid": 44})  # no visible_devices key at all
    assert t.reported_visible_devices() == "GPU-a,GPU-b"


def test_training_is_over_once_every_pid_that_said_hello_said_bye() -> None:
    t = state()
    assert not t.trainers_done(), "nobody said hello: nothing is over"
    t.ingest(hello(pid=10))
    t.ingest(hello(pid=11))
    t.ingest({"type": "bye", "pid": 10})
    assert not t.trainers_done(), "pid 11 still trains"
    t.ingest({"type": "bye", "pid": "11"})
    assert not t.trainers_done(), "a pid that is not a number is no bye"
    t.ingest({"type": "bye", "pid": 11})
    assert t.trainers_done()
    t.ingest(hello(pid=11))  # the same process started a new Reporter: it trains again
    assert not t.trainers_done()


def test_the_control_view_names_this_exporter_instance() -> None:
    a, b = state(), state()
    instance = a.control_view()["instance"]
    assert re.fullmatch(r"[0-9a-f]{16}", instance)
    assert a.control_view()["instance"] == instance, "stable for the exporter's life"
    assert b.control_view()["instance"] != instance, "a restarted exporter is a new instance"
