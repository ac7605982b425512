"""The SDK's bye: the last word of a training process, so a sidecar run as a regular container
(--exit-after-bye) can stop and let the Job's pod complete. Sent once per Reporter, by close() (sent
before close returns) or, for a script that never closes, when the interpreter exits."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.sdk.fakes import running_sidecar
from trainguard.sdk import Reporter

ROOT = Path(__file__).resolve().parents[2]


def test_close_sends_one_bye_last_before_it_returns() -> None:
    with running_sidecar() as (sidecar, url):
        tg = Reporter(url, flush_interval_s=60)  # the background thread would not flush in time
        tg.log_step(1, loss=1.0)
        tg.close()
        events = sidecar.events
        tg.close()
        tg.close()
        assert sidecar.events == events, "a second close sends nothing"
    assert [e["type"] for e in events] == ["hello", "step", "bye"]
    assert events[-1] == {"type": "bye", "pid": os.getpid()}


def script(url: str, body: str) -> str:
    return textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / "operator")!r})
        from trainguard.sdk import Reporter
        tg = Reporter({url!r}, flush_interval_s=60)
        tg.log_step(1, loss=1.0)
    """) + textwrap.dedent(body)


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )


def test_a_script_that_never_closes_says_bye_when_it_exits() -> None:
    with running_sidecar() as (sidecar, url):
        done = run(script(url, "print('trained')\n"))
    assert done.returncode == 0, done.stderr
    byes = [e for e in sidecar.events if e["type"] == "bye"]
    assert [e["type"] for e in sidecar.events] == ["hello", "step", "bye"]
    assert len(byes) == 1 and isinstance(byes[0]["pid"], int) and byes[0]["pid"] != os.getpid()


def test_a_closed_reporter_says_no_second_bye_at_exit() -> None:
    with running_sidecar() as (sidecar, url):
        done = run(script(url, "tg.close()\n"))
    assert done.returncode == 0, done.stderr
    assert [e["type"] for e in sidecar.events].count("bye") == 1


def test_an_exit_with_no_sidecar_is_quiet_and_clean() -> None:
    done = run(script("http://127.0.0.1:9", "print('trained')\n"))
    assert done.returncode == 0 and done.stdout == "trained\n"
    assert "Traceback" not in done.stderr and "not reachable" not in done.stderr
