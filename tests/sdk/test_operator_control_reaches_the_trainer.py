"""What the operator posts to a sidecar reaches the trainer's Reporter through a real exporter over the
unix socket, as in a pod: a pause within the SDK's control refresh interval, and a pinned checkpoint,
which resume_from() prefers over the newer checkpoints this process saved (after a NaN those hold the
corrupted state), while should_checkpoint keeps working."""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator
from typing import Any

from tests.exporter.running import Running, running_exporter
from tests.processes import wait_for
from tests.sdk.fakes import running_sidecar
from trainguard.remediation.sidecars import SidecarControl
from trainguard.sdk import Reporter

TOKEN = "t0k3n"
REFRESH_S = 0.3
FLUSH_S = 0.05


@contextlib.contextmanager
def pod() -> Iterator[tuple[Running, Reporter]]:
    """A sidecar serving the SDK on its unix socket only, and a trainer's Reporter on that socket."""
    with tempfile.TemporaryDirectory(prefix="tg") as tmp:  # a short path: unix sockets have ~100 bytes
        with open(f"{tmp}/token", "w") as f:
            f.write(TOKEN)
        sock = f"{tmp}/sdk.sock"
        with running_exporter("--backend", "none", "--no-host", "--fastpath-token-file", f"{tmp}/token",
                              socket_path=sock, sdk_tcp=False) as exp:  # fmt: skip
            tg = Reporter(f"unix://{sock}", flush_interval_s=FLUSH_S, control_interval_s=REFRESH_S,
                          incremental_every=10, full_every=100)  # fmt: skip
            try:
                yield exp, tg
            finally:
                tg.close()


def operator(exp: Running, body: dict[str, Any]) -> dict[str, Any]:
    """The operator's call (remediation/sidecars.py): POST /v1/control on the sidecar's TCP port, signed."""
    return SidecarControl().control(exp.url, TOKEN, body)


def within(cond: Any, seconds: float) -> float:
    """How long cond took to hold; fails past `seconds`."""
    t0 = time.monotonic()
    wait_for("the condition", cond, seconds, 0.02)
    return time.monotonic() - t0


def test_a_pause_reaches_should_pause_within_the_control_refresh_interval() -> None:
    with pod() as (exp, tg):
        tg.log_step(1, loss=2.0)
        wait_for(
            "the hello and the step sent", lambda: tg.sent >= 2, 5, 0.02
        )  # hello and step: the trainer runs
        assert tg.should_pause() is False
        operator(exp, {"pause": True})
        took = within(tg.should_pause, REFRESH_S + FLUSH_S + 0.5)
        assert took <= REFRESH_S + FLUSH_S + 0.5
        operator(exp, {"pause": False})
        within(lambda: not tg.should_pause(), REFRESH_S + FLUSH_S + 0.5)


def test_resume_from_prefers_the_pin_over_the_trainers_own_newer_checkpoints() -> None:
    with pod() as (exp, tg):
        tg.checkpoint_saved(900, "full", "/ckpt/900")
        tg.checkpoint_saved(1000, "incremental", "/ckpt/1000")
        wait_for(
            "the pin at step 1000",
            lambda: (exp.exporter.training.control_view()["resume_from"] or {}).get("step") == 1000,
            5,
            0.02,
        )
        good = exp.exporter.training.control_view()["checkpoints"][0]
        assert good["step"] == 900 and good["ts"] > 0
        operator(exp, {"pause": True, "resume_from": good})
        within(tg.should_pause, REFRESH_S + FLUSH_S + 0.5)
        assert tg.resume_from() == good
        tg.checkpoint_saved(1100, "full", "/ckpt/1100")  # this process went on after the NaN
        assert tg.resume_from() == good, "its own newer checkpoint does not move the pin"
        # the sidecar has heard of it (the report is flushed in the background), and the trainer asked since
        wait_for(
            "the full checkpoint of step 1100",
            lambda: exp.exporter.training.snapshot().checkpoint_step.get("full") == 1100,
            5,
            0.02,
        )
        time.sleep(REFRESH_S + FLUSH_S)
        assert tg.resume_from() == good, "nor does the sidecar, which heard of it since"
        # should_checkpoint still follows the operator's request, then the cadence
        operator(exp, {"checkpoint": "full"})
        within(lambda: tg.should_checkpoint(1101) == "full", REFRESH_S + FLUSH_S + 0.5)
        tg.checkpoint_saved(1101, "full", "/ckpt/1101")
        assert tg.should_checkpoint(1102) is None and tg.should_checkpoint(1110) == "incremental"
        # the operator lifts the pin: the newest checkpoint again
        operator(exp, {"resume_from": None, "pause": False})
        within(lambda: (tg.resume_from() or {}).get("step") == 1101, REFRESH_S + FLUSH_S + 0.5)


def test_a_trainer_started_after_the_pin_resumes_from_it_and_ends_it_by_saving_past_it() -> None:
    with pod() as (exp, old):
        old.checkpoint_saved(900, "full", "/ckpt/900")
        wait_for(
            "the checkpoints listed", lambda: exp.exporter.training.control_view()["checkpoints"], 5, 0.02
        )
        good = exp.exporter.training.control_view()["checkpoints"][0]
        old.checkpoint_saved(1000, "full", "/ckpt/1000")
        operator(exp, {"resume_from": good})
        time.sleep(0.01)  # the restarted trainer starts after the pin
        new = Reporter(old.endpoint, flush_interval_s=FLUSH_S, control_interval_s=REFRESH_S)
        try:
            assert new.resume_from() == good
            new.checkpoint_saved(950, "full", "/ckpt/950")
            within(lambda: exp.exporter.training.control_view()["pinned"] is False, 2.0)
            within(lambda: (new.resume_from() or {}).get("path") == "/ckpt/950", REFRESH_S + FLUSH_S + 0.5)
        finally:
            new.close()


def test_without_a_pin_the_newest_of_the_sidecars_and_its_own_checkpoint_wins() -> None:
    """The sidecar may not have heard of this process's newest save yet (it is still queued)."""
    old = {"step": 500, "kind": "full", "path": "/ckpt/500", "ts": 1.0}
    answer = {"pause": False, "checkpoint": None, "advisories": [], "resume_from": old, "pinned": False}
    with running_sidecar(answer) as (sidecar, url):
        tg = Reporter(url, start=False)
        try:
            tg.checkpoint_saved(600, "full", "/ckpt/600")
            got = tg.resume_from()  # asks the sidecar, which answers 500
            assert got is not None and got["step"] == 600 and got["path"] == "/ckpt/600"
            sidecar.control = {**answer, "pinned": True}
            assert tg.resume_from() == old, "a pinned answer wins"
        finally:
            tg.close(timeout_s=0.1)
