"""The operator pins the checkpoint a job resumes from (after a NaN loss: the newest one saved before
it). While pinned, checkpoints reported by the trainers that went on after the pin do not move
resume_from: they saved the corrupted state. A trainer started after the pin resumed from it, so the
first checkpoint it saves past the pin ends it. Every resume_from carries the checkpoint's time, so
the operator can check that a checkpoint predates the fault."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.clock import T0, Clock
from tests.exporter.running import running_exporter
from trainguard.catalog import control_auth
from trainguard.exporter.training import CHECKPOINT_HISTORY, TrainingState

PIN = {"step": 900.0, "kind": "full", "path": "/ckpt/900", "ts": T0 - 50}


def ckpt(step: int, ts: float, started_at: float | None = T0 - 3600, kind: str = "full") -> dict[str, Any]:
    report: dict[str, Any] = {
        "type": "checkpoint",
        "step": step,
        "kind": kind,
        "path": f"/ckpt/{step}",
        "ts": ts,
    }
    if started_at is not None:
        report["started_at"] = started_at
    return report


def pinned(clock: Clock | None = None) -> TrainingState:
    """A sidecar whose trainer (started an hour ago) saved 900 and 1000, then the operator pinned 900."""
    t = TrainingState(clock=clock or Clock())
    t.ingest(ckpt(900, T0 - 50))
    t.ingest(ckpt(1000, T0 - 10))
    t.set_control({"resume_from": PIN})
    return t


def test_resume_from_carries_the_checkpoints_time() -> None:
    t = TrainingState(clock=Clock())
    t.ingest(ckpt(900, T0 - 50))
    assert t.control_view()["resume_from"] == {
        "step": 900,
        "kind": "full",
        "path": "/ckpt/900",
        "ts": T0 - 50,
    }
    t.ingest({"type": "checkpoint", "step": 950, "kind": "incremental", "path": "/ckpt/950"})  # no ts
    assert t.control_view()["resume_from"]["ts"] == T0, "the time the sidecar heard of it"


def test_a_pin_holds_against_checkpoints_saved_by_the_trainer_that_ran_on() -> None:
    t = pinned()
    view = t.control_view()
    assert view["resume_from"] == PIN and view["pinned"] is True
    t.ingest(ckpt(1100, T0 + 5))  # the same trainer, after the NaN: the corrupted state
    view = t.control_view()
    assert view["resume_from"] == PIN and view["pinned"] is True
    assert t.snapshot().checkpoint_step["full"] == 1100, "the checkpoint metrics still see every save"
    assert [c["step"] for c in view["checkpoints"]] == [900, 1000, 1100]


def test_a_pin_survives_hellos() -> None:
    t = pinned()
    hello = {"type": "hello", "pid": 7, "started_at": T0 - 3600,
             "checkpoints": {"full": {"step": 1200, "ts": T0 + 20, "path": "/ckpt/1200"}}}  # fmt: skip
    t.ingest(hello)
    assert t.control_view()["resume_from"] == PIN and t.control_view()["pinned"] is True
    # without started_at the hello's arrival stands in for the trainer's start: not for ending a pin
    t.ingest(
        {"type": "hello", "pid": 8, "checkpoints": {"full": {"step": 1300, "ts": T0 + 30, "path": "/c"}}}
    )
    assert t.control_view()["pinned"] is True


def test_a_trainer_started_after_the_pin_ends_it_by_saving_past_it() -> None:
    t = pinned()  # pinned at T0
    t.ingest(ckpt(800, T0 + 30, started_at=T0 + 10))
    assert t.control_view()["resume_from"] == PIN, "an older step from the resumed trainer is no reason"
    t.ingest(ckpt(950, T0 + 60, started_at=T0 + 10))
    view = t.control_view()
    assert view["pinned"] is False
    assert view["resume_from"] == {"step": 950, "kind": "full", "path": "/ckpt/950", "ts": T0 + 60}
    t.ingest(ckpt(1000, T0 + 90, started_at=T0 + 10))
    assert t.control_view()["resume_from"]["ts"] == T0 + 90, (
        "the resumed run's 1000, not the corrupted 1000 saved before the pin"
    )


def test_a_checkpoint_from_a_trainer_that_does_not_say_when_it_started_keeps_the_pin() -> None:
    t = pinned()
    t.ingest(ckpt(1100, T0 + 5, started_at=None))  # an older SDK
    assert t.control_view()["pinned"] is True


def test_null_lifts_the_pin_and_resume_from_is_the_newest_again() -> None:
    t = pinned()
    t.ingest(ckpt(1100, T0 + 5))
    t.set_control({"resume_from": None})
    view = t.control_view()
    assert view["pinned"] is False and view["resume_from"]["step"] == 1100
    t.ingest(ckpt(1200, T0 + 50))
    assert t.control_view()["resume_from"]["step"] == 1200


def test_the_same_pin_posted_again_keeps_its_time() -> None:
    """The executor redoes a step after an operator restart: a trainer that started between the two
    posts resumed from the pin, and its checkpoints end it."""
    clock = Clock()
    t = pinned(clock)
    clock.now = T0 + 100
    t.set_control({"resume_from": PIN})
    t.ingest(ckpt(950, T0 + 120, started_at=T0 + 50))
    assert t.control_view()["pinned"] is False


@pytest.mark.parametrize(
    "bad",
    [
        "900",
        [900],
        {"path": "/ckpt/900"},
        {"step": "900"},
        {"step": True},
        {"step": -1},
        {"step": float("inf")},
        {"step": 900, "kind": "best"},
        {"step": 900, "path": 900},
        {"step": 900, "path": ""},
        {"step": 900, "path": "x" * 5000},
        {"step": 900, "ts": "yesterday"},
        {"step": 900, "ts": -1},
    ],
)
def test_a_pin_the_trainer_could_not_use_is_refused_and_changes_nothing(bad: Any) -> None:
    t = pinned()
    before = t.control_view()
    with pytest.raises(ValueError, match="resume_from"):
        t.set_control({"pause": True, "resume_from": bad})
    assert t.control_view() == before, "nothing of a refused body applies, the pause included"


@pytest.mark.parametrize(
    "body",
    [
        {"pause": True, "checkpoint": "best"},
        {"checkpoint": "full", "pause": "false"},
        {"pause": True, "advisories": ["clip"]},
        {"pause": True, "advisories": {"advice": "clip"}},
    ],
)
def test_a_refused_control_body_changes_nothing(body: dict[str, Any]) -> None:
    t = TrainingState(clock=Clock())
    with pytest.raises(ValueError):
        t.set_control(body)
    view = t.control_view()
    assert (view["pause"], view["checkpoint"], view["advisories"]) == (False, None, [])


def test_unknown_keys_of_a_pin_are_ignored() -> None:
    """A newer operator may send more: an older sidecar still holds the pin."""
    t = TrainingState(clock=Clock())
    t.set_control({"resume_from": {**PIN, "reason": "NaN at 950"}})
    assert t.control_view()["resume_from"] == PIN


def test_the_control_view_lists_the_recent_checkpoints_oldest_first() -> None:
    t = TrainingState(clock=Clock())
    for step in range(0, 100 * (CHECKPOINT_HISTORY + 4), 100):
        t.ingest(ckpt(step, T0 + step, kind="incremental" if step % 200 else "full"))
    listed = t.control_view()["checkpoints"]
    assert len(listed) == CHECKPOINT_HISTORY
    assert [c["step"] for c in listed] == list(range(400, 100 * (CHECKPOINT_HISTORY + 4), 100))
    assert listed[-1] == {"step": 1900, "kind": "incremental", "path": "/ckpt/1900", "ts": T0 + 1900}
    t.ingest({"type": "checkpoint", "step": 2000, "kind": "full", "path": "/ckpt/2000", "ok": False})
    assert t.control_view()["checkpoints"][-1]["step"] == 1900, "a failed save is not a checkpoint"


def control(url: str, body: Any, token: str = "t0k3n") -> tuple[int, dict[str, Any]]:
    """POST /v1/control signed with `token`, as the operator calls it (catalog/control_auth.py)."""
    data = json.dumps(body).encode()
    signed = control_auth.authorization(
        token, control_auth.Call("POST", "/v1/control", data), now=time.time()
    )
    req = urllib.request.Request(
        f"{url}/v1/control", data=data, method="POST", headers={"Authorization": signed}
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_pin_over_http(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t0k3n\n")
    with running_exporter("--backend", "none", "--no-host", "--fastpath-token-file", str(token)) as exp:
        exp.post("/v1/report", {"events": [ckpt(900, T0 - 50), ckpt(1000, T0 - 10)]})
        code, view = control(exp.url, {"resume_from": PIN})
        assert code == 200 and view["resume_from"] == PIN and view["pinned"] is True
        code, answer = control(exp.url, {"resume_from": {"step": "nine hundred"}})
        assert code == 400 and "resume_from.step" in answer["error"]
        code, answer = control(exp.url, [{"pause": True}])
        assert code == 400, "a body that is not an object"
        exp.post("/v1/report", {"events": [ckpt(1100, T0 + 5)]})
        code, view = control(exp.url, {})
        assert view["resume_from"] == PIN and view["pinned"] is True and view["pause"] is False
