"""A value the SDK cannot report costs that report, never the training loop or the reporter thread."""

from __future__ import annotations

import logging

import pytest

from tests.processes import wait_for
from tests.sdk.fakes import NumpyInt64, running_sidecar
from trainguard.sdk import Reporter


def test_a_numpy_step_counter_reaches_the_sidecar_as_a_number() -> None:
    with running_sidecar() as (sidecar, url):
        tg = Reporter(url, flush_interval_s=0.02)
        try:
            tg.log_step(NumpyInt64(5), loss=1.0)  # type: ignore[arg-type]
            tg.checkpoint_saved(NumpyInt64(5), "full", "/ckpt/5")  # type: ignore[arg-type]
            tg.log_step(6, loss=1.0)
            wait_for(
                "the steps 5, 5 and 6",
                lambda: [e.get("step") for e in sidecar.events if e["type"] != "hello"] == [5, 5, 6],
                5,
                0.02,
            )
        finally:
            tg.close()


def test_a_value_that_is_not_a_number_is_dropped_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="trainguard.sdk")
    tg = Reporter("http://127.0.0.1:9", start=False)
    tg.log_step(1, loss="n/a")  # type: ignore[arg-type]
    tg.log_step(float("nan"))  # type: ignore[arg-type]
    tg.checkpoint_saved("latest", "full", "/ckpt")  # type: ignore[arg-type]
    tg.log_fragmentation(0, "high")  # type: ignore[arg-type]
    tg.log_step(2, loss=1.0)
    assert tg.dropped == 4
    assert len([r for r in caplog.records if "cannot report" in r.getMessage()]) == 1
