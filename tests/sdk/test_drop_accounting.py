"""Every report is sent, still queued, or counted in `dropped`: none vanishes uncounted."""

from __future__ import annotations

from tests.sdk.fakes import running_sidecar
from trainguard.sdk import Reporter


def test_a_failed_send_counts_every_report_it_could_not_put_back() -> None:
    with running_sidecar() as (sidecar, url):
        tg = Reporter(url, start=False, queue_size=5)
        for step in range(1, 5):  # the hello and steps 1-4 fill the queue
            tg.log_step(step, loss=1.0)

        def trainer_keeps_logging() -> None:  # while the send is in flight
            for step in range(5, 8):
                tg.log_step(step, loss=1.0)

        sidecar.on_report, sidecar.report_status = trainer_keeps_logging, 503
        tg.flush()  # fails: room for two of the five it took, the newest
        assert tg.failures == 1
        sidecar.on_report, sidecar.report_status = None, 204
        tg.flush()
        assert [e["step"] for e in sidecar.events] == [3, 4, 5, 6, 7]
        assert tg.dropped == 3, "the hello and steps 1 and 2"
        assert tg.sent + tg.dropped == 1 + 7


def test_a_full_queue_counts_each_report_it_pushes_out() -> None:
    tg = Reporter("http://127.0.0.1:9", start=False, queue_size=3)
    for step in range(10):
        tg.log_step(step)
    assert tg.dropped == 1 + 10 - 3
