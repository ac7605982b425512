"""A trainer that `trainguard launch` restarted on the operator's word resumes from the checkpoint in
TRAINGUARD_RESUME_FROM (the newest every rank has), ahead of what its own sidecar holds, and from its
own newer saves after that. Against a real exporter."""

from __future__ import annotations

import json
import logging

import pytest

from tests.clock import T0
from tests.exporter.running import running_exporter
from trainguard.sdk import Reporter

SIDECAR = {"step": 900, "kind": "full", "path": "/ckpt/900", "ts": T0 - 100}
GANG = {"step": 1000, "kind": "full", "path": "/ckpt/1000", "ts": T0 - 50}


def test_the_launchers_checkpoint_comes_first_then_this_process_s_own_newer_saves(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRAINGUARD_RESUME_FROM", json.dumps(GANG))
    with running_exporter("--backend", "none", "--no-host") as exp:
        exp.exporter.training.set_control({"resume_from": SIDECAR})
        tg = Reporter(exp.url, flush_interval_s=60.0, control_interval_s=60.0)
        try:
            assert tg.resume_from() == GANG
            tg.checkpoint_saved(1100, "incremental", "/ckpt/1100")
            assert tg.resume_from()["step"] == 1100, "a checkpoint saved since is newer"
        finally:
            tg.close()


def test_without_the_variable_or_with_a_bad_one_the_sidecar_answers(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="trainguard.sdk")
    with running_exporter("--backend", "none", "--no-host") as exp:
        exp.exporter.training.set_control({"resume_from": SIDECAR})
        for value in ("", '{"step": "ten"}'):
            monkeypatch.setenv("TRAINGUARD_RESUME_FROM", value)
            tg = Reporter(exp.url, flush_interval_s=60.0, control_interval_s=60.0)
            try:
                assert tg.resume_from() == {**SIDECAR, "step": 900.0}
            finally:
                tg.close()
    assert [r for r in caplog.records if "TRAINGUARD_RESUME_FROM is not a checkpoint" in r.getMessage()]
