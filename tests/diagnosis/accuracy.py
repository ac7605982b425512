"""Precision and recall per cause over seeded synthetic traces (tests/diagnosis/traces.py).

    .venv/bin/python -m tests.diagnosis.accuracy [SEEDS]

A finding counts as right when its cause is one the trace expects and, for hardware and stragglers,
it names the expected node and GPU (or pod); anything else it says is a false positive.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import dataclass

from tests.diagnosis.traces import SCENARIOS, Trace, trace
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


def score(seeds: int) -> tuple[dict[Cause, Score], list[str]]:
    tp: Counter[Cause] = Counter()
    fp: Counter[Cause] = Counter()
    fn: Counter[Cause] = Counter()
    misses: list[str] = []
    for scenario in SCENARIOS:
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


def main() -> None:
    seeds = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    scores, misses = score(seeds)
    print(f"{len(SCENARIOS)} scenarios x {seeds} seeds")
    print(f"{'cause':28} {'TP':>4} {'FP':>4} {'FN':>4} {'precision':>9} {'recall':>7}")
    for cause, s in scores.items():
        print(f"{cause.value:28} {s.tp:4} {s.fp:4} {s.fn:4} {s.precision:9.3f} {s.recall:7.3f}")
    for line in misses[:40]:
        print("  " + line)


if __name__ == "__main__":
    main()
