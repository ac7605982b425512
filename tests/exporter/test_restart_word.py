"""The in-place restart through the sidecar: the operator posts a restart word (checked whole, a 400
naming the field), the launcher reports its trainer, and GET /v1/control shows both, so the operator
knows which pods can restart in place and which generation each runs. A trainer that ends by itself,
failed, is TrainingInterrupted by the fast path: its pod lives on, no pod state will show it."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.clock import T0, Clock
from tests.exporter.fastpath_receiver import receiver
from tests.exporter.running import running_exporter
from trainguard.catalog import control_auth
from trainguard.exporter.restarts import LAUNCHER_STALE_S, interruption, launcher_state, restart_word
from trainguard.exporter.training import TrainingState

CKPT = {"step": 900, "kind": "full", "path": "/ckpt/900", "ts": T0 - 50}


def authed_post(url: str, body: Any, token: str) -> Any:
    """POST /v1/control signed with `token`, as the operator calls it (catalog/control_auth.py)."""
    data = json.dumps(body).encode()
    signed = control_auth.authorization(
        token, control_auth.Call("POST", "/v1/control", data), now=time.time()
    )
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": signed})  # fmt: skip
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def report(event: str, state: str = "running", generation: int = 0, **more: Any) -> dict[str, Any]:
    return {"type": "launcher", "event": event, "state": state, "pid": 7, "generation": generation,
            "child": 8, **more}  # fmt: skip


def test_a_word_is_kept_as_posted_and_shown_with_the_launchers_report() -> None:
    clock = Clock()
    t = TrainingState(clock=clock)
    assert t.control_view()["restart"] is None and t.control_view()["launcher"] is None
    t.ingest(report("hello"))
    word = {"generation": 2, "record": "r1", "resume_from": CKPT, "rank": 1, "world_size": 2, "future": 1}
    t.set_control({"restart": word})
    view = t.control_view()
    assert view["restart"] == {"generation": 2, "record": "r1", "resume_from": {**CKPT, "step": 900.0},
                               "rank": 1, "world_size": 2}  # fmt: skip
    assert view["launcher"]["generation"] == 0 and view["launcher"]["alive"] is True
    t.ingest(report("started", generation=2))
    assert t.control_view()["launcher"]["generation"] == 2


@pytest.mark.parametrize(
    ("word", "field"),
    [
        ({"record": "r"}, "restart.generation"),
        ({"generation": 0}, "restart.generation"),
        ({"generation": True}, "restart.generation"),
        ({"generation": 1, "record": 3}, "restart.record"),
        ({"generation": 1, "resume_from": {"step": -1}}, "restart.resume_from.step"),
        ({"generation": 1, "resume_from": {"step": 1, "kind": "partial"}}, "restart.resume_from.kind"),
        ({"generation": 1, "master_port": 70000}, "restart.master_port"),
        ({"generation": 1, "master_addr": ""}, "restart.master_addr"),
        ({"generation": 1, "rank": 2, "world_size": 2}, "restart.rank"),
        ([1], "restart must be an object"),
    ],
)
def test_a_word_a_launcher_cannot_use_is_refused_naming_the_field(word: Any, field: str) -> None:
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        restart_word(word)


def test_a_refused_word_changes_nothing_and_an_older_generation_is_refused() -> None:
    t = TrainingState(clock=Clock())
    t.set_control({"restart": {"generation": 3, "resume_from": None}})
    with pytest.raises(ValueError, match=r"restart\.generation 2 is older"):
        t.set_control({"restart": {"generation": 2}, "pause": True})
    with pytest.raises(ValueError, match=r"restart\.generation"):
        t.set_control({"restart": {"generation": "4"}, "pause": True})
    view = t.control_view()
    assert view["restart"]["generation"] == 3 and view["pause"] is False, "checked whole, nothing changed"
    t.set_control({"restart": {"generation": 3}})  # the executor's redo posts the same word again
    assert t.control_view()["restart"]["generation"] == 3


def test_a_launcher_not_heard_from_is_not_counted_on_and_its_bye_ends_it() -> None:
    clock = Clock()
    t = TrainingState(clock=clock)
    t.ingest(report("hello"))
    clock.sleep(LAUNCHER_STALE_S + 1)
    assert t.control_view()["launcher"]["alive"] is False
    t.ingest(report("alive"))
    assert t.control_view()["launcher"]["alive"] is True
    t.ingest(report("bye", state="gone"))
    assert t.control_view()["launcher"]["alive"] is False


def test_the_sidecar_does_not_exit_after_bye_while_a_launcher_restarts_its_trainer() -> None:
    clock = Clock()
    t = TrainingState(clock=clock)
    t.ingest(report("started", generation=0))
    t.ingest({"type": "hello", "pid": 100, "started_at": T0})
    t.ingest({"type": "bye", "pid": 100})  # killed for generation 1: the next trainer is coming
    assert not t.trainers_done()
    t.ingest(report("bye", state="gone", generation=1))
    assert t.trainers_done()


def test_reports_it_cannot_read_are_dropped() -> None:
    assert launcher_state({"event": "started", "state": "running", "pid": 0, "generation": 1}) is None
    assert launcher_state({"event": "reboot", "state": "running", "pid": 3, "generation": 1}) is None
    assert launcher_state({"event": "started", "state": "asleep", "pid": 3, "generation": 1}) is None
    assert launcher_state({"event": "started", "state": "running", "pid": 3, "generation": -1}) is None


@pytest.mark.parametrize(
    ("more", "reason"),
    [
        ({"cause": "exit", "code": 1}, "TrainerExited(exit 1)"),
        ({"cause": "exit", "signal": 9}, "TrainerKilled(SIGKILL)"),
        ({"cause": "exit", "code": 0}, None),
        ({"cause": "restart", "signal": 15}, None),
        ({"cause": "signal", "signal": 15}, None),
    ],
)
def test_only_a_trainer_that_failed_by_itself_interrupted_training(
    more: dict[str, Any], reason: str | None
) -> None:
    state = launcher_state(report("exited", state="waiting", **more))
    assert state is not None and interruption(state) == reason


def test_a_failed_trainer_is_training_interrupted_by_the_fast_path_and_a_400_names_the_field(
    tmp_path: Path,
) -> None:
    control, identity = tmp_path / "token", tmp_path / "identity"
    control.write_text("ctl\n")
    identity.write_text("pod-token\n")
    with (
        receiver("pod-token") as rcv,
        running_exporter(
            "--backend",
            "none",
            "--no-host",
            "--fastpath-url",
            rcv.url,
            "--fastpath-token-file",
            str(control),
            "--fastpath-identity-file",
            str(identity),
        ) as exp,  # fmt: skip
    ):
        with pytest.raises(urllib.error.HTTPError) as refused:
            authed_post(f"{exp.url}/v1/control", {"restart": {"generation": 1, "master_port": 0}}, "ctl")
        assert refused.value.code == 400
        assert "restart.master_port must be an integer from 1 to 65535" in refused.value.read().decode()
        exp.post("/v1/report", {"events": [report("exited", state="waiting", cause="restart", signal=15)]})
        exp.post("/v1/report", {"events": [report("exited", state="waiting", cause="exit", signal=9)]})
        deadline = time.monotonic() + 5
        while not rcv.got and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(rcv.got) == 1, "only the trainer that died by itself"
        labels = rcv.got[0][2]["labels"]
        assert labels["alertname"] == "TrainingInterrupted" and labels["severity"] == "P0"
        assert (labels["pod"], labels["node"], labels["reason"]) == (
            "llama-0",
            "gpu-node-1",
            "TrainerKilled(SIGKILL)",
        )
        view = authed_post(f"{exp.url}/v1/control", {"restart": {"generation": 1}}, "ctl")
        assert view["restart"]["generation"] == 1 and view["launcher"]["state"] == "waiting"
