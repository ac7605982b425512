"""`trainguard launch` as a process against a real exporter on its SDK socket, as in a pod: the trainer
restarts in place on the operator's word (new generation, the word's checkpoint in its environment, its
whole process group stopped first), a re-posted word changes nothing, a trainer that fails waits for a
word and without one the launcher exits with its status, and SIGTERM is forwarded."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.exporter.running import Running, running_exporter
from tests.processes import ROOT, wait_for

CKPT = {"step": 1000, "kind": "full", "path": "/ckpt/1000", "ts": 1_700_000_000.0}
TRAINER = """
import json, os, signal, subprocess, sys, time
out, mode = sys.argv[1], sys.argv[2]
gen = os.environ["TRAINGUARD_GENERATION"]
helper = subprocess.Popen(["sleep", "300"])  # a worker the trainer started: it must go with the trainer
with open(out, "a") as f:
    f.write(json.dumps({"gen": gen, "pid": os.getpid(), "helper": helper.pid, "argv": sys.argv[1:],
                        "preloaded": "wave" in sys.modules, "slow": "slowimport" in sys.modules, "main": __name__,
                        "resume": os.environ.get("TRAINGUARD_RESUME_FROM")}) + "\\n")
if mode == "fail" and gen == "0":
    sys.exit(5)
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
time.sleep(300)
"""


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purposes; /proc says which
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[1][0] != "Z"


@contextmanager
def launched(
    tmp_path: Path, mode: str = "sleep", *flags: str, path: str = ""
) -> Iterator[tuple[Running, subprocess.Popen[bytes], Path]]:
    """The launcher running the test trainer against a real exporter; `path`: more of PYTHONPATH."""
    sock, out, script = tmp_path / "sdk.sock", tmp_path / "trainer.jsonl", tmp_path / "trainer.py"
    script.write_text(TRAINER)
    with running_exporter("--backend", "none", "--no-host", socket_path=str(sock), sdk_tcp=False) as exp:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT / "operator"), path) if p)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainguard.cli", "launch", "--endpoint", f"unix://{sock}", *flags, "--",
             sys.executable, str(script), str(out), mode],
            env=env, stdout=(tmp_path / "launcher.log").open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            yield exp, proc, out
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            for line in lines(out):
                for pid in (line["pid"], line["helper"]):
                    if alive(pid):
                        os.kill(pid, signal.SIGKILL)


def launcher(exp: Running) -> dict[str, Any]:
    return exp.exporter.training.control_view()["launcher"] or {}


def word(exp: Running, generation: int) -> None:
    exp.exporter.training.set_control(
        {"restart": {"generation": generation, "record": "r1", "resume_from": CKPT}}
    )


def test_a_word_restarts_the_trainer_in_place_from_its_checkpoint_and_a_repost_changes_nothing(
    tmp_path: Path,
) -> None:
    with launched(tmp_path) as (exp, proc, out):
        wait_for(
            "generation 0 running", lambda: len(lines(out)) == 1 and launcher(exp).get("state") == "running"
        )
        assert launcher(exp)["alive"] and launcher(exp)["generation"] == 0
        first = lines(out)[0]
        assert first["gen"] == "0" and first["resume"] is None
        t0 = time.monotonic()
        word(exp, 1)
        wait_for("generation 1 started", lambda: len(lines(out)) == 2, timeout=10, interval=0.02)
        took = time.monotonic() - t0
        second = lines(out)[1]
        assert second["gen"] == "1" and json.loads(second["resume"]) == {**CKPT, "step": 1000.0}
        assert took < 2.0, f"the word to the new trainer took {took:.2f}s"
        wait_for(
            "generation 1 reported",
            lambda: launcher(exp).get("generation") == 1 and launcher(exp)["state"] == "running",
        )
        assert not alive(first["pid"]) and not alive(first["helper"]), "the old trainer's whole group is gone"
        word(exp, 1)  # the executor's redo posts the same word again
        time.sleep(0.5)
        assert len(lines(out)) == 2, "a generation already run is not run again"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 128 + signal.SIGTERM
        assert launcher(exp)["state"] == "gone" and not launcher(exp)["alive"]
        assert not alive(second["pid"]) and not alive(second["helper"])


def test_a_trainer_that_ignores_sigterm_is_killed_after_the_term_grace(tmp_path: Path) -> None:
    with launched(tmp_path, "stubborn", "--term-grace", "500ms") as (exp, _proc, out):
        wait_for(
            "generation 0 running", lambda: len(lines(out)) == 1 and launcher(exp).get("state") == "running"
        )
        t0 = time.monotonic()
        word(exp, 1)
        wait_for("generation 1 started", lambda: len(lines(out)) == 2, timeout=10, interval=0.02)
        assert 0.5 <= time.monotonic() - t0 < 3.0
        assert not alive(lines(out)[0]["pid"])


def test_a_failed_trainer_waits_for_the_word_and_restarts_on_it(tmp_path: Path) -> None:
    with launched(tmp_path, "fail", "--word-timeout", "60s") as (exp, proc, out):
        wait_for("the trainer failed, the launcher waits", lambda: launcher(exp).get("state") == "waiting")
        state = launcher(exp)
        assert (state["event"], state["cause"], state["code"]) == ("exited", "exit", 5)
        word(exp, 1)
        wait_for("generation 1 started", lambda: len(lines(out)) == 2 and launcher(exp)["state"] == "running")
        assert proc.poll() is None


def test_without_a_word_the_launcher_exits_with_the_trainers_status(tmp_path: Path) -> None:
    with launched(tmp_path, "fail", "--word-timeout", "1s") as (exp, proc, out):
        assert proc.wait(timeout=20) == 5
        assert len(lines(out)) == 1, "it never restarted the trainer on its own"
        assert launcher(exp)["state"] == "gone"


@pytest.mark.parametrize("args", [[], ["--"]])
def test_no_command_is_a_usage_error(args: list[str]) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "operator")}
    done = subprocess.run([sys.executable, "-m", "trainguard.cli", "launch", *args], env=env, capture_output=True,
                          text=True, check=False, timeout=30)  # fmt: skip
    assert done.returncode == 2 and "needs the trainer's command after --" in done.stderr


def test_with_preload_the_restart_runs_in_the_warm_trainer_that_imported_ahead(tmp_path: Path) -> None:
    with launched(tmp_path, "sleep", "--preload", "wave") as (exp, _proc, out):
        log = tmp_path / "launcher.log"
        wait_for("the warm trainer ready, as the sidecar is told", lambda: launcher(exp).get("warm") == "ready",
                 timeout=30)  # fmt: skip
        warm = re.search(r"a warm trainer \(pid (\d+)\) preloads wave", log.read_text())
        assert warm is not None and "the warm trainer (pid" in log.read_text()
        first = lines(out)[0]
        assert first["preloaded"] is False, "the first trainer starts cold"
        word(exp, 1)
        wait_for("generation 1 started", lambda: len(lines(out)) == 2, timeout=10, interval=0.02)
        second = lines(out)[1]
        assert second["pid"] == int(warm.group(1)) and second["preloaded"] is True
        assert second["argv"] == first["argv"] and second["main"] == "__main__"
        assert json.loads(second["resume"])["step"] == 1000 and second["gen"] == "1"
        assert not alive(first["pid"])


def test_a_restarted_sidecar_is_told_the_launchers_state_again(tmp_path: Path) -> None:
    sock, out, script = tmp_path / "sdk.sock", tmp_path / "trainer.jsonl", tmp_path / "trainer.py"
    script.write_text(TRAINER)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "operator")}
    with running_exporter("--backend", "none", "--no-host", socket_path=str(sock), sdk_tcp=False) as exp:
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainguard.cli", "launch", "--endpoint", f"unix://{sock}", "--",
             sys.executable, str(script), str(out), "sleep"],
            env=env, stdout=(tmp_path / "launcher.log").open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            # the trainer's own line too: "running" is said when it starts, before it writes (a loaded
            # CI machine restarted generation 0 before its line)
            wait_for("generation 0 running",
                     lambda: len(lines(out)) == 1 and launcher(exp).get("state") == "running")  # fmt: skip
            word(exp, 1)
            wait_for("generation 1 running",
                     lambda: len(lines(out)) == 2 and launcher(exp).get("generation") == 1)  # fmt: skip
        except BaseException:
            proc.kill()
            raise
    try:
        with running_exporter(
            "--backend", "none", "--no-host", socket_path=str(sock), sdk_tcp=False
        ) as again:
            wait_for(
                "the launcher's hello to the new sidecar", lambda: launcher(again).get("generation") == 1
            )
            assert launcher(again)["alive"] and launcher(again)["state"] == "running"
            assert len(lines(out)) == 2, "the trainer ran on while the sidecar was away"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        for line in lines(out):
            for pid in (line["pid"], line["helper"]):
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)


def test_a_launcher_killed_outright_takes_its_trainer_and_warm_trainer_with_it(tmp_path: Path) -> None:
    """SIGKILL leaves the launcher no time to stop the trainer's session, which a runner stopping only the
    launcher's process group would miss: the trainer and the parked warm trainer die with it (a leak here
    kept 32 trainers burning the CPU of a 2-core machine after a bench)."""
    with launched(tmp_path, "sleep", "--preload", "wave") as (exp, proc, out):
        wait_for("the trainer and a warm trainer", lambda: len(lines(out)) == 1
                 and launcher(exp).get("warm") == "ready", timeout=30)  # fmt: skip
        found = re.search(r"a warm trainer \(pid (\d+)\)", (tmp_path / "launcher.log").read_text())
        assert found is not None
        warm, trainer = int(found.group(1)), lines(out)[0]["pid"]
        assert alive(warm) and alive(trainer)
        proc.kill()
        proc.wait()
        wait_for("the trainer gone with its launcher", lambda: not alive(trainer), timeout=10)
        wait_for("the warm trainer gone too", lambda: not alive(warm), timeout=10)


def test_a_word_that_comes_while_the_warm_trainer_still_imports_waits_for_it(tmp_path: Path) -> None:
    """The restart is handed over before the warm trainer's imports are done: it runs the new generation
    once they are, and its late word that it is ready is no longer listened to (and harms nothing)."""
    (tmp_path / "slowimport.py").write_text("import time\ntime.sleep(3)\n")
    with launched(tmp_path, "sleep", "--preload", "slowimport", path=str(tmp_path)) as (exp, proc, out):
        log = tmp_path / "launcher.log"
        warm = wait_for("a warm trainer started", lambda: re.search(
            r"a warm trainer \(pid (\d+)\) preloads slowimport", log.read_text()), timeout=30)  # fmt: skip
        assert launcher(exp).get("warm") != "ready"
        word(exp, 1)
        wait_for("generation 1 started", lambda: len(lines(out)) == 2, timeout=20, interval=0.05)
        second = lines(out)[1]
        assert second["pid"] == int(warm.group(1)) and second["slow"] is True and second["gen"] == "1"
        time.sleep(1)
        assert (
            proc.poll() is None and launcher(exp)["state"] == "running" and launcher(exp)["generation"] == 1
        )
        assert "ended" not in log.read_text().split("starting generation 1")[1]
