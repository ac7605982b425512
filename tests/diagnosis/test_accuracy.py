"""Precision and recall per cause over every scenario of the trace generator (a few seeds here; run
`python -m tests.diagnosis.accuracy 50` for the figures in the docs)."""

from __future__ import annotations

from tests.diagnosis.accuracy import score
from trainguard.diagnosis import Cause


def test_every_cause_is_found_and_nothing_else_is_said() -> None:
    scores, misses = score(seeds=4)
    for cause in Cause:
        s = scores[cause]
        assert s.tp > 0, cause
        assert s.precision >= 0.9 and s.recall >= 0.9, (cause, s, misses)
