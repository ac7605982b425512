"""The SDK's hello (sent first, and again for each new exporter instance) gives a restarted sidecar
back what it lost: when training started and the last checkpoints. The start time is exported from
the exporter's own start, so stall and checkpoint rules have a reference before the first step."""

from __future__ import annotations

import re

from tests.exporter.running import running_exporter
from trainguard.exporter.training import TrainingState

T0 = 1_700_000_000.0


def state(now: float = T0) -> TrainingState:
    return TrainingState(clock=lambda: now)


def hello(**fields: object) -> dict[str, object]:
    return {"type": "hello", "started_at": T0 - 100, "pid": 42, "visible_devices": None} | fields


def test_start_time_is_known_before_any_step_and_moves_back_to_the_trainers_start() -> None:
    with running_exporter("--backend", "none", "--no-host") as exp:
        started = exp.value("trainguard_train_start_timestamp_seconds")
        assert started is not None and exp.value("trainguard_train_last_step_timestamp_seconds") is None
        exp.post("/v1/report", {"events": [hello(started_at=started - 3600)]})
        assert exp.value("trainguard_train_start_timestamp_seconds") == started - 3600
        exp.post("/v1/report", {"events": [hello(started_at=started + 60)]})
        assert exp.value("trainguard_train_start_timestamp_seconds") == started - 3600, "the earlier one"


def test_a_bad_started_at_is_ignored() -> None:
    t = state()
    for bad in ("soon", None, float("nan"), -5.0, 0):
        t.ingest(hello(started_at=bad))
    assert t.snapshot().start_ts == T0


def test_hello_restores_checkpoints_a_restarted_sidecar_forgot() -> None:
    t = state()
    t.ingest(hello(checkpoints={"full": {"step": 900, "ts": T0 - 50, "path": "/ckpt/900"},
                                "incremental": {"step": 950, "ts": T0 - 10, "path": "/ckpt/950i"}}))  # fmt: skip
    v = t.snapshot()
    assert v.checkpoint_ts == {"full": T0 - 50, "incremental": T0 - 10}
    assert v.checkpoint_step == {"full": 900, "incremental": 950}
    assert t.control_view()["resume_from"] == {"step": 950, "kind": "incremental", "path": "/ckpt/950i"}


def test_hello_never_rolls_back_what_the_exporter_knows() -> None:
    t = state()
    t.set_control({"checkpoint": "full"})
    t.ingest({"type": "checkpoint", "kind": "incremental", "step": 1000, "ts": T0 - 5, "path": "/ckpt/1000i"})
    t.ingest(hello(checkpoints={"incremental": {"step": 800, "ts": T0 - 60, "path": "/old"},
                                "full": {"step": 700, "ts": T0 - 70, "path": "/ckpt/700"}}))  # fmt: skip
    v = t.snapshot()
    assert v.checkpoint_step == {"incremental": 1000, "full": 700}, "an older incremental is not restored"
    control = t.control_view()
    assert control["resume_from"] == {"step": 1000, "kind": "incremental", "path": "/ckpt/1000i"}
    assert control["checkpoint"] == "full", "a restored checkpoint is not the one the operator asked for"


def test_hello_carries_the_training_containers_visible_devices() -> None:
    t = state()
    t.ingest(hello(visible_devices="GPU-a,GPU-b"))
    assert t.reported_visible_devices() == "GPU-a,GPU-b"
    t.ingest({"type": "step", "step": 1})
    assert t.reported_visible_devices() == "GPU-a,GPU-b"


def test_the_control_view_names_this_exporter_instance() -> None:
    a, b = state(), state()
    instance = a.control_view()["instance"]
    assert re.fullmatch(r"[0-9a-f]{16}", instance)
    assert a.control_view()["instance"] == instance, "stable for the exporter's life"
    assert b.control_view()["instance"] != instance, "a restarted exporter is a new instance"
