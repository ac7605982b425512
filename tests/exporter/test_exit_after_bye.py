"""A sidecar injected as a regular container (Kubernetes < 1.29) is not stopped when training ends,
so the Job's pod would never complete: with --exit-after-bye the exporter exits 0 once every trainer
that said hello has said bye (after a last render and a short grace), and without it a bye changes
nothing but state."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.exporter.running import running_exporter
from tests.processes import free_port, http_json, wait_for, wait_http
from trainguard.exporter.main import wait_for_trainers
from trainguard.sdk import Reporter

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def exporter_process(tmp_path: Path, *flags: str) -> Iterator[tuple[subprocess.Popen[bytes], str, Path]]:
    port, sock = free_port(), tmp_path / "sdk.sock"
    log = tmp_path / "exporter.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainguard.cli", "exporter", "--backend", "none", "--no-host", "--sdk-tcp",
         "--listen", f"127.0.0.1:{port}", "--sdk-socket", str(sock), "--render-interval", "0.1", *flags],
        stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=ROOT,
    )  # fmt: skip
    try:
        wait_http(f"http://127.0.0.1:{port}/healthz", proc=proc)
        yield proc, f"http://127.0.0.1:{port}", sock
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=10)


def test_the_exporter_exits_0_once_the_trainer_closes_its_reporter(tmp_path: Path) -> None:
    with exporter_process(tmp_path, "--exit-after-bye", "--exit-grace-seconds", "1") as (proc, _, sock):
        tg = Reporter(f"unix://{sock}", flush_interval_s=0.05)
        tg.log_step(1, loss=1.0)
        time.sleep(1.5)
        assert proc.poll() is None, "a trainer that said hello and no bye is still training"
        tg.close()
        t0 = time.monotonic()
        assert proc.wait(timeout=10) == 0, (tmp_path / "exporter.log").read_text()
        assert time.monotonic() - t0 >= 0.9, "the last values stay scrapeable for the grace"


def test_the_exporter_waits_for_every_trainer_that_said_hello(tmp_path: Path) -> None:
    with exporter_process(tmp_path, "--exit-after-bye", "--exit-grace-seconds", "0") as (proc, url, _):
        http_json(
            f"{url}/v1/report", {"events": [{"type": "hello", "pid": 10}, {"type": "hello", "pid": 11}]}
        )
        http_json(f"{url}/v1/report", {"events": [{"type": "bye", "pid": 10}]})
        time.sleep(1.5)
        assert proc.poll() is None, "pid 11 has not said bye"
        http_json(f"{url}/v1/report", {"events": [{"type": "bye", "pid": 11}]})
        assert proc.wait(timeout=10) == 0


def test_without_the_flag_a_bye_only_updates_state(tmp_path: Path) -> None:
    with exporter_process(tmp_path) as (proc, url, _):
        http_json(f"{url}/v1/report", {"events": [{"type": "hello", "pid": 10}, {"type": "bye", "pid": 10}]})
        time.sleep(1.5)
        assert proc.poll() is None


def test_a_sidecar_nobody_said_hello_to_keeps_running(tmp_path: Path) -> None:
    with exporter_process(tmp_path, "--exit-after-bye", "--exit-grace-seconds", "0") as (proc, _, _):
        time.sleep(1.5)
        assert proc.poll() is None, "no trainer yet (an image still being pulled) is not the end of training"


GRACE_S = 2.0
"""Long beside the moment between the waiter's word that it is in the grace and the hello that follows."""


def test_a_trainer_that_says_hello_during_the_grace_keeps_the_sidecar_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The hello goes in once the waiter has logged that it is in its grace, and the waiter is looked at
    once it has logged that the grace ended with a trainer back: not at fixed times into the waiter's
    thread, which a loaded machine overruns."""
    caplog.set_level(logging.INFO, logger="trainguard.exporter")
    with running_exporter("--backend", "none", "--no-host") as exp:
        training, done = exp.exporter.training, threading.Event()
        training.ingest({"type": "hello", "pid": 10})
        training.ingest({"type": "bye", "pid": 10})
        result: list[bool] = []
        waiter = threading.Thread(
            target=lambda: result.append(wait_for_trainers(exp.exporter, done, GRACE_S, 0.05))
        )
        waiter.start()
        wait_for(
            "every training process's bye", lambda: "every training process said bye" in caplog.text, 10, 0.01
        )  # in the grace now
        training.ingest({"type": "hello", "pid": 11})  # a second training run of the same pod
        wait_for(
            "a hello during the grace",
            lambda: "said hello during the grace" in caplog.text,
            GRACE_S + 10,
            0.01,
        )
        assert waiter.is_alive(), "still waiting: pid 11 trains"
        training.ingest({"type": "bye", "pid": 11})
        waiter.join(GRACE_S + 10)
    assert result == [True]
