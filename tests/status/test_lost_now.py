"""`trainguard status` shows the share of time lost now by the causes only the sidecars see (stall,
checkpoint_stall, slow_rank) and the ETTR with every cause, read from the goodput recording rules
(render/prometheus.py); a Prometheus without them leaves the line out."""

from __future__ import annotations

import re

from tests.kube.fakes import FakeKube
from tests.status.test_status import NOW, Prometheus, _live, monitor
from trainguard.render.prometheus import ETTR, LOST
from trainguard.status.fetch import Sources, fetch
from trainguard.status.render import job_data, render_plain


def rules_answer() -> Prometheus:
    return Prometheus({
        f"{LOST}{{": [
            {"metric": {"namespace": "ml", "training_job": "llama", "cause": "stall"}, "value": [NOW, "0.25"]},
            {"metric": {"namespace": "ml", "training_job": "llama", "cause": "checkpoint_stall"}, "value": [NOW, "0.02"]},
            {"metric": {"namespace": "ml", "training_job": "llama", "cause": "slow_rank"}, "value": [NOW, "0"]},
        ],
        f"{ETTR}{{": [{"metric": {"namespace": "ml", "training_job": "llama"}, "value": [NOW, "0.8125"]}],
    })  # fmt: skip


def test_status_reads_the_share_lost_now_by_cause_and_the_ettr_of_every_cause() -> None:
    prom = rules_answer()
    (s,) = fetch(Sources(FakeKube(monitor(name="llama")), prom), "ml", None, NOW)
    assert s.series.lost_now == {"stall": 0.25, "checkpoint_stall": 0.02, "slow_rank": 0.0}
    assert s.series.ettr_all == 0.8125
    line = next(ln for ln in render_plain([s]).splitlines() if ln.startswith("  lost now: "))
    assert (
        line
        == "  lost now: checkpoint_stall 2.0%, slow_rank 0.0%, stall 25.0%; ETTR 81.2% over 1h, every cause"
    )
    live = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", _live([s]))
    assert "lost now    checkpoint_stall 2.0%" in live
    assert job_data(s)["lostNow"] == {
        "ratio": {"checkpoint_stall": 0.02, "slow_rank": 0.0, "stall": 0.25},
        "ettr": 0.8125,
    }
    assert all('namespace="ml",training_job="llama"' in q for q, _ in prom.asked)


def test_without_the_goodput_rules_there_is_no_lost_now_line() -> None:
    (s,) = fetch(Sources(FakeKube(monitor(name="llama")), Prometheus({})), "ml", None, NOW)
    assert "lost now" not in render_plain([s])
    assert job_data(s)["lostNow"] == {"ratio": {}, "ettr": None}
