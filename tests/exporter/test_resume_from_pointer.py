"""After a gang restart the recreated pods get new sidecars that know nothing; the operator wrote the
checkpoint to resume from on the workload (trainguard.io/resume-from), and the webhook hands it to the
sidecar as TRAINGUARD_RESUME_FROM (--resume-from). The sidecar holds it as a pin, so the new trainer's
Reporter.resume_from() answers it; every trainer of the pod resumed from it, so the first checkpoint
saved past it ends the pin."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from tests.exporter.running import running_exporter
from trainguard.exporter.flags import add_arguments
from trainguard.exporter.training import TrainingState
from trainguard.sdk import Reporter

POINTER = '{"path": "/ckpt/1100", "step": 1100}'  # as the executor writes the annotation


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_new_trainer_resumes_from_the_pointer(tmp_path: Path) -> None:
    sock = str(tmp_path / "sdk.sock")
    with running_exporter("--backend", "none", "--no-host", "--resume-from", POINTER, socket_path=sock,
                          sdk_tcp=False) as exp:  # fmt: skip
        view = exp.exporter.training.control_view()
        assert view["pinned"] is True
        tg = Reporter(f"unix://{sock}", flush_interval_s=0.05, control_interval_s=0.05)
        try:
            assert tg.resume_from() == {"step": 1100, "kind": None, "path": "/ckpt/1100", "ts": None}
        finally:
            tg.close()


def test_the_pointer_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "TRAINGUARD_RESUME_FROM", '{"step": 1100, "path": "/ckpt/1100", "kind": "full", "ts": 1.7e9}'
    )
    assert parse().resume_from == {"step": 1100, "kind": "full", "path": "/ckpt/1100", "ts": 1.7e9}
    monkeypatch.setenv("TRAINGUARD_RESUME_FROM", "")  # the webhook sets it empty when there is none
    assert parse().resume_from is None
    monkeypatch.delenv("TRAINGUARD_RESUME_FROM")
    assert parse().resume_from is None and parse("--resume-from", "null").resume_from is None


@pytest.mark.parametrize("bad", ["{step: 1100}", '{"path": "/ckpt/1100"}', '{"step": "1100"}', "[1100]"])
def test_a_pointer_the_trainer_could_not_use_stops_the_exporter_with_the_reason(
    bad: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused at start rather than ignored: a trainer that found no pointer would start over."""
    monkeypatch.setenv("TRAINGUARD_RESUME_FROM", bad)
    with pytest.raises(SystemExit) as exc:
        parse()
    assert exc.value.code == 2
    assert "TRAINGUARD_RESUME_FROM" in capsys.readouterr().err


def test_the_pointer_ends_at_the_first_checkpoint_saved_past_it() -> None:
    t = TrainingState(resume_from=parse("--resume-from", POINTER).resume_from)
    t.ingest({"type": "checkpoint", "step": 200, "kind": "full", "path": "/ckpt/200", "ts": 1.0})
    assert t.control_view()["resume_from"]["step"] == 1100, "a trainer that started over is not past it"
    # no started_at (an older SDK): every trainer of this pod started from the pointer all the same
    t.ingest({"type": "checkpoint", "step": 1200, "kind": "full", "path": "/ckpt/1200", "ts": 2.0})
    view = t.control_view()
    assert view["pinned"] is False and view["resume_from"]["step"] == 1200


def test_the_operator_pinning_the_pointer_again_holds_it_against_the_running_trainer() -> None:
    """A NaN in the restarted gang before its first checkpoint: the newest good one is the pointer
    itself, pinned again by the operator, and the trainer that ran on does not end it."""
    t = TrainingState(resume_from=parse("--resume-from", POINTER).resume_from, clock=lambda: 1000.0)
    t.set_control({"resume_from": json.loads(POINTER)})
    t.ingest({"type": "checkpoint", "step": 1200, "kind": "full", "path": "/ckpt/1200", "ts": 1005.0,
              "started_at": 900.0})  # fmt: skip
    assert t.control_view()["pinned"] is True and t.control_view()["resume_from"]["step"] == 1100


REJOIN = '{"step": 1100, "path": "/ckpt/1100", "generation": 3, "record": "rem-1"}'
"""The pointer on a gang whose healthy ranks restart in place while this pod replaces one rank."""


def test_a_pointer_with_a_generation_is_held_as_the_launchers_word_from_the_start() -> None:
    """The launcher reads the word its sidecar holds before its first trainer (launch/decide.py begin):
    the replacement's first trainer joins generation 3's rendezvous, not generation 0's, which the
    gang has left."""
    t = TrainingState(resume_from=parse("--resume-from", REJOIN).resume_from)
    view = t.control_view()
    pointer = {"step": 1100, "kind": None, "path": "/ckpt/1100", "ts": None}
    assert view["resume_from"] == pointer and view["pinned"] is True, "the pin has no word fields"
    assert view["restart"] == {"generation": 3, "record": "rem-1", "resume_from": pointer}


def test_a_pointer_without_a_generation_holds_no_word() -> None:
    assert (
        TrainingState(resume_from=parse("--resume-from", POINTER).resume_from).control_view()["restart"]
        is None
    )


@pytest.mark.parametrize("generation", ["0", "-1", '"3"', "true", "1.5"])
def test_a_pointer_with_a_generation_the_launcher_could_not_use_stops_the_exporter(
    generation: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TRAINGUARD_RESUME_FROM", f'{{"step": 1100, "generation": {generation}}}')
    with pytest.raises(SystemExit):
        parse()
    assert "pointer.generation must be an integer >= 1" in capsys.readouterr().err
