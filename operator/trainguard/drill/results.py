"""What a drill measured, the verdict on it and its report (a table for people, JSON or YAML for tools).
Pure."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from trainguard.drill.scenarios import Stage
from trainguard.output import dump


@dataclass(frozen=True)
class StageResult:
    stage: Stage
    applies: bool
    seconds: float | None
    """From the fault (injection or synthetic post) until the stage was first observed; None: never."""
    target_s: float | None
    note: str = ""

    @property
    def verdict(self) -> str:
        if not self.applies:
            return "n/a"
        if self.seconds is None:
            return "fail"
        return "pass" if self.target_s is None or self.seconds <= self.target_s else "fail"


@dataclass
class Cleanup:
    """What cleanup did, and what it could not undo (each problem fails the drill)."""

    cleared: list[str] = field(default_factory=list)
    """Sidecars whose faults were cleared."""
    expired: int = 0
    """Synthetic alerts posted again ending now."""
    guard_silences: list[str] = field(default_factory=list)
    """Silences made for drill alerts still firing when dry run was restored (see run.py)."""
    dry_run: str = "unchanged"
    """What became of spec.remediation.dryRun: unchanged, or restored to its value before the drill."""
    problems: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    scenario: str
    monitor: str
    mode: str
    """"sidecar injection" or "synthetic alerts"."""
    targets: str
    dry_run: bool
    """Remediation ran in dry run during the drill."""
    target_s: float
    stages: list[StageResult]
    cleanup: Cleanup
    cordoned: list[str] = field(default_factory=list)
    """The job's nodes that were schedulable before the drill and cordoned after it."""
    interrupted: bool = False
    error: str = ""

    @property
    def problems(self) -> list[str]:
        out = list(self.cleanup.problems)
        if self.cordoned and self.dry_run:
            out.append(f"node(s) cordoned although remediation ran in dry run: {', '.join(self.cordoned)}")
        if self.interrupted:
            out.append("interrupted")
        if self.error:
            out.append(self.error)
        return out

    @property
    def passed(self) -> bool:
        return not self.problems and all(s.verdict != "fail" for s in self.stages)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["stages"] = [asdict(s) | {"verdict": s.verdict} for s in self.stages]
        data["problems"] = self.problems
        data["result"] = "pass" if self.passed else "fail"
        return data


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


def render_table(o: Outcome) -> str:
    """The report people read: one row per stage, then cleanup and the result."""
    rows = [("stage", "applies", "measured", "target", "result", "")]
    for s in o.stages:
        rows.append((str(s.stage), "yes" if s.applies else "no", _secs(s.seconds) if s.applies else "-",
                     _secs(s.target_s) if s.applies else "-", s.verdict, s.note))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = [
        f"trainguard drill {o.scenario} on {o.monitor}: {o.mode} ({o.targets}); "
        f"remediation {'in dry run' if o.dry_run else 'ACTING'}; target {o.target_s:g}s",
        *("  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)) + (f"  {r[5]}" if r[5] else "")
          for r in rows),
    ]  # fmt: skip
    c = o.cleanup
    done = [f"faults cleared on {len(c.cleared)} sidecar(s)"] if c.cleared else []
    done += [f"{c.expired} synthetic alert(s) expired"] if c.expired else []
    done += [f"guard silence(s) {', '.join(c.guard_silences)} left to expire"] if c.guard_silences else []
    done.append(f"dryRun {c.dry_run}")
    lines.append("cleanup: " + "; ".join(done))
    lines.append("cordoned during the drill: " + (", ".join(o.cordoned) or "none"))
    lines.extend(f"problem: {p}" for p in o.problems)
    lines.append(f"result: {'PASS' if o.passed else 'FAIL'}")
    return "\n".join(lines) + "\n"


def render_json(o: Outcome) -> str:
    return json.dumps(o.to_json(), indent=2, sort_keys=True) + "\n"


def render(o: Outcome, fmt: str) -> str:
    """The report in `-o`'s format: the table, or its data as JSON or YAML."""
    if fmt == "table":
        return render_table(o)
    return render_json(o) if fmt == "json" else dump(o.to_json(), fmt)


def render_plan(scenario: str, monitor: str, lines: list[str], fmt: str) -> str:
    """A dry run's plan: its lines, or them as data."""
    if fmt == "table":
        return "".join(f"{line}\n" for line in lines)
    return dump({"scenario": scenario, "monitor": monitor, "plan": lines}, fmt)
