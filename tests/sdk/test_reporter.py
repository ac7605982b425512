"""The SDK: non-blocking, bounded, and unharmed by an absent, slow or restarted sidecar."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.exporter.running import running_exporter
from tests.processes import free_port, wait_for
from trainguard.remediation.sidecars import SidecarControl
from trainguard.sdk import Reporter


def test_reports_reach_the_exporter_over_a_unix_socket(tmp_path: Path) -> None:
    sock = str(tmp_path / "sdk.sock")
    with running_exporter("--backend", "none", "--no-host", socket_path=sock) as exp:
        tg = Reporter(f"unix://{sock}", flush_interval_s=0.05)
        for step in range(1, 11):
            tg.log_step(step, loss=1.0 / step, grad_norm=0.5, tokens=4096, step_time_s=0.1)
        tg.checkpoint_saved(10, "full", "/ckpt/10")
        tg.close()
        assert exp.value("trainguard_train_step") == 10
        assert exp.value("trainguard_checkpoint_last_step", kind="full") == 10
        assert tg.sent == 1 + 11 + 1 and tg.dropped == 0, "the hello, ten steps, a checkpoint and the bye"


def test_absent_sidecar_costs_one_warning_and_no_time(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="trainguard.sdk")
    tg = Reporter(
        f"http://127.0.0.1:{free_port()}", flush_interval_s=0.01, control_interval_s=0.01, queue_size=100
    )
    t0 = time.perf_counter()
    for step in range(2000):
        tg.log_step(step, loss=1.0)
    per_call = (time.perf_counter() - t0) / 2000
    wait_for("three failed reports", lambda: tg.failures >= 3, 5, 0.02)
    tg.close()
    assert per_call < 0.001, f"log_step took {per_call * 1e6:.0f} us with no sidecar"
    warnings = [r for r in caplog.records if "not reachable" in r.getMessage()]
    assert len(warnings) == 1
    assert tg.dropped >= 1900, "the bounded queue dropped the oldest reports"
    assert tg.should_checkpoint(100) == "incremental" and tg.should_pause() is False


def test_slow_sidecar_does_not_slow_log_step() -> None:
    class Slow(BaseHTTPRequestHandler):
        def log_message(self, *a: Any) -> None:
            pass

        def do_POST(self) -> None:
            time.sleep(0.5)
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST  # noqa: N815 - the http.server name

    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        tg = Reporter(f"http://127.0.0.1:{port}", flush_interval_s=0.01)
        t0 = time.perf_counter()
        for step in range(500):
            tg.log_step(step, loss=1.0)
        assert time.perf_counter() - t0 < 0.2
        tg.close(timeout_s=0.1)
    finally:
        server.shutdown()
        server.server_close()


def test_restarted_sidecar_gets_reports_again(tmp_path: Path) -> None:
    sock = str(tmp_path / "sdk.sock")
    tg = Reporter(f"unix://{sock}", flush_interval_s=0.05)
    with running_exporter("--backend", "none", "--no-host", socket_path=sock) as exp:
        tg.log_step(1, loss=1.0)
        wait_for("step 1 on the exporter", lambda: exp.value("trainguard_train_step") == 1, 5, 0.02)
    tg.log_step(2, loss=1.0)  # the sidecar is down now
    wait_for("a failed report", lambda: tg.failures >= 1, 5, 0.02)
    with running_exporter("--backend", "none", "--no-host", socket_path=sock) as exp:
        tg.log_step(3, loss=1.0)
        wait_for("step 3 on the exporter", lambda: exp.value("trainguard_train_step") == 3, 5, 0.02)
    tg.close()


def test_operator_requests_reach_the_trainer(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("t0k3n")
    with running_exporter("--backend", "none", "--no-host", "--fastpath-token-file", str(token)) as exp:
        tg = Reporter(exp.url, flush_interval_s=0.02, control_interval_s=0.02)
        assert tg.should_checkpoint(7) is None
        req = urllib.request.Request(f"{exp.url}/v1/control", data=b'{"pause": true}', method="POST")
        with pytest.raises(urllib.error.HTTPError) as exc:
            urllib.request.urlopen(req)
        assert exc.value.code == 401, "nobody may pause training without the token"
        body = b'{"pause": true, "checkpoint": "full", "advisories": [{"action": "clip_gradients", "max_norm": 1.0}]}'
        SidecarControl().control(exp.url, "t0k3n", json.loads(body))  # as the operator calls, signed
        wait_for("the pause", tg.should_pause, 5, 0.02)
        assert tg.should_checkpoint(7) == "full"
        assert tg.advisories() == [{"action": "clip_gradients", "max_norm": 1.0}]
        before = time.time()
        tg.checkpoint_saved(7, "full", "/ckpt/7")
        resume = tg.resume_from()
        assert resume is not None and before <= resume.pop("ts") <= time.time(), "when it was saved"
        assert resume == {"step": 7, "kind": "full", "path": "/ckpt/7"}
        tg.close()


def test_cadence() -> None:
    tg = Reporter("http://127.0.0.1:9", start=False, incremental_every=100, full_every=1000)
    assert [tg.should_checkpoint(s) for s in (0, 50, 100, 1000, 2000, 2100)] == [
        None,
        None,
        "incremental",
        "full",
        "full",
        "incremental",
    ]


def test_importing_the_sdk_pulls_in_no_heavy_dependency() -> None:
    code = ("import sys; import trainguard.sdk; "
            "bad = [m for m in ('kopf', 'kubernetes', 'pydantic', 'yaml', 'prometheus_client', 'torch') if m in sys.modules]; "
            "print(','.join(bad)); sys.exit(1 if bad else 0)")  # fmt: skip
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"imported: {result.stdout}"


def test_bad_endpoint_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="TRAINGUARD_ENDPOINT must be"):
        Reporter("ftp://nope", start=False)
