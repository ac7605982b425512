"""resume_from() right after construction: the background thread has not asked the sidecar yet, so
the first call asks it, briefly, and a missing sidecar still means None with a single warning."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from tests.processes import free_port
from tests.sdk.fakes import running_sidecar
from trainguard.sdk import Reporter
from trainguard.sdk.reporter import FIRST_CONTROL_TIMEOUT_S

KEPT = {"step": 40, "kind": "full", "path": "/ckpt/40"}


def idle_reporter(url: str, timeout_s: float = 1.0) -> Reporter:
    """A Reporter whose thread stays out of the way: it would first ask the sidecar in a minute."""
    return Reporter(url, flush_interval_s=60.0, control_interval_s=60.0, timeout_s=timeout_s)


def test_resume_from_right_after_construction_returns_the_checkpoint_the_operator_kept() -> None:
    control: dict[str, Any] = {"pause": False, "checkpoint": None, "advisories": [], "resume_from": KEPT}
    with running_sidecar(control) as (sidecar, url):
        tg = idle_reporter(url)
        try:
            assert tg.resume_from() == KEPT
            assert sidecar.control_gets == 1
            assert tg.resume_from() == KEPT and sidecar.control_gets == 1, "later calls read the cache"
        finally:
            tg.close()


def test_resume_from_without_a_sidecar_is_none_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="trainguard.sdk")
    tg = idle_reporter(f"http://127.0.0.1:{free_port()}")
    t0 = time.monotonic()
    assert tg.resume_from() is None
    assert tg.resume_from() is None
    assert time.monotonic() - t0 < 1.0
    tg.close(timeout_s=0.1)
    assert tg.failures >= 1, "the first call did try the sidecar"
    assert len([r for r in caplog.records if "not reachable" in r.getMessage()]) == 1


def test_a_slow_sidecar_holds_the_first_resume_from_only_briefly() -> None:
    with running_sidecar() as (sidecar, url):
        sidecar.control_delay_s = 3.0
        tg = idle_reporter(url, timeout_s=5.0)
        t0 = time.monotonic()
        assert tg.resume_from() is None
        assert time.monotonic() - t0 < FIRST_CONTROL_TIMEOUT_S + 0.5
        tg.close(timeout_s=0.1)
