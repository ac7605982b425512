"""Precision and recall per cause over seeded synthetic traces (tests/diagnosis/traces.py).

    .venv/bin/python -m tests.diagnosis.accuracy [SEEDS]

A finding counts as right when its cause is one the trace expects and, for hardware and stragglers,
it names the expected node and GPU (or pod); anything else it says is a false positive.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from tests.diagnosis.traces import EDGE, SCENARIOS, Trace, trace
from trainguard.diagnosis import Cause, Finding, diagnose


@dataclass(frozen=True)
class Score:
    tp: int
    fp: int
    fn: int

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 1.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 1.0


def correct(trace: Trace, finding: Finding) -> bool:
    exp = trace.expected
    if finding.cause not in exp.causes:
        return False
    if finding.cause is Cause.HARDWARE:
        return (finding.node, finding.gpu) == (exp.node, exp.gpu)
    if finding.cause is Cause.STRAGGLER:
        return (finding.node, finding.pod) == (exp.node, exp.pod)
    return True


def score(seeds: int, scenarios: Iterable[str] = ()) -> tuple[dict[Cause, Score], list[str]]:
    """Over `scenarios` (default: all but the edge ones) x seeds 0..seeds-1."""
    tp: Counter[Cause] = Counter()
    fp: Counter[Cause] = Counter()
    fn: Counter[Cause] = Counter()
    misses: list[str] = []
    for scenario in list(scenarios) or [s for s in SCENARIOS if s not in EDGE]:
        for seed in range(seeds):
            t = trace(scenario, seed)
            findings = diagnose(t.snapshot)
            right = {f.cause for f in findings if correct(t, f)}
            for f in findings:
                if not correct(t, f):
                    fp[f.cause] += 1
                    misses.append(f"{scenario}/{seed}: unexpected {f.cause} ({f.summary})")
            for cause in t.expected.causes:
                if cause in right:
                    tp[cause] += 1
                else:
                    fn[cause] += 1
                    misses.append(f"{scenario}/{seed}: missed {cause}")
    return {c: Score(tp[c], fp[c], fn[c]) for c in Cause}, misses


def _table(title: str, seeds: int, scenarios: list[str]) -> None:
    scores, misses = score(seeds, scenarios)
    print(f"{title}: {len(scenarios)} scenarios x {seeds} seeds")
    print(f"{'cause':28} {'TP':>4} {'FP':>4} {'FN':>4} {'precision':>9} {'recall':>7}")
    for cause, s in scores.items():
        if s.tp + s.fp + s.fn:
            print(f"{cause.value:28} {s.tp:4} {s.fp:4} {s.fn:4} {s.precision:9.3f} {s.recall:7.3f}")
    for line in misses[:20]:
        print("  " + line)
    print()


def main() -> None:
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    _table("clear faults and must-not-fire traces", seeds, [s for s in SCENARIOS if s not in EDGE])
    _table("edge faults (near or under the thresholds)", seeds, sorted(EDGE))


if __name__ == "__main__":
    main()
