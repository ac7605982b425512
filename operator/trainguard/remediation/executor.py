"""Carry a remediation record out, one step at a time, from where the record stands.

Records before actions: before a step acts, the record is saved with that step InProgress; after, with
the step Succeeded (what was done) or Failed (the error, and nothing after it is done). An operator
killed halfway finds the record and resumes at `records.next_step`: a step left InProgress is redone,
so every step is idempotent (a cordoned node stays cordoned by its first record, a taint is not added
twice, an advisory carries the record id, a gang already recreated since the step began is not
deleted again). A dry-run record is finished when written; the executor only says, in each step's
detail, what would have been done, and calls nothing.

Decisions taken here:
- RequestCheckpoint never blocks the cordon: a timeout, or sidecars that do not answer, leave the step
  Succeeded with a detail starting "timed out" (or "no sidecar"), and the plan goes on.
- Pause, PinCheckpoint and Advise fail only when no sidecar took the call; partial success names the
  sidecars that did not in the detail.
- PinCheckpoint fails when no checkpoint before the fault is known: nothing good can be pinned. It
  looks at every checkpoint a sidecar lists, not only its resume_from: a trainer may save once more
  between the NaN and the pause.
- The checkpoint the gang resumes from (the pin, the resume-from pointer) is the newest one every rank
  that answered reports saved, never the highest step one rank has: a partial checkpoint (rank 0 at
  1100, rank 1 at 1000) gives 1000 (`gang_checkpoint`). A dead node's silent rank bounds it by what it
  last said it saved (Prometheus), else one save back (`silent_rank_bound`).
- The resume-from pointer lives from the gang's deletion until its replacements are placed: on the
  workload (for people, and for an older operator's webhook) and in the restart step's progress
  (`resumeFrom`, saved before anything is deleted), from which the webhook gives it to the new pods
  without an API call; once ConfirmPlacement saw them placed, neither is given: a pod recreated later
  for another reason must not start pinned to an old checkpoint.
- AwaitCheckpoint (slowNode's ReplaceAtCheckpoint) waits for the job's own next checkpoint without
  holding a thread: each run looks once and, when it has not come, stops with the step InProgress
  (`Waiting`; its mark and start in the step's progress), for the resume pass to look again at its next
  round. A wait of hours thus never keeps a node fault's executor from a pool thread. Past its timeout the
  step fails: nothing after it (the cordon, the move) is done.
- RestartInPlace restarts the trainers, not the pods, only where every live pod of the gang has a live
  `trainguard launch`; otherwise it is Skipped and the RestartGang after it restarts the gang by new
  pods, every pod of it: a gang is never half restarted in place. Once it succeeded, the RestartGang
  and ConfirmPlacement after it are Skipped (checked before each of them, so a redo skips them too).

Exactly once: the executor never trusts the copy it was handed. It reads the record and its monitor
from the API first (`read`), refuses a record without the operator's signature for where it stands
(Failed, nothing done; every save is signed again), refuses a replay (a record this process saw
finished, found unfinished again) and a stale record (last written longer ago than
records.RESUME_WINDOW_S when it was handed over; see records.py), claims the record (`owner`) with a
conditional write, and before every step asks `gate`, pure, whether it may go on: the operator must
not be stopping, this replica must still lead, the API's copy must stand where this run left it (else
another executor has it: stop, write nothing), and the operator's mode and the monitor's
`spec.remediation` (read again) must still let it act (else the remaining steps are Skipped, saying why). Every save is conditional
(store.Saver): a save that finds the record moved raises records.Superseded, and the run stops without
acting.

A stopping operator (SIGTERM: a rolling upgrade, a drain) stops its executors at their next step or
within a poll of a wait (the emergency checkpoint, the placement), writing nothing: the step left
InProgress is the next leader's to redo, as after a crash. Else a wait of up to
emergencyCheckpointTimeout would hold the process past its grace period, to be killed.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, NoReturn, Protocol

from trainguard.api.common import duration_seconds
from trainguard.api.monitor import TrainingJobMonitor
from trainguard.catalog.kubernetes import COMPLETION_INDEX, FAULTY_TAINT, RESUME_FROM
from trainguard.kube.objects import (
    creation_seconds,
    is_terminating,
    label_value,
    labels_of,
    new_pods,
    new_pods_placement,
)
from trainguard.kube.workloads import ChildJob, Replacement, Workload
from trainguard.remediation import records
from trainguard.remediation.detect import GANG_SPREAD_S
from trainguard.remediation.maintenance import MAINTENANCE
from trainguard.remediation.model import Phase, StepKind
from trainguard.remediation.ops import ClusterOps, Refused, Sidecar
from trainguard.remediation.plan import RESTARTS, SLOW_NODE, STRAGGLER_ALERT
from trainguard.remediation.records import Superseded
from trainguard.remediation.slow_node import straggler_evidence
from trainguard.render.sidecar import is_injected
from trainguard.times import rfc3339, unix

log = logging.getLogger("trainguard.remediation")

Record = dict[str, Any]

MODES: tuple[str, ...] = ("act", "dry-run", "off")
"""The operator-wide mode (the platform's guardrail): act, record what would be done, or do nothing."""

PLACEMENT_TIMEOUT_S = 120.0
POLL_INTERVAL_S = 1.0
EVICTION_GRACE_S = 5
"""The grace period of a pod evicted off a live faulty node: its trainer stops on SIGTERM, and its
replacement (under the same name, for a PyTorchJob) waits for it to go."""
JOBSET_KINDS = ("JobSet", "TrainJob")
"""Owners whose gang is restarted through the JobSet: its current child Jobs are deleted and recreated."""
IN_PLACE_TIMEOUT_S = 60.0
"""How long RestartInPlace waits for every launcher to run the new generation before the gang is
restarted by new pods instead (params['timeout_s'] overrides it)."""
WORD_POLL_S = 0.2
"""How often RestartInPlace reads the sidecars while it waits: a launcher starts its trainer within a
second, and the record's end is part of the restart's time."""
IN_PLACE_DONE = "not needed: the trainers restarted in place, no pod was replaced"
REJOIN_TIMEOUT_S = PLACEMENT_TIMEOUT_S
"""How long a rejoin waits for the replacement pod to be created, placed and started and for every
launcher to run the new generation (params['timeout_s'] overrides it)."""


class StepFailed(Exception):
    """A step could not do what it is for; its message is the record's detail."""


STOPPING = "the operator is stopping; the record is left to the next leader"


class Stopping(Exception):
    """The operator is stopping: the run stops where it stands, writing nothing."""


class Waiting(Exception):
    """A wait that goes on past this run (AwaitCheckpoint): the step stays InProgress, its progress saved,
    and the resume pass hands the record over again at its next round."""


class NotInPlace(Exception):
    """RestartInPlace cannot restart the trainers in place (a pod without a live launcher, a sidecar that
    does not answer, a launcher that did not start the new generation in time): the step is Skipped,
    saying why, and the RestartGang after it restarts the gang."""


@dataclass(frozen=True)
class Progress:
    """A step's progress fields as the record held them when the step began (empty for a first run), and
    whether this is a redo of a step a killed operator left InProgress."""

    fields: dict[str, Any]
    redo: bool = False


class Fresh(Protocol):
    """A record and its monitor as the API holds them now (store.Fresh)."""

    @property
    def record(self) -> Record | None: ...

    @property
    def monitor(self) -> TrainingJobMonitor: ...


@dataclass(frozen=True)
class Verdict:
    """What `gate` decided before a step: go on, `stop` (leave the record as it stands, write nothing:
    it is someone else's), or `skip` (the remaining steps are Skipped, saying why)."""

    stop: str = ""
    skip: str = ""

    @property
    def go(self) -> bool:
        return not (self.stop or self.skip)


def gate(ours: Record, fresh: Fresh | None, *, leads: bool, mode: str, stopping: bool = False) -> Verdict:
    """Whether the next step of `ours` (the record as this run last saved it) may be carried out, given the
    API's copy and monitor now, whether this replica leads, the operator's mode and whether it is
    stopping."""
    if stopping:
        return Verdict(stop=STOPPING)
    if not leads:
        return Verdict(stop="this replica no longer leads; the record is left to the new leader")
    if fresh is None:
        return Verdict(stop="the monitor is gone or invalid")
    if fresh.record is None:
        return Verdict(stop="the record is gone from the monitor's status")
    if not records.same(fresh.record, ours):
        theirs = fresh.record
        return Verdict(stop=f"the record moved on without this executor ({theirs.get('phase')}, owner "
                            f"{theirs.get('owner') or 'none'})")  # fmt: skip
    if mode == "off":
        return Verdict(skip="the operator's remediation mode is off")
    if mode == "dry-run":
        return Verdict(skip="the operator's remediation mode is dry-run")
    if mode != "act":
        return Verdict(skip=f"unknown operator remediation mode {mode!r}")
    remediation = fresh.monitor.spec.remediation
    if not remediation.enabled:
        return Verdict(skip="remediation was disabled on the monitor (spec.remediation.enabled: false)")
    if remediation.dry_run:
        return Verdict(skip="the monitor was switched to dry run (spec.remediation.dryRun: true)")
    return Verdict()


class FinishedRecords(Protocol):
    """The records this operator process saw finished, by records.identity (dispatch.FinishedRecords):
    one found unfinished again is a replay."""

    def remember(self, record: Record, now: float) -> None: ...

    def knows(self, record: Record, now: float) -> bool: ...


def new_owner() -> str:
    """A fresh identity for one executor run."""
    return uuid.uuid4().hex[:16]


Note = Callable[[str, dict[str, Any]], None]
"""Saves what a step is about to do (for people) and its progress fields (for a redo), before it acts."""


def _avoid(params: dict[str, str]) -> set[str]:
    return {n.strip() for n in params.get("avoid", "").split(",") if n.strip()}


def _float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _good(candidate: dict[str, Any], before_ts: float | None, before_step: float | None) -> bool:
    """Saved before the fault, as far as its step and ts tell: one without a ts passes `before_ts`."""
    step, ts = _float(candidate.get("step")), _float(candidate.get("ts"))
    if step is None:
        return False
    if before_step is not None and step >= before_step:
        return False
    return before_ts is None or ts is None or ts < before_ts


def choose_checkpoint(
    candidates: list[dict[str, Any]], before_ts: float | None, before_step: float | None
) -> tuple[dict[str, Any] | None, str]:
    """The newest checkpoint (by step) saved before the fault, and a note. A candidate with a `ts` is
    judged by it against `before_ts`; one with a step against `before_step`. One without a ts takes the
    ts of a candidate of the same step and path; an older sidecar's resume_from has none at all: with
    only `before_ts` to go by, it is kept and the note says it could not be checked."""
    good = [c for c in _dated(candidates) if _good(c, before_ts, before_step)]
    if not good:
        return None, ""
    best = max(good, key=lambda c: (float(c["step"]), _float(c.get("ts")) is not None))
    unchecked = before_ts is not None and _float(best.get("ts")) is None and before_step is None
    return best, " (saved before the fault: not checked, the sidecar reports no checkpoint time)" * unchecked


def gang_checkpoint(
    ranks: dict[str, list[dict[str, Any]]], before_ts: float | None, before_step: float | None
) -> tuple[dict[str, Any] | None, str]:
    """The newest checkpoint every rank saved before the fault, and a note: what the gang resumes from.

    `ranks` holds, per sidecar that answered (its pod), the checkpoints it reports saved. A step counts
    only when every one of them reports it, and reports it saved before the fault: a checkpoint that
    some ranks wrote and others did not (an emergency checkpoint that timed out on one rank, a trainer
    killed while saving) cannot be resumed by the whole gang. So rank 0 at 1100 and rank 1 at 1000
    resume from 1000, never from the highest step any rank has. The note says when a newer one was
    passed over because it is not on every rank.

    A sidecar that did not answer is not in `ranks`, and the choice is made by those that did rather
    than refused. The callers ask when the job is in trouble: a rank whose sidecar is gone is most
    often on the node that failed, and refusing would leave the gang with no pin after a NaN (its
    trainers would resume from the checkpoint saved after it) or with no pointer after a node fault;
    the step's detail names the sidecars that did not answer, so people can see what was not checked.
    A rank whose every listed checkpoint was saved after a step was (a replacement pod whose trainer
    started since, counting its steps afresh) has no say on that step: it was not there to save it.
    A rank that reports no checkpoint at all is left out the same way (the note names it): its trainer
    died (an OOM kill) or it is a replacement that has not saved yet, and it holds no information that
    could make a listed step wrong; letting it veto would leave the gang with no pointer at all.
    None when no rank lists a checkpoint or no step is on every rank that does before the fault."""
    silent = sorted(pod for pod, listed in ranks.items() if not listed)
    ranks = {pod: listed for pod, listed in ranks.items() if listed}
    if not ranks:
        return None, ""
    everything = [c for listed in ranks.values() for c in listed]
    dated = {pod: _dated(listed, everything) for pod, listed in ranks.items()}
    steps = [
        {s for c in listed if _good(c, before_ts, before_step) and (s := _float(c.get("step"))) is not None}
        for listed in dated.values()
    ]
    saved_at: dict[float, float] = {}
    for c in everything:
        step, ts = _float(c.get("step")), _float(c.get("ts"))
        if step is not None and ts is not None:
            saved_at[step] = min(ts, saved_at.get(step, ts))
    earliest = [min((t for c in listed if (t := _float(c.get("ts"))) is not None), default=None)
                for listed in dated.values()]  # fmt: skip
    # a rank has a say on a step when it lists a checkpoint saved no later than that step was: it was
    # saving then; a rank whose first listed checkpoint came after (a replacement pod's trainer,
    # started since, its steps counted afresh) neither has nor lacks it. Without times, every rank has
    # a say.
    candidates = set[float]().union(*steps)
    common = {
        step
        for step in candidates
        if all(
            step in mine or (first is not None and step in saved_at and first > saved_at[step])
            for mine, first in zip(steps, earliest, strict=True)
        )
    }
    best, note = choose_checkpoint(
        [c for listed in dated.values() for c in listed if _float(c.get("step")) in common],
        before_ts,
        before_step,
    )
    newest = max(set[float]().union(*steps), default=None)
    if newest is not None and (best is None or newest > float(best["step"])):
        note += f"; step {_fmt_step(newest)} is not on every rank"
    if silent:
        note += f"; {_names(silent)} list(s) no checkpoint"
    return best, note


def silent_rank_bound(best_step: float, said: dict[str, float | None]) -> tuple[float, str]:
    """The bound (a `before_step`: steps at or past it are out) the gang's choice takes when the faulty
    ranks in `said` did not answer, and a note. `said` holds, per silent rank, the step of the last
    checkpoint Prometheus scraped from its sidecar (None: not known).

    The healthy ranks' newest checkpoint (`best_step`) may be one a dead rank never finished: a node
    that dies between a step's all-reduce and the end of its rank's save leaves the other ranks to save
    that step alone (they hang in the next all-reduce), and a replacement would find no shard of it and
    start from fresh weights, which DDP then broadcasts from rank 0. A silent rank's own last report
    settles it: nothing newer than the step it said it saved. Without one, the choice goes one save
    back: in a gang that steps together (every step all-reduces) and saves before stepping on, a rank
    that took part in step N's all-reduce had finished every save before N; the healthy ranks could not
    have saved `best_step` unless the silent rank reached it, so it saved the one before."""
    known = {pod: step for pod, step in said.items() if step is not None}
    if len(known) == len(said):
        lowest = min(known.values())
        reported = _names([f"{pod} {_fmt_step(step)}" for pod, step in sorted(known.items())])
        return math.nextafter(lowest, math.inf), f"; last saved as scraped: {reported}"
    unknown = _names(sorted(set(said) - set(known)))
    return best_step, f"; one save back: {unknown} did not answer and no saved step of theirs is known"


def newest_by_rank(ranks: dict[str, list[dict[str, Any]]]) -> str:
    """Each rank's newest reported step, for a detail: "job-0 1100, job-1 none"."""
    return _names([f"{pod} {_fmt_step(_newest(listed))}" for pod, listed in sorted(ranks.items())])


def _dated(candidates: list[dict[str, Any]], known: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """The candidates, one without a ts given the ts of another (or of one `known`) of the same step and
    path: a pin from a pointer written without a time is the checkpoint the sidecar lists with it."""
    times = {
        (_float(c.get("step")), c.get("path")): ts
        for c in [*candidates, *known]
        if (ts := _float(c.get("ts"))) is not None
    }
    out = []
    for c in candidates:
        key = (_float(c.get("step")), c.get("path"))
        out.append({**c, "ts": times[key]} if _float(c.get("ts")) is None and key in times else c)
    return out


def _step_of(view: dict[str, Any]) -> float | None:
    resume = view.get("resume_from")
    return _float(resume.get("step")) if isinstance(resume, dict) else None


def _checkpoints(view: dict[str, Any]) -> list[dict[str, Any]]:
    """Every checkpoint a sidecar's control view names: `checkpoints`, its recent good ones (an exporter
    older than the pin lists none), and resume_from (the pin, or the newest)."""
    listed = view.get("checkpoints")
    out = [c for c in listed if isinstance(c, dict)] if isinstance(listed, list) else []
    resume = view.get("resume_from")
    return [*out, resume] if isinstance(resume, dict) else out


def _newest(checkpoints: list[dict[str, Any]]) -> float | None:
    return max((s for s in (_float(c.get("step")) for c in checkpoints) if s is not None), default=None)


STUCK_MIN_S = 10.0
"""How long no rank of those asked for a checkpoint may take a step before the gang is judged stuck (and
at least STUCK_STEPS of its last step's duration): a synchronous gang with a dead member blocks in its
next collective, and waiting out emergencyCheckpointTimeout (5 minutes by default) saves nothing."""
STUCK_STEPS = 3.0


def _trainer_step(view: dict[str, Any]) -> float | None:
    step = view.get("step")
    return float(step) if isinstance(step, int | float) and not isinstance(step, bool) else None


def _trainer_gone(view: dict[str, Any]) -> bool:
    """The sidecar's launcher reports its trainer exited (waiting for a word) or itself exiting."""
    launcher = view.get("launcher")
    return isinstance(launcher, dict) and launcher.get("state") in ("waiting", "gone")


def _cannot_save(view: dict[str, Any], step: float | None, since: float, now: float, *, lost: bool) -> bool:
    """Whether a rank asked for a checkpoint will not save it: its launcher reports its trainer gone or
    exited (waiting for a word), or, with a member of the gang `lost` (the faulty node's sidecar does
    not answer, or its trainer is gone), its sidecar has seen no new step for STUCK_MIN_S and
    STUCK_STEPS steps' time. Trainers merely paused (every one still there) are waited for, as is a
    sidecar that reports no step (older, or a trainer that never stepped)."""
    if _trainer_gone(view):
        return True
    if step is None or not lost:
        return False
    step_time = view.get("step_time_s")
    slow = float(step_time) * STUCK_STEPS if isinstance(step_time, int | float) and step_time > 0 else 0.0
    return now - since >= max(STUCK_MIN_S, slow)


def _newest_step(view: dict[str, Any]) -> float | None:
    """The highest step the sidecar knows saved. Not resume_from alone: a pinned one does not move."""
    return _newest(_checkpoints(view))


def _held(view: dict[str, Any]) -> list[dict[str, Any]]:
    """What a rank offers the gang to resume from: its pin while it holds one (checkpoints saved since
    followed a NaN), else every checkpoint it lists."""
    resume = view.get("resume_from")
    if view.get("pinned") is True and isinstance(resume, dict):
        return [resume]
    return _checkpoints(view)


def _pointer(chosen: dict[str, Any]) -> dict[str, Any]:
    """{step, kind, path, ts} of a checkpoint as a sidecar takes it, unknown parts left out."""
    step = _float(chosen.get("step"))
    out = {k: chosen.get(k) for k in ("kind", "path", "ts") if chosen.get(k) is not None}
    return {"step": int(step) if step is not None and step == int(step) else step, **out}


def _fmt_step(step: float | None) -> str:
    if step is None:
        return "none"
    return str(int(step)) if step == int(step) else str(step)


def _names(items: list[str], limit: int = 8) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _errors(errors: dict[str, str]) -> str:
    return (
        "; failed: " + "; ".join(f"{pod}: {err[:80]}" for pod, err in sorted(errors.items()))
        if errors
        else ""
    )


def confirms(view: dict[str, Any], alert: str, gpu: str) -> bool:
    """Whether a sidecar's GET /v1/hardware answer holds a fault of `alert` (on `gpu` when given)."""
    faults = view.get("faults")
    if not isinstance(faults, list):
        return False
    return any(
        isinstance(f, dict) and f.get("alertname") == alert and (not gpu or str(f.get("gpu", "")) == gpu)
        for f in faults
    )


def would(step: dict[str, Any], monitor: TrainingJobMonitor, default_checkpoint_timeout: float) -> str:
    """What a dry run's step would have done."""
    p: dict[str, str] = step.get("params") or {}
    selector = monitor.spec.selector.to_selector_string()
    kind = step.get("kind")
    if kind == StepKind.PAUSE:
        return f"would ask every sidecar of {selector} to pause training"
    if kind == StepKind.PIN_CHECKPOINT:
        bound = _float(p.get("before_ts"))
        return f"would pin the newest checkpoint saved before {rfc3339(bound) if bound else 'the fault'}"
    if kind == StepKind.REQUEST_CHECKPOINT:
        timeout = p.get("timeout_s") or f"{default_checkpoint_timeout:g}"
        away = f" not on {p['avoid']}" if p.get("avoid") else ""
        return f"would ask the sidecars{away} for a full checkpoint and wait up to {timeout}s"
    if kind == StepKind.AWAIT_CHECKPOINT:
        return (
            f"would wait up to {p.get('timeout_s', '?')}s for every rank of {selector} to save its next"
            " periodic checkpoint (asking for none), and do nothing more if none comes"
        )
    if kind == StepKind.CONFIRM_FAULT and p.get("alert") == STRAGGLER_ALERT:
        return (
            f"would confirm {STRAGGLER_ALERT} {p.get('pod') or 'on ' + p.get('node', '?')} from the step times"
            f" the sidecars of {selector} report, or from the job's rule in Prometheus"
        )
    if kind == StepKind.CONFIRM_FAULT:
        return f"would ask the sidecars of {selector} on node {p.get('node', '?')} to confirm {p.get('alert', '?')}"
    if kind == StepKind.CORDON:
        return f"would cordon node {p.get('node', '?')} ({p.get('reason', '')})"
    if kind == StepKind.TAINT:
        return f"would taint node {p.get('node', '?')} {FAULTY_TAINT}={label_value(p.get('reason', ''))}:NoSchedule"
    if kind == StepKind.RESTART_IN_PLACE and p.get("rejoin"):
        return (
            f"would restart the trainers of {selector} off {p['rejoin']} in place as a new generation that the"
            " replacement pod's trainer joins, where every pod runs trainguard launch"
        )
    if kind == StepKind.RESTART_IN_PLACE:
        return (
            f"would restart the trainers of {selector} in place (a new generation to every pod's trainguard launch),"
            " from the newest checkpoint every rank has, where every pod runs one"
        )
    if kind == StepKind.RESTART_GANG:
        ref = monitor.spec.workload_ref
        if ref is not None and ref.kind in JOBSET_KINDS:
            return f"would delete the child Jobs of the JobSet of {ref.kind} {ref.name} so that it recreates them"
        return f"would delete the pods of {selector} so that their controller recreates them as one gang"
    if kind == StepKind.REPLACE_POD:
        how = "mark Failed and force-delete" if p.get("nodeDown") else "evict"
        return f"would {how} the pod of {selector} on node {p.get('node', '?')} so that its owner replaces it"
    if kind == StepKind.CONFIRM_PLACEMENT:
        away = f" away from {p['avoid']}" if p.get("avoid") else ""
        return f"would wait up to {p.get('timeout_s') or f'{PLACEMENT_TIMEOUT_S:g}'}s for the new pods to be scheduled{away}"
    if kind == StepKind.ADVISE:
        return f"would post advice {json.dumps(p, sort_keys=True)} to every sidecar"
    if kind == StepKind.NOTIFY:
        return f"would notify: {p.get('message') or p.get('reason', '')}"
    return f"would do {kind}"


class FaultHistory(Protocol):
    """What Prometheus kept of the jobs (remediation/alert_history.py): what their own rules saw, and
    what their ranks last said they saved."""

    def saw(self, alert: str, namespace: str, training_job: str, node: str, gpu: str = "") -> bool: ...

    def last_saved_step(self, namespace: str, training_job: str, pod: str) -> float | None: ...

    def where(self) -> str: ...


HISTORY_WITHIN = "hour"
"""How far back FaultHistory looks, in words (alert_history.WITHIN)."""


class Executor:
    def __init__(
        self,
        cluster: ClusterOps,
        save: Callable[[Record], Record],
        token_for: Callable[[TrainingJobMonitor], str],
        *,
        read: Callable[[str], Fresh | None],
        key: Callable[[], bytes | None],
        leader: Callable[[], bool] = lambda: True,
        mode: Callable[[], str] = lambda: "act",
        stopping: Callable[[], bool] = lambda: False,
        owner: str = "",
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        notify: Callable[[Record, str], None] | None = None,
        poll_interval: float = POLL_INTERVAL_S,
        history: FaultHistory | None = None,
        finished: FinishedRecords | None = None,
    ) -> None:
        self.cluster = cluster
        self.save = save
        """Writes the record (the monitor's status) and returns it as written; raises records.Superseded
        when the API's copy is no longer where this run last read or wrote it."""
        self.read = read
        """record id -> the record and its monitor as the API holds them now (None: the monitor is gone)."""
        self.key = key
        """The operator key records are signed with (None until the receiver has one)."""
        self.leader = leader
        """Whether this replica leads now (asked before every step: a fencing check)."""
        self.mode = mode
        """The operator-wide mode: "act", "dry-run" or "off" (asked before every step)."""
        self.stopping = stopping
        """Whether the operator is stopping (asked before every step and after every poll of a wait)."""
        self.owner = owner or new_owner()
        self.token_for = token_for
        """The monitor (as read from the API for this step) -> the bearer token of its sidecars, bound to
        its uid (remediation.tokens)."""
        self.clock = clock
        self.sleep = sleep
        self.notify = notify
        """Posts a NOTIFY step's message (to Alertmanager, in the wiring); without it NOTIFY only records."""
        self.poll_interval = poll_interval
        self.history = history
        """Prometheus's record of the jobs' own alerts, the second witness of a GPU fault (None without a
        --prometheus-url: the sidecar is then the only one)."""
        self.finished = finished
        """The records this operator process saw finished (without it, no replay is recognised as one;
        the staleness check still holds)."""
        self._key = b""
        self.stopped = ""
        """Why the last run stopped without finishing the record ("" when it did not): it is someone
        else's, this replica no longer leads, or there is no key to check it with."""

    def run(self, record: Record, monitor: TrainingJobMonitor, *, handed: float | None = None) -> Record:
        """Carry the record out from its next step, as the API holds it (`record` and `monitor` are only
        what the caller saw); returns the record as last saved, or as found when this run stops. `handed`
        (unix seconds, now by default) is when the record was handed over: a record the operator last
        wrote longer before that than records.stale allows is refused."""
        self.stopped = ""
        try:
            return self._run(record, monitor, self.clock() if handed is None else handed)
        except (Superseded, Stopping) as exc:
            self.stopped = str(exc)
            log.info("remediation %s stops without acting: %s", record.get("id"), exc)
            return record

    def _stop(self, record: Record, why: str) -> Record:
        self.stopped = why
        log.info("remediation %s stops without acting: %s", record.get("id"), why)
        return record

    def _save(self, record: Record, monitor: TrainingJobMonitor) -> Record:
        """Sign the record where it now stands and save it; a finished one is remembered as finished."""
        uid = monitor.metadata.uid or ""
        saved = self.save(records.sign(record, self._key, monitor.namespace, monitor.name, uid))
        if self.finished is not None and records.is_finished(saved):
            self.finished.remember(saved, self.clock())
        return saved

    def _run(self, snapshot: Record, monitor: TrainingJobMonitor, handed: float) -> Record:
        fresh = self.read(snapshot["id"])
        if fresh is None or fresh.record is None:
            return self._stop(snapshot, "the record or its monitor is gone")
        record, monitor = fresh.record, fresh.monitor
        key = self.key()
        if key is None:
            return self._stop(record, "no operator key yet to check the record's signature with")
        self._key = key
        where = f"{monitor.namespace}/{monitor.name}"
        if not records.signed(record, key, monitor.namespace, monitor.name, monitor.metadata.uid or ""):
            why = ("refused: the record does not carry the operator's signature for where it stands (written "
                   "or moved on by someone else, copied from another monitor, or written by an operator "
                   "that signed less)")  # fmt: skip
            log.warning("remediation %s of %s %s; nothing of it is carried out", record.get("id"), where, why)
            if records.is_finished(record):
                return self._stop(record, why)
            return self._save(records.refused(record, why, self.clock()), monitor)
        if records.is_finished(record):
            if self.finished is not None:
                self.finished.remember(record, self.clock())
        else:
            seen = self.finished is not None and self.finished.knows(record, self.clock())
            why = records.replayed() if seen else records.stale(record, handed)
            if why:
                log.warning("remediation %s of %s %s", record.get("id"), where, why)
                return self._save(records.refused(record, why, self.clock()), monitor)
        if record.get("dryRun"):
            return self._dry_run(record, monitor)
        if records.next_step(record) is None:
            return self._stop(record, f"the record is already {record.get('phase')}")
        if self.stopping():
            return self._stop(record, STOPPING)
        if not self.leader():
            return self._stop(record, "this replica does not lead")
        record = self._save(records.claimed(record, self.owner), monitor)
        while (index := records.next_step(record)) is not None:
            fresh = self.read(record["id"])
            verdict = gate(record, fresh, leads=self.leader(), mode=self.mode(), stopping=self.stopping())
            if verdict.stop:
                return self._stop(record, verdict.stop)
            if verdict.skip:
                log.warning("remediation %s: %s; its remaining steps are skipped", record["id"], verdict.skip)
                return self._save(records.skip_rest(record, verdict.skip, self.clock()), monitor)
            if fresh is not None:
                monitor = fresh.monitor  # the spec as it is now: it may have changed since the last step
            step = record["steps"][index]
            if step.get("kind") in (StepKind.RESTART_GANG, StepKind.CONFIRM_PLACEMENT) and _in_place(record):
                record = self.save(records.mark(record, index, Phase.SKIPPED, IN_PLACE_DONE, self.clock()))
                continue
            # a step left InProgress by a crash says in its progress fields how far it got; its detail
            # (what it was about to do) is kept for people until the redo writes its own
            redo = step.get("phase") == Phase.IN_PROGRESS
            before = str(step.get("detail") or "") if redo else ""
            progress = Progress(dict(step.get("progress") or {}) if redo else {}, redo)
            record = self._save(records.mark(record, index, Phase.IN_PROGRESS, before, self.clock()), monitor)

            def note(
                detail: str, fields: dict[str, Any], at: int = index, on: TrainingJobMonitor = monitor
            ) -> None:
                """Save what the step is about to do, and the fields a redo resumes from, before it does it."""
                nonlocal record
                record = self._save(
                    records.mark(record, at, Phase.IN_PROGRESS, detail, self.clock(), progress=fields), on
                )

            try:
                detail = self._act(record, index, monitor, progress, note)
            except (Superseded, Stopping):
                raise
            except Waiting as exc:  # the step stays InProgress, its progress saved: a later run looks again
                self.stopped = str(exc)
                log.info("remediation %s waits: %s", record.get("id"), exc)
                return record
            except NotInPlace as exc:
                if (step.get("params") or {}).get("rejoin"):
                    after = "the healthy ranks are left to the owner's failure policy (their pods restart when they fail)"
                elif _gang_after(record, index):
                    after = "the gang is restarted by new pods instead (RestartGang)"
                else:
                    after = "training stays paused at the pin: restart the job by hand"
                record = self.save(
                    records.mark(record, index, Phase.SKIPPED, f"{exc}; {after}", self.clock())
                )
                continue
            except Exception as exc:  # a crash (SystemExit, KeyboardInterrupt) is not a failed step
                message = str(exc) if isinstance(exc, StepFailed) else f"{type(exc).__name__}: {exc}"
                return self._save(records.mark(record, index, Phase.FAILED, message, self.clock()), monitor)
            record = self._save(records.mark(record, index, Phase.SUCCEEDED, detail, self.clock()), monitor)
        return record

    def _dry_run(self, record: Record, monitor: TrainingJobMonitor) -> Record:
        if all(s.get("detail") for s in record.get("steps", [])):
            return record
        out = copy.deepcopy(record)
        timeout = duration_seconds(monitor.spec.remediation.emergency_checkpoint_timeout)
        for step in out.get("steps", []):
            if step.get("phase") == Phase.DRY_RUN and not step.get("detail"):
                step["detail"] = would(step, monitor, timeout)
        return self._save(out, monitor)

    def _act(
        self,
        record: Record,
        index: int,
        monitor: TrainingJobMonitor,
        progress: Progress,
        note: Note,
    ) -> str:
        step = record["steps"][index]
        params: dict[str, str] = step.get("params") or {}
        kind = step.get("kind")
        if kind == StepKind.PAUSE:
            return self._pause(monitor)
        if kind == StepKind.PIN_CHECKPOINT:
            return self._pin(monitor, params)
        if kind == StepKind.REQUEST_CHECKPOINT:
            return self._request_checkpoint(monitor, params, progress, note)
        if kind == StepKind.AWAIT_CHECKPOINT:
            return self._await_checkpoint(monitor, params, progress, note)
        if kind == StepKind.CONFIRM_FAULT and params.get("alert") == STRAGGLER_ALERT:
            return self._confirm_straggler(monitor, params)
        if kind == StepKind.CONFIRM_FAULT:
            return self._confirm_fault(monitor, params)
        if kind == StepKind.CORDON:
            node = params.get("node") or record.get("node", "")
            if not node:
                raise StepFailed("no node to cordon")
            return self.cluster.cordon(node, params.get("reason") or record.get("alert", ""), record["id"])
        if kind == StepKind.TAINT:
            node = params.get("node") or record.get("node", "")
            if not node:
                raise StepFailed("no node to taint")
            return self.cluster.taint(node, params.get("reason") or record.get("alert", ""))
        if kind == StepKind.RESTART_IN_PLACE:
            if params.get("rejoin"):
                return self._rejoin(record, monitor, params, progress=progress, note=note)
            return self._restart_in_place(record, index, monitor, params, progress=progress, note=note)
        if kind == StepKind.RESTART_GANG:
            ref = monitor.spec.workload_ref
            if ref is not None and ref.kind in JOBSET_KINDS:
                return self._restart_jobset(record, monitor, params, progress, note)
            return self._restart(record, monitor, progress, note)
        if kind == StepKind.REPLACE_POD:
            return self._replace_pod(record, index, monitor, params, progress=progress, note=note)
        if kind == StepKind.CONFIRM_PLACEMENT:
            return self._confirm(record, monitor, params)
        if kind == StepKind.ADVISE:
            return self._advise(record, monitor, params)
        if kind == StepKind.NOTIFY:
            message = params.get("message") or params.get("reason") or record.get("message", "")
            if self.notify is None:
                return f"recorded, no notifier wired: {message}"
            self.notify(record, message)
            return f"notified: {message}"
        raise StepFailed(f"unknown step kind {kind!r}")

    def _unless_stopping(self) -> None:
        """Raise Stopping when the operator is stopping: a wait ends there, its step left InProgress."""
        if self.stopping():
            raise Stopping(STOPPING)

    # ---- sidecars ----

    def _sidecars(self, monitor: TrainingJobMonitor) -> tuple[list[Sidecar], str]:
        found = self.cluster.sidecars(monitor.namespace, monitor.spec.selector, monitor.spec.exporter.port)
        return found, self.token_for(monitor)

    def _each(
        self, sidecars: list[Sidecar], call: Callable[[Sidecar], dict[str, Any]]
    ) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        """Call every sidecar; one that fails costs only its own answer."""
        answers: dict[str, dict[str, Any]] = {}
        errors: dict[str, str] = {}
        for sc in sidecars:
            try:
                answers[sc.pod] = call(sc)
            except Exception as exc:
                errors[sc.pod] = str(exc) or type(exc).__name__
        return answers, errors

    def _broadcast(self, monitor: TrainingJobMonitor, body: dict[str, Any], what: str) -> str:
        sidecars, token = self._sidecars(monitor)
        if not sidecars:
            raise StepFailed(f"no running sidecar of {monitor.spec.selector.to_selector_string()} to {what}")
        answers, errors = self._each(sidecars, lambda sc: self.cluster.control(sc.base_url, token, body))
        if not answers:
            raise StepFailed(f"no sidecar took {what}{_errors(errors)}")
        return f"{what}: {_names(sorted(answers))}{_errors(errors)}"

    def _confirm_fault(self, monitor: TrainingJobMonitor, params: dict[str, str]) -> str:
        """A GPU fault is acted on once a witness the cluster vouches for saw it: the job's sidecar on that
        node (its pod read from the API), or else the job's own rule in Prometheus (ALERTS, whose node and
        pod come from the scrape target; the only witness with gpuBackend dcgm). The alert's labels are
        claims. Unconfirmed, nothing after this step is done; a node too dead to answer is GPUNodeDown's,
        judged from node state."""
        node, alert, gpu = params.get("node", ""), params.get("alert", ""), params.get("gpu", "")
        sidecars, token = self._sidecars(monitor)
        here = [sc for sc in sidecars if sc.node == node]
        what = f"{alert}{f' on GPU {gpu}' if gpu else ''}"
        views, errors = self._each(here, lambda sc: self.cluster.read_hardware(sc.base_url, token))
        for pod, view in sorted(views.items()):
            if confirms(view, alert, gpu):
                return f"confirmed by the sidecar of {pod} on {node}: it saw {what}"
        heard = f"; {_names(sorted(views))} did not see it" if views else ""
        if self.history is not None:
            where = self.history.where()
            try:
                if self.history.saw(alert, monitor.namespace, monitor.name, node, gpu):
                    return f"confirmed by {where}: the job's rule fired for {what} on {node}"
                heard += f"; {where} holds no {alert} of the job on {node} in the last {HISTORY_WITHIN}"
            except Exception as exc:
                errors[where] = str(exc) or type(exc).__name__
        if not here:
            raise StepFailed(
                f"unconfirmed: no running sidecar of the job on {node} to confirm {what}{heard}{_errors(errors)};"
                " nothing is done"
            )
        raise StepFailed(
            f"unconfirmed: no sidecar on {node} saw {what}{heard}{_errors(errors)}; nothing is done"
        )

    def _confirm_straggler(self, monitor: TrainingJobMonitor, params: dict[str, str]) -> str:
        """A StragglerRank claim is acted on once the sidecars' step times bear it out (slow_node.py: the
        claimed rank computes at least 10% longer a step than its peers' median), or else the job's own
        rule in Prometheus fired it for that node. The claimed pod must run on the claimed node."""
        node, pod = params.get("node", ""), params.get("pod", "")
        sidecars, token = self._sidecars(monitor)
        here = [sc.pod for sc in sidecars if sc.node == node and (not pod or sc.pod == pod)]
        views, errors = self._each(sidecars, lambda sc: self.cluster.read_control(sc.base_url, token))
        what = f"{STRAGGLER_ALERT} {pod or 'on ' + node}"
        found, why = (
            straggler_evidence(views, here)
            if here
            else ("", f"no running sidecar of {pod or 'the job'} on {node}")
        )
        if found:
            return f"confirmed by the sidecars' step times: {why}{_errors(errors)}"
        if self.history is not None:
            where = self.history.where()
            try:
                if self.history.saw(STRAGGLER_ALERT, monitor.namespace, monitor.name, node):
                    return f"confirmed by {where}: the job's rule fired {what} on {node} ({why})"
                why += (
                    f"; {where} holds no {STRAGGLER_ALERT} of the job on {node} in the last {HISTORY_WITHIN}"
                )
            except Exception as exc:
                errors[where] = str(exc) or type(exc).__name__
        raise StepFailed(f"unconfirmed: {what}: {why}{_errors(errors)}; nothing is done")

    def _await_checkpoint(
        self, monitor: TrainingJobMonitor, params: dict[str, str], progress: Progress, note: Note
    ) -> str:
        """Wait for the job's own next checkpoint: every rank that answers lists one step past the newest
        any of them had when the wait began (`gang_checkpoint`: the step the gang resumes from). Nothing
        is asked of the trainers. The mark and the start are saved in the step's progress (pastStep,
        since) before the first look, so a later look, or a redo after a crash, waits for the same mark
        until the same deadline. Not there yet: `Waiting` (the run ends, the step stays InProgress)."""
        timeout = _float(params.get("timeout_s"))
        if timeout is None:
            timeout = duration_seconds(monitor.spec.remediation.slow_node_checkpoint_wait)
        sidecars, token = self._sidecars(monitor)
        selector = monitor.spec.selector.to_selector_string()
        if not sidecars:
            raise StepFailed(f"no running sidecar of {selector} to watch for a checkpoint; nothing is done")
        views, errors = self._each(sidecars, lambda sc: self.cluster.read_control(sc.base_url, token))
        since = _float(progress.fields.get("since"))
        past = _float(progress.fields.get("pastStep"))
        if since is None:
            if not views:
                raise StepFailed(f"no sidecar of {selector} answered{_errors(errors)}; nothing is done")
            known = [s for s in map(_newest_step, views.values()) if s is not None]
            past, since = (max(known) if known else None), self.clock()
            note(f"waiting up to {timeout:g}s for every rank's next checkpoint past step {_fmt_step(past)}",
                 {"pastStep": past, "since": since})  # fmt: skip
        shared, _ = gang_checkpoint({p: _checkpoints(v) for p, v in views.items()}, None, None)
        every = _float(shared.get("step")) if shared else None
        waited = self.clock() - since
        if views and every is not None and (past is None or every > past):
            return (
                f"checkpoint step {_fmt_step(every)} on every rank ({_names(sorted(views))}) after {waited:.0f}s"
                + _errors(errors)
            )
        if waited >= timeout:
            raise StepFailed(
                f"no checkpoint past step {_fmt_step(past)} on every rank within {timeout:g}s (every rank has step"
                f" {_fmt_step(every)}){_errors(errors)}; nothing is cordoned or restarted: raise"
                " slowNodeCheckpointWait above the job's checkpoint interval, or choose ReplaceNow"
            )
        raise Waiting(
            f"no checkpoint past step {_fmt_step(past)} on every rank yet ({waited:.0f}s of {timeout:g}s)"
        )

    def _pause(self, monitor: TrainingJobMonitor) -> str:
        return self._broadcast(monitor, {"pause": True}, "paused")

    def _pin(self, monitor: TrainingJobMonitor, params: dict[str, str]) -> str:
        sidecars, token = self._sidecars(monitor)
        views, errors = self._each(sidecars, lambda sc: self.cluster.read_control(sc.base_url, token))
        ranks = {pod: _checkpoints(v) for pod, v in views.items()}
        before_ts, before_step = _float(params.get("before_ts")), _float(params.get("before_step"))
        chosen, note = gang_checkpoint(ranks, before_ts, before_step)
        if chosen is None:
            if choose_checkpoint([c for cs in ranks.values() for c in cs], before_ts, before_step)[0] is None:
                raise StepFailed(
                    f"no checkpoint saved before the fault is known to the sidecars{_errors(errors)}"
                )
            raise StepFailed(
                "no checkpoint saved before the fault is on every sidecar that answered"
                f" (newest: {newest_by_rank(ranks)}){_errors(errors)}"
            )
        pinned = _pointer(chosen)
        answers, set_errors = self._each(
            [sc for sc in sidecars if sc.pod in views],
            lambda sc: self.cluster.control(sc.base_url, token, {"resume_from": pinned}),
        )
        kept = [pod for pod, a in answers.items() if _step_of(a) == _float(pinned.get("step"))]
        refused = sorted(set(answers) - set(kept))
        detail = f"pinned step {_fmt_step(_float(pinned.get('step')))} ({pinned.get('path', '')}){note}"
        if refused:
            detail += f"; sidecars that do not hold the pin: {_names(refused)}"
        return detail + _errors({**errors, **set_errors})

    def _request_checkpoint(
        self, monitor: TrainingJobMonitor, params: dict[str, str], progress: Progress, note: Note
    ) -> str:
        """Ask the ranks off the faulty nodes for a full checkpoint and wait until each one has saved past
        the newest step any of them had (the gang's next consistent checkpoint). Progress is the highest
        step a sidecar lists, not its resume_from: a pinned one never moves. That step is saved in the
        step's progress (pastStep, asked) before asking, so a redo after a crash waits for the same mark
        and asks only sidecars that neither saved past it nor still hold the request. A timeout is
        recorded, not failed: the cordon must go on."""
        timeout = _float(params.get("timeout_s"))
        if timeout is None:
            timeout = duration_seconds(monitor.spec.remediation.emergency_checkpoint_timeout)
        sidecars, token = self._sidecars(monitor)
        healthy = {sc.pod: sc for sc in sidecars if sc.node not in _avoid(params)}
        faulty = [sc for sc in sidecars if sc.node in _avoid(params)]
        if not healthy:
            return "no healthy sidecar to ask for a checkpoint"
        views, errors = self._each(
            list(healthy.values()), lambda sc: self.cluster.read_control(sc.base_url, token)
        )
        if not views:
            return f"no sidecar answered the checkpoint request{_errors(errors)}"
        if progress.fields.get("asked") is not None:  # a redo: the same mark as before the crash
            past = _float(progress.fields.get("pastStep"))
        else:
            known = [s for s in map(_newest_step, views.values()) if s is not None]
            past = max(known) if known else None
            note(f"asking {len(views)} sidecar(s) for a checkpoint past step {_fmt_step(past)}",
                 {"asked": len(views), "pastStep": past})  # fmt: skip

        def done(view: dict[str, Any]) -> bool:
            step = _newest_step(view)
            return step is not None and (past is None or step > past)

        kind = "incremental" if params.get("kind") == "incremental" else "full"
        pending = {kind, "full"}  # a pending full checkpoint answers an incremental request too
        to_ask = [healthy[p] for p, v in views.items() if not done(v) and v.get("checkpoint") not in pending]
        _, ask_errors = self._each(
            to_ask, lambda sc: self.cluster.control(sc.base_url, token, {"checkpoint": kind})
        )
        errors.update(ask_errors)
        waiting = sorted(set(views) - set(ask_errors))
        if not waiting:
            return f"no sidecar took the checkpoint request{_errors(errors)}"
        reached: dict[str, float] = {
            p: s for p in waiting if done(views[p]) and (s := _newest_step(views[p])) is not None
        }
        latest = dict(views)
        deadline = self.clock() + timeout
        moved = {p: (_trainer_step(views[p]), self.clock()) for p in waiting}
        # per rank: its trainer's step and when the operator last saw it change
        stuck = ""
        lost = bool(_avoid(params)) and self._peer_lost(faulty, token)
        while len(reached) < len(waiting) and self.clock() < deadline:
            self.sleep(self.poll_interval)
            self._unless_stopping()
            for pod in sorted(set(waiting) - set(reached)):
                try:
                    view = self.cluster.read_control(healthy[pod].base_url, token)
                except Exception as exc:
                    errors[pod] = str(exc) or type(exc).__name__
                    continue
                errors.pop(pod, None)
                latest[pod] = view
                if (now_step := _trainer_step(view)) != moved[pod][0]:
                    moved[pod] = (now_step, self.clock())
                step = _newest_step(view)
                if step is not None and done(view):
                    reached[pod] = step
            left = sorted(set(waiting) - set(reached))
            lost = lost or (bool(_avoid(params)) and self._peer_lost(faulty, token))
            if left and all(_cannot_save(latest[p], *moved[p], self.clock(), lost=lost) for p in left):
                stuck = (f"; no step from {_names(left)} for {max(self.clock() - moved[p][1] for p in left):.0f}s"
                         " (a gang stuck on its lost peer cannot save): not waiting further")  # fmt: skip
                break
        # what the gang can resume from now: the newest step every rank that answered lists
        shared, _ = gang_checkpoint({p: _checkpoints(v) for p, v in latest.items()}, None, None)
        every = _float(shared.get("step")) if shared else None
        if len(reached) == len(waiting):
            on = f"saved on {_names(sorted(reached))}"
            if every is not None and (past is None or every > past):
                return f"checkpoint step {_fmt_step(every)} {on}" + _errors(errors)
            return (
                f"checkpoints past step {_fmt_step(past)} {on}, no one step on every rank;"
                f" every rank has step {_fmt_step(every)}" + _errors(errors)
            )
        missing = sorted(set(waiting) - set(reached))
        got = f"; step {_fmt_step(min(reached.values()))} on {_names(sorted(reached))}" if reached else ""
        if stuck:
            return (f"{_names(missing)} did not save past step {_fmt_step(past)}{stuck}{got}; every rank has step "
                    f"{_fmt_step(every)}" + _errors({p: e for p, e in errors.items() if p not in reached}))  # fmt: skip
        return (
            f"timed out after {timeout:g}s waiting for {_names(missing)} to save past step {_fmt_step(past)}{got};"
            f" every rank has step {_fmt_step(every)}"
            + _errors({p: e for p, e in errors.items() if p not in reached})
        )

    # ---- the gang ----

    def _restart_in_place(
        self,
        record: Record,
        index: int,
        monitor: TrainingJobMonitor,
        params: dict[str, str],
        *,
        progress: Progress,
        note: Note,
    ) -> str:
        """Restart the trainers, not the pods: post a new generation's word to every sidecar of the gang,
        where `trainguard launch` stops its trainer and starts it again from the word's checkpoint, and wait
        until every launcher runs that generation. The generation is saved in the step's progress before
        the first post, so a redo posts the same one (a launcher that runs it ignores it), with the word a
        sidecar already holds. Every live pod of the gang must have a running sidecar with a live launcher
        and none may have failed (a member lost: only new pods restore the gang), else NotInPlace; a
        launcher that does not start it within the timeout is NotInPlace too when a RestartGang follows
        (its new pods replace every pod), else the step fails. The checkpoint is the newest every rank
        has (`gang_checkpoint`; a rank holding a pin offers only its pin)."""
        timeout = _float(params.get("timeout_s")) or IN_PLACE_TIMEOUT_S
        gang, lost = _gang(self.cluster.gang_pods(monitor.namespace, monitor.spec.selector))
        posted = progress.fields.get("generation")
        fallback = _gang_after(record, index)

        def refuse(why: str) -> NoReturn:
            if posted is not None and not fallback:
                raise StepFailed(f"generation {posted} was posted, then: {why}")
            raise NotInPlace(why)

        if lost:
            refuse(f"{_names(lost)} of the gang ended or is being deleted")
        if not gang:
            refuse("no live pod of the job")
        sidecars, token = self._sidecars(monitor)
        by_pod = {sc.pod: sc for sc in sidecars if sc.pod in gang}
        if missing := [p for p in gang if p not in by_pod]:
            refuse(f"no running sidecar in {_names(missing)}")
        views, errors = self._each(
            list(by_pod.values()), lambda sc: self.cluster.read_control(sc.base_url, token)
        )
        if errors:
            refuse(f"not every sidecar answered{_errors(errors)}")
        if without := [p for p in gang if not _launcher_alive(views[p])]:
            refuse(f"no live trainguard launch in {_names(without)}")
        if isinstance(posted, int) and not isinstance(posted, bool):
            generation = posted
        else:
            generation = 1 + max(_generation(v) for v in views.values())
        word = next(
            (copy.deepcopy(v["restart"]) for v in views.values() if _word_generation(v) == generation), None
        )
        if word is None:  # first post: the gang's checkpoint, the one every sidecar's pin will hold
            best, why = gang_checkpoint({pod: _held(v) for pod, v in views.items()}, None, None)
            word = {
                "generation": generation,
                "record": record["id"],
                "resume_from": _pointer(best) if best else None,
            }
            where = f"step {_fmt_step(_float(best.get('step')))}{why}" if best else "what each trainer finds"
            note(f"posting generation {generation} to the launchers of {_names(gang)}; resuming from {where}",
                 {"generation": generation})  # fmt: skip
        posted = generation  # from here on a refusal after some launchers may have restarted
        body: dict[str, Any] = {"restart": word, "pause": False}
        if word.get("resume_from"):
            body["resume_from"] = word["resume_from"]  # held as a pin: what the SDK answers too
        started: set[str] = set()
        deadline = self.clock() + timeout
        while True:
            for pod in sorted(set(gang) - started):
                if _word_generation(views[pod]) < generation:  # not posted yet, or a sidecar that restarted
                    answers, failed = self._each(
                        [by_pod[pod]], lambda sc: self.cluster.control(sc.base_url, token, body)
                    )
                    errors.update(failed)
                    views.update(answers)
                if _launcher_generation(views[pod]) >= generation:
                    started.add(pod)
            if len(started) == len(gang):
                break
            if self.clock() >= deadline:
                late = sorted(set(gang) - started)
                refuse(f"generation {generation} not started by the launchers of {_names(late)} within {timeout:g}s"
                       f"{_errors({p: e for p, e in errors.items() if p in late})}")  # fmt: skip
            self.sleep(min(self.poll_interval, WORD_POLL_S))
            fresh, errors = self._each(
                [by_pod[p] for p in sorted(set(gang) - started)],
                lambda sc: self.cluster.read_control(sc.base_url, token),
            )
            views.update(fresh)
        resume = word.get("resume_from")
        step = (
            f"step {_fmt_step(_float(resume.get('step')))}"
            if isinstance(resume, dict)
            else "what each trainer found"
        )
        return f"generation {generation} runs on {_names(gang)}, restarted in place from {step}; no pod was replaced"

    def _healthy_launchers(
        self, monitor: TrainingJobMonitor, node: str, before: float | None = None
    ) -> tuple[dict[str, dict[str, Any]], str]:
        """The views of the sidecars of the gang's live pods off `node` (created before `before`: not
        the replacement), and why they cannot restart in place ("" when each runs a live launcher)."""
        pods = self.cluster.gang_pods(monitor.namespace, monitor.spec.selector)
        if before is not None:
            pods = [p for p in pods if creation_seconds(p) < before]
        gang, _ = _gang([p for p in pods if (p.get("spec") or {}).get("nodeName") != node])
        if not gang:
            return {}, f"no live pod of the job off {node}"
        sidecars, token = self._sidecars(monitor)
        by_pod = {sc.pod: sc for sc in sidecars if sc.pod in gang}
        if missing := [p for p in gang if p not in by_pod]:
            return {}, f"no running sidecar in {_names(missing)}"
        views, errors = self._each(list(by_pod.values()), partial(self._read_view, token=token))
        if errors:
            return views, f"not every sidecar answered{_errors(errors)}"
        if without := [p for p in gang if not _launcher_alive(views[p])]:
            return views, f"no live trainguard launch in {_names(without)}"
        return views, ""

    def _peer_lost(self, faulty: list[Sidecar], token: str) -> bool:
        """Whether a rank on the faulty node is gone: no sidecar left there, one that does not answer (a
        dead node), or one whose launcher reports its trainer exited."""
        if not faulty:
            return True
        views, errors = self._each(faulty, partial(self._read_view, token=token))
        return bool(errors) or any(_trainer_gone(v) for v in views.values())

    def _read_view(self, sc: Sidecar, *, token: str) -> dict[str, Any]:
        return self.cluster.read_control(sc.base_url, token)

    def _post_word(self, sc: Sidecar, *, token: str, word: dict[str, Any]) -> dict[str, Any]:
        """The restart word to one sidecar, its checkpoint held as a pin (what the SDK answers too)."""
        body: dict[str, Any] = {"restart": word, "pause": False}
        if word.get("resume_from"):
            body["resume_from"] = word["resume_from"]
        return self.cluster.control(sc.base_url, token, body)

    def _rejoin_generation(self, monitor: TrainingJobMonitor, node: str) -> int | None:
        """The generation the healthy ranks off `node` will restart as, for the replacement's pointer; None
        when they cannot restart in place (the replacement then starts as its launcher would)."""
        views, why = self._healthy_launchers(monitor, node)
        return None if why else 1 + max(_generation(v) for v in views.values())

    def _rejoin(
        self,
        record: Record,
        monitor: TrainingJobMonitor,
        params: dict[str, str],
        *,
        progress: Progress,
        note: Note,
    ) -> str:
        """After ReplacePod: restart the healthy ranks' trainers in place as a new generation at once
        (their peer is gone: they wait at the new generation's rendezvous while the owner makes the
        replacement), then give the replacement's sidecar the same word and wait until every rank's
        launcher runs it. The generation is the one ReplacePod put in the pointer (the replacement's
        sidecar holds it from the start, so its first trainer joins), else one above every generation a
        sidecar knows; it is saved in the progress before the first word, with the gang's size. Before
        any word, a healthy rank without a live launcher (or a sidecar that does not answer) makes the
        step NotInPlace: the owner's own policy restarts the gang when the trainers fail. After it, a
        rank lost or a launcher that does not run the generation within the timeout fails the step."""
        node = params["rejoin"]
        timeout = _float(params.get("timeout_s")) or REJOIN_TIMEOUT_S
        ref = monitor.spec.workload_ref
        if ref is not None and not progress.fields:
            moved = _restarted_by_owner(
                self.cluster.workload(monitor.namespace, ref, monitor.spec.selector), params, progress
            )
            if moved:
                raise NotInPlace(moved)
        posted, size = progress.fields.get("generation"), progress.fields.get("size")
        word: dict[str, Any] | None = None
        if not (isinstance(posted, int) and isinstance(size, int)):
            views, why = self._healthy_launchers(
                monitor, node, before=math.floor(unix(str(record.get("created", ""))))
            )
            if why:
                raise NotInPlace(why)
            replaced = _replaced(record)
            planned = _replace_generation(record)
            generation = planned or 1 + max(_generation(v) for v in views.values())
            if planned:  # the replacement was created holding this checkpoint: the whole gang resumes from it
                best, chose = _replace_pointer(record), " (the replacement's resume-from)"
            else:
                best, chose = gang_checkpoint({pod: _held(v) for pod, v in views.items()}, None, None)
            word = {
                "generation": generation,
                "record": record["id"],
                "resume_from": _pointer(best) if best else None,
            }
            where = (
                f"step {_fmt_step(_float(best.get('step')))}{chose}" if best else "what each trainer finds"
            )
            size = len(views) + replaced
            note(f"posting generation {generation} to the launchers of {_names(sorted(views))}, then to the "
                 f"replacement's; resuming from {where}", {"generation": generation, "size": size})  # fmt: skip
            posted = generation
        generation = int(posted)
        started: set[str] = set()
        known: set[str] = set()
        errors: dict[str, str] = {}
        deadline = self.clock() + timeout
        while True:
            self._unless_stopping()
            gang, _ = _gang(self.cluster.gang_pods(monitor.namespace, monitor.spec.selector))
            if gone := sorted(known - set(gang)):
                raise StepFailed(f"generation {generation} was posted, then {_names(gone)} of the gang ended")
            sidecars, token = self._sidecars(monitor)
            by_pod = {sc.pod: sc for sc in sidecars if sc.pod in gang and sc.node != node}
            views, errors = self._each(
                [by_pod[p] for p in sorted(set(by_pod) - started)], partial(self._read_view, token=token)
            )
            if word is None:  # a redo: the word as a sidecar holds it
                word = next((copy.deepcopy(v["restart"]) for v in views.values()
                             if _word_generation(v) == generation), None)  # fmt: skip
            if word is not None:
                behind = [by_pod[p] for p, v in sorted(views.items()) if _word_generation(v) < generation]
                answers, failed = self._each(behind, partial(self._post_word, token=token, word=word))
                errors.update(failed)
                views.update(answers)
            known |= {p for p, v in views.items() if _word_generation(v) >= generation}
            started |= {p for p, v in views.items() if _launcher_generation(v) >= generation}
            if len(started) >= int(size) and started >= set(by_pod):
                break
            if self.clock() >= deadline:
                late = sorted(
                    (set(by_pod) - started) | ({"the replacement"} if len(by_pod) < int(size) else set())
                )
                raise StepFailed(f"generation {generation} was posted, then not started by {_names(late)} within "
                                 f"{timeout:g}s{_errors(errors)}")  # fmt: skip
            self.sleep(min(self.poll_interval, WORD_POLL_S))
        resume = (word or {}).get("resume_from")
        step = (
            f"step {_fmt_step(_float(resume.get('step')))}"
            if isinstance(resume, dict)
            else "what each trainer found"
        )
        return (f"generation {generation} runs on {_names(sorted(started))} (the replacement joined it), restarted in "
                f"place from {step}")  # fmt: skip

    def _restart(self, record: Record, monitor: TrainingJobMonitor, progress: Progress, note: Note) -> str:
        """Delete the gang's pods; their controller recreates them. Before deleting, the step's progress
        says how many pods and the newest creation second among them (count, createdUpTo): a redo after a
        crash deletes only live pods created up to that second, so the replacements are not deleted
        again. (Pod times have whole seconds: a replacement made in the second of the newest old pod
        would be deleted twice.) A redo of a step an older operator began, with no progress fields,
        takes the pods created before the record as the old gang."""
        namespace, selector = monitor.namespace, monitor.spec.selector
        pods = self.cluster.gang_pods(namespace, selector)
        live = [p for p in pods if _live(p)]
        cut = _float(progress.fields.get("createdUpTo"))
        if cut is not None:
            count = int(progress.fields.get("count") or 0)
            old = [p for p in live if creation_seconds(p) <= cut]
            deleted = self.cluster.delete_pods(namespace, _pod_names(old))
            return self._with_spares(
                f"deleted the gang's pods created up to {cut:.0f} ({len(deleted)} of them after the operator "
                f"restarted); {count} new pod(s) awaited"
            )
        if progress.redo:
            before = math.floor(unix(str(record.get("created", ""))))
            pods = [p for p in pods if creation_seconds(p) < before]
            live = [p for p in live if creation_seconds(p) < before]
        old, lost = live, _lost(pods)
        count = _members(live, lost)
        cut = max((creation_seconds(p) for p in old), default=0.0)
        pointer, chosen = self._resume_pointer(monitor, _restart_avoid(record), since=_fault_time(record))
        also = (
            f" (the gang lost {_names(_pod_names(lost))} already: {count} new pod(s) awaited)"
            if count > len(old)
            else ""
        )
        note(f"deleting {len(old)} pod(s) created up to {cut:.0f}: {_names(_pod_names(old))}{also}; {pointer}",
             {"count": count, "createdUpTo": int(cut), "resumeFrom": _checkpoint_json(chosen)})  # fmt: skip
        self.cluster.delete_pods(namespace, _pod_names(old))
        return self._with_spares(f"deleted {len(old)} pod(s): {_names(_pod_names(old))}{also}; {pointer}")

    def _with_spares(self, detail: str) -> str:
        spares = self.cluster.spares()
        if spares:
            detail += f"; spares available: {_names(spares)}"
        return detail

    def _owner(self, monitor: TrainingJobMonitor) -> Workload:
        """The workload owner now; a step through it fails when it no longer resolves or allows it."""
        ref = monitor.spec.workload_ref
        if ref is None:
            raise StepFailed("no spec.workloadRef: the pods' owner is unknown")
        workload = self.cluster.workload(monitor.namespace, ref, monitor.spec.selector)
        if workload.problem:
            raise StepFailed(f"{workload.problem}; nothing is restarted")
        if workload.refusal:
            raise StepFailed(f"{workload.refusal}; nothing is restarted")
        return workload

    def _restart_jobset(
        self,
        record: Record,
        monitor: TrainingJobMonitor,
        params: dict[str, str],
        progress: Progress,
        note: Note,
    ) -> str:
        """A JobSet's (or a TrainJob's JobSet's) gang restarted through the JobSet: its child Jobs of the
        current restart attempt are deleted (Background, each checked to be the JobSet's), and the
        JobSet recreates them at once, at the same attempt, with no Job back-off and nothing counted
        against maxRestarts (trainguard counts it in jobRestartBudget, and refuses it when maxRestarts
        has nothing left). Progress as for pods: the gang's pod count and newest creation second; a
        redo deletes only the child Jobs created up to that second, never the recreated ones."""
        workload = self._owner(monitor)
        moved = _restarted_by_owner(workload, params, progress)
        if moved:
            return moved
        namespace = monitor.namespace
        live = list(workload.live)
        cut = _float(progress.fields.get("createdUpTo"))
        pointer = ""
        if cut is None:
            if progress.redo:  # an older operator's step: the gang is what was there before the record
                before = math.floor(unix(str(record.get("created", ""))))
                live = [p for p in live if creation_seconds(p) < before]
            cut = max((creation_seconds(p) for p in live), default=0.0)
            jobs = [j for j in workload.children if j.created <= cut]
            pointer, chosen = self._resume_pointer(monitor, _restart_avoid(record), since=_fault_time(record))
            note(f"deleting the JobSet {workload.jobset}'s child Job(s) {_names([j.name for j in jobs])} "
                 f"({len(live)} pod(s) created up to {cut:.0f}); {pointer}",
                 {"count": len(live), "createdUpTo": int(cut), "resumeFrom": _checkpoint_json(chosen)})  # fmt: skip
        else:
            jobs = [j for j in workload.children if j.created <= cut]
        deleted = [
            j.name
            for j in jobs
            if self.cluster.delete_child_job(namespace, j.name, j.uid, workload.jobset_uid)
        ]
        count = int(progress.fields.get("count") or len(live))
        detail = (
            f"deleted the JobSet {workload.jobset}'s child Job(s) {_names(deleted) or 'none (already gone)'}"
            f" of restart attempt {workload.attempt}: the JobSet recreates them ({count} pod(s))"
        )
        return detail + (f"; {pointer}" if pointer else "")

    def _replace_pod(
        self,
        record: Record,
        index: int,
        monitor: TrainingJobMonitor,
        params: dict[str, str],
        *,
        progress: Progress,
        note: Note,
    ) -> str:
        """Replace only the gang's pod(s) on the faulty node, through the owner (kube/workloads.py's
        Replacement): a JobSet child Job of parallelism 1 is deleted first (Background; the JobSet
        recreates it at once and no one counts the pod's loss), then the pod goes: on a node judged down
        it is marked Failed with DisruptionTarget=True (not a PyTorchJob's: Workload.marks_failed) and
        force-deleted (its kubelet will never confirm), on a live node it is evicted (policy/v1 sets DisruptionTarget; a PodDisruptionBudget
        may refuse). Before acting, the step's progress names each pod and child Job by uid, so a redo
        acts on those only, never on their replacements; the resume-from pointer is written on the
        workload first, for the replacement's sidecar. When a RestartInPlace rejoins the gang after it
        and every healthy rank runs a live launcher, the pointer carries the generation the gang restarts
        as (saved in the progress too): the replacement's first trainer joins it."""
        node = params.get("node", "")
        down = params.get("nodeDown") == "true"
        namespace = monitor.namespace
        workload = self._owner(monitor)
        moved = _restarted_by_owner(workload, params, progress)
        if moved:
            return moved
        if progress.fields.get("uids") is not None:  # a redo: the same pods and Jobs as before the crash
            targets = _targets(progress.fields.get("uids"), node)
        else:
            # a dead node's pod may be stuck terminating already: it is forced off too
            targets = workload.replacements(node, terminating=down)
            refused = [r.refusal for r in targets if r.refusal]
            if refused:
                raise StepFailed(f"{refused[0]}; nothing is done")
            if not targets:
                return f"no pod of the gang on {node}: nothing to replace"
            generation = self._rejoin_generation(monitor, node) if _rejoin_after(record, index) else None
            pointer, chosen = self._resume_pointer(
                monitor, {node}, since=_fault_time(record), generation=generation,
                record_id=record["id"],
            )  # fmt: skip
            how = "force-deleting (node down)" if down else "evicting"
            # the webhook gives the replacement this pointer; the rejoin restarts the healthy ranks from it
            note(f"{how} {_names([t.pod for t in targets])} on {node}; {pointer}",
                 {"count": len(targets), "uids": _entries(targets), "resumeFrom": _checkpoint_json(chosen),
                  "generation": generation})  # fmt: skip
        done: list[str] = []
        for target in targets:
            job = target.child_job
            if job is not None and self.cluster.delete_child_job(
                namespace, job.name, job.uid, workload.jobset_uid
            ):
                done.append(f"deleted child Job {job.name}")
            try:
                if down:
                    if workload.marks_failed:  # not a PyTorchJob's: its operator counts it a failure
                        self.cluster.fail_pod(namespace, target.pod, target.uid,
                                              f"node {node} is down: replaced by trainguard through its owner")  # fmt: skip
                    gone = self.cluster.force_delete_pod(namespace, target.pod, target.uid)
                else:
                    gone = self.cluster.evict_pod(namespace, target.pod, target.uid, EVICTION_GRACE_S)
            except Refused as exc:
                if job is None:  # the pod stays and nothing replaces it: a person must look
                    raise StepFailed(f"{exc}; {', '.join(done) or 'nothing done'}") from exc
                done.append(f"{exc} (its Job is gone: the garbage collector deletes it)")
                continue
            done.append(
                f"{'force-deleted' if down else 'evicted'} {target.pod}"
                if gone
                else f"{target.pod} already gone"
            )
        waits = sorted({t.wait for t in targets if t.wait})
        return "; ".join(done) + (f"; the replacement waits for {', '.join(waits)}" if waits else "")

    def _resume_pointer(
        self,
        monitor: TrainingJobMonitor,
        avoid: set[str],
        *,
        since: float | None = None,
        generation: int | None = None,
        record_id: str = "",
    ) -> tuple[str, dict[str, Any] | None]:
        """Write the checkpoint the gang resumes from on the workload as trainguard.io/resume-from
        ({step, path, kind, ts}) before its pods go (they take their sidecars' view with them): the
        webhook gives it to the new sidecars, which hold it as a pin, and its ts lets a later NaN pin
        judge it (the webhook reads it from the step's progress, which the caller saves with it). It is
        the newest checkpoint every rank has (`gang_checkpoint`: a sidecar that does not
        answer leaves the choice to those that do); a rank holding a pin offers only its pin (newer
        checkpoints followed a NaN). The ranks on an avoided node (the faulty one) are replaced, and
        their replacements load their shards of the chosen checkpoint: so they count, with what they
        saved before the fault (`since`: nothing a suspect GPU wrote after it), and the gang does not
        resume from the emergency checkpoint only the healthy ranks saved (a replacement would find no
        shard of it and start from fresh weights, which DDP would then broadcast from rank 0). When a
        faulty rank's sidecar does not answer (its node is dead), the healthy ranks choose among the
        checkpoints they saved before the fault and no newer than the silent rank saved
        (`silent_rank_bound`: its last scraped word, else one save back).
        Says what was done, and returns the pointer. Best effort: without it the new sidecar learns the checkpoints from the
        trainer's hello. With `generation`, the new sidecars also hold it as the launcher's word
        (exporter/checkpoints.py resume_pointer)."""
        sidecars, token = self._sidecars(monitor)
        views, errors = self._each(sidecars, lambda sc: self.cluster.read_control(sc.base_url, token))
        faulty = {sc.pod for sc in sidecars if sc.node in avoid}
        ranks = {pod: _held(v) for pod, v in views.items() if pod not in faulty}
        before = None
        for pod in sorted(faulty):
            if pod in views and since:  # what it saved before the fault
                ranks[pod] = [c for c in _held(views[pod]) if (_float(c.get("ts")) or math.inf) < since]
            elif pod in views:
                ranks[pod] = _held(views[pod])
            else:
                before = since or None
        best, note = gang_checkpoint(ranks, before, None)
        silent = sorted(faulty - set(views))
        if best is not None and silent:
            bound, why = silent_rank_bound(float(best["step"]), self._last_saved(monitor, silent))
            earlier, note = gang_checkpoint(ranks, before, bound)
            if earlier is None and "one save back" in why:  # nothing older: the newest is all there is
                note += f"; {_names(silent)} may lack step {_fmt_step(float(best['step']))}"
            else:
                best = earlier
            note += why
        if best is None:
            if not any(ranks.values()):
                return "no checkpoint known for resume-from", None
            return f"no checkpoint every rank has for resume-from (newest: {newest_by_rank(ranks)})", None
        pointer: dict[str, Any] = _pointer(best)
        if generation:
            pointer = {**pointer, "generation": generation, "record": record_id}
        step = _fmt_step(_float(best.get("step")))
        ref = monitor.spec.workload_ref
        if ref is None:
            return f"resume-from step {step} (no workloadRef to annotate){note}", pointer
        try:
            self.cluster.annotate_workload(
                monitor.namespace,
                ref.resolved_api_version(),
                ref.kind,
                ref.name,
                {RESUME_FROM: json.dumps(pointer, sort_keys=True)},
            )
        except Exception as exc:
            return f"resume-from step {step} not written on {ref.kind}/{ref.name}: {str(exc)[:80]}", pointer
        unasked = f" (no answer from {_names(sorted(errors))})" if errors else ""
        joins = f", generation {generation}" if generation else ""
        return f"resume-from step {step}{joins} on {ref.kind}/{ref.name}{note}{unasked}", pointer

    def _last_saved(self, monitor: TrainingJobMonitor, pods: list[str]) -> dict[str, float | None]:
        """Per pod, the step of the last checkpoint Prometheus scraped from its sidecar (None: not known,
        no --prometheus-url, or Prometheus could not be asked)."""
        out: dict[str, float | None] = dict.fromkeys(pods)
        if self.history is None:
            return out
        for pod in pods:
            try:
                out[pod] = self.history.last_saved_step(monitor.namespace, monitor.name, pod)
            except Exception as exc:  # an unknown, not a reason to stop the move
                log.warning("no saved step of %s from %s: %s", pod, self.history.where(), exc)
        return out

    def _confirm(self, record: Record, monitor: TrainingJobMonitor, params: dict[str, str]) -> str:
        """Wait until as many live pods as the gang has members (`_members`) exist, created since the
        record, all scheduled and none on an avoided node; record where they landed and which spare took
        one. A new pod the webhook gave the exporter without the restart's resume-from pointer is deleted
        at sight (that incarnation), so that its owner makes another, which the webhook now gives it, and
        is not counted placed: its owner may recreate a lost rank before the restart's progress reached
        the webhook's cache of the monitor, and the rank would start from fresh weights (as rank 0, give
        them to the gang). Placement clears the pointer, so it is never confirmed with such a pod."""
        timeout = _float(params.get("timeout_s")) or PLACEMENT_TIMEOUT_S
        # only a node fault avoids its node: an OOM-killed or failed pod's node is healthy
        fault_node = record.get("node") if record.get("class") == "nodeFault" else None
        avoid = _avoid(params) or ({str(fault_node)} if fault_node else set())
        expected = _gang_size(record)
        namespace, selector = monitor.namespace, monitor.spec.selector
        created_after = unix(record.get("created", ""))
        pointer = _given_checkpoint(record)
        restarted: dict[str, str] = {}
        """uid -> name of each new pod deleted for starting without the pointer."""
        deadline = self.clock() + timeout
        placed: dict[str, str] | None = None
        while True:
            pods = self.cluster.gang_pods(namespace, selector)
            if pointer is not None:
                for name, uid in without_pointer(pods, pointer, created_after):
                    if uid not in restarted and self.cluster.delete_pod(namespace, name, uid):
                        restarted[uid] = name
            placed = new_pods_placement(
                [p for p in pods if (p.get("metadata") or {}).get("uid") not in restarted], created_after
            )
            if placed and len(placed) >= expected and not set(placed.values()) & avoid:
                break
            if self.clock() >= deadline:
                seen = ", ".join(f"{p}->{n}" for p, n in sorted((placed or {}).items())) or "none placed"
                raise StepFailed(
                    f"the new pods were not all placed away from {_names(sorted(avoid))} within {timeout:g}s ({seen})"
                    + _restarted(restarted)
                )
            self.sleep(self.poll_interval)
            self._unless_stopping()
        where = ", ".join(f"{p}->{n}" for p, n in sorted(placed.items()))
        used = sorted(set(placed.values()) & set(self.cluster.spares()))
        return (
            f"placed {where}"
            + (f"; spare used: {_names(used)}" if used else "")
            + _restarted(restarted)
            + self._owner_restarted(record, monitor)
            + self._clear_pointer(monitor)
        )

    def _owner_restarted(self, record: Record, monitor: TrainingJobMonitor) -> str:
        """Said when the JobSet restarted the whole gang itself since the plan (its restart attempt moved:
        a pod of the replacement failed, e.g. one Kueue's TAS placed on the old node and then terminated,
        and its failure policy restarted every pod, counted against maxRestarts): the record's restart
        was not the one that happened."""
        planned = next((str(s["params"]["attempt"]) for s in record.get("steps", [])
                        if s.get("kind") in RESTARTS and (s.get("params") or {}).get("attempt")), None)  # fmt: skip
        ref = monitor.spec.workload_ref
        if planned is None or ref is None:
            return ""
        try:
            attempt = self.cluster.workload(monitor.namespace, ref, monitor.spec.selector).attempt
        except Exception:
            return ""
        if attempt is None or str(attempt) == planned:
            return ""
        return (f"; the JobSet restarted the gang itself meanwhile (restart attempt {attempt}, planned at {planned}),"
                " counted against its maxRestarts")  # fmt: skip

    def _clear_pointer(self, monitor: TrainingJobMonitor) -> str:
        """Remove trainguard.io/resume-from from the workload once the new gang is placed (its sidecars
        were given the pointer when their pods were created): a pod recreated later for another reason
        must not start pinned to this checkpoint. Best effort, said in the detail: the pods are placed."""
        ref = monitor.spec.workload_ref
        if ref is None:
            return ""
        try:  # a null in a merge patch removes the key
            self.cluster.annotate_workload(
                monitor.namespace, ref.resolved_api_version(), ref.kind, ref.name, {RESUME_FROM: None}
            )
        except Exception as exc:
            return f"; resume-from not cleared on {ref.kind}/{ref.name}: {str(exc)[:80]}"
        return f"; resume-from cleared on {ref.kind}/{ref.name}"

    def _advise(self, record: Record, monitor: TrainingJobMonitor, params: dict[str, str]) -> str:
        """Append the advice (tagged with the record id, so a redo does not add it twice) to each
        sidecar's advisories; the sidecar replaces the whole list, so read it first."""
        advisory: dict[str, Any] = {**params, "record": record["id"]}
        sidecars, token = self._sidecars(monitor)
        if not sidecars:
            raise StepFailed("no running sidecar to advise")

        def give(sc: Sidecar) -> dict[str, Any]:
            current = self.cluster.read_control(sc.base_url, token).get("advisories") or []
            if any(isinstance(a, dict) and a.get("record") == record["id"] for a in current):
                return {}
            return self.cluster.control(sc.base_url, token, {"advisories": [*current, advisory]})

        answers, errors = self._each(sidecars, give)
        if not answers:
            raise StepFailed(f"no sidecar took the advice{_errors(errors)}")
        return f"advised {json.dumps(params, sort_keys=True)}: {_names(sorted(answers))}{_errors(errors)}"


def _live(pod: dict[str, Any]) -> bool:
    """A pod of the running gang: not being deleted, not finished. A Succeeded or Failed pod is already
    accounted for by its Job (a completion, or a failure it replaced): deleting it recreates nothing."""
    phase = (pod.get("status") or {}).get("phase")
    return not is_terminating(pod) and phase not in ("Succeeded", "Failed")


def _pod_names(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(str(p["metadata"]["name"]) for p in pods)


def _fault_time(record: Record) -> float | None:
    """When the avoided node's ranks stopped being trusted: the record's creation, for a fault (those its
    ranks saved after it are not trusted: a failing GPU may have written them). None for a planned
    maintenance move, whose node is healthy, and for a slow node, slow not corrupt: what its ranks saved
    (the checkpoint the move waited for) counts, so the gang resumes from it and no work is lost."""
    if record.get("class") in (MAINTENANCE, SLOW_NODE):
        return None
    return unix(str(record.get("created", "")))


def _restart_avoid(record: Record) -> set[str]:
    """The nodes the record's RestartGang step avoids (a node fault's node); none for another restart."""
    for step in record.get("steps", []):
        if step.get("kind") == StepKind.RESTART_GANG:
            return _avoid(step.get("params") or {})
        if step.get("kind") == StepKind.REPLACE_POD:
            return {str((step.get("params") or {}).get("node", ""))} - {""}
    return set()


def _gang_size(record: Record) -> int:
    """How many pods the RestartGang step deleted, or the ReplacePod step replaced (its progress
    count): the new pods ConfirmPlacement waits for; 1 if unknown."""
    for step in record.get("steps", []):
        if step.get("kind") in (StepKind.RESTART_GANG, StepKind.REPLACE_POD):
            count = (step.get("progress") or {}).get("count")
            if isinstance(count, int):
                return max(1, count)
    return 1


def _entries(targets: list[Replacement]) -> str:
    """A ReplacePod's progress: pod/uid per target, with /job/uid of the child Job it deletes."""
    return ",".join(
        f"{t.pod}/{t.uid}" + (f"/{t.child_job.name}/{t.child_job.uid}" if t.child_job else "")
        for t in targets
    )


def _targets(entries: Any, node: str) -> list[Replacement]:
    """A redo's targets, from the step's progress (`_entries`)."""
    out = []
    for entry in str(entries or "").split(","):
        parts = entry.split("/")
        if len(parts) not in (2, 4) or not all(parts):
            continue
        job = ChildJob(parts[2], parts[3], 1, 0, False) if len(parts) == 4 else None
        out.append(Replacement(parts[0], parts[1], node, job))
    return out


def _restarted_by_owner(workload: Workload, params: dict[str, str], progress: Progress) -> str:
    """Why the step has nothing left to do: the JobSet restarted the gang itself (its restart attempt
    moved past the one the plan saw) before this step began; "" otherwise. A redo's own progress stands:
    the attempt it saw is the one it acted on."""
    planned = params.get("attempt")
    if not planned or progress.fields or workload.attempt is None or str(workload.attempt) == planned:
        return ""
    return (
        f"the JobSet {workload.jobset} restarted the gang itself (restart attempt {workload.attempt}, "
        f"planned at {planned}): its new pods are the replacement, nothing more is done"
    )


def _gang(pods: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(the live pods of the gang, the members it lost): a pod that failed or is being deleted and was
    created with the live ones (within detect.GANG_SPREAD_S of the oldest) left the gang, which only new
    pods make whole again; an older one is history (a Job keeps the failed pods it replaced)."""
    return _pod_names([p for p in pods if _live(p)]), _pod_names(_lost(pods))


def _lost(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    live = [p for p in pods if _live(p)]
    first = min((creation_seconds(p) for p in live), default=None)
    return [
        p
        for p in pods
        if not _live(p)
        and (p.get("status") or {}).get("phase") != "Succeeded"
        and (first is None or creation_seconds(p) >= first - GANG_SPREAD_S)
    ]


def _members(live: list[dict[str, Any]], lost: list[dict[str, Any]]) -> int:
    """How many members the gang has, so how many new pods a restart waits for: the live pods it deletes
    and the members it lost that have no replacement yet (an OOM-killed rank's Failed pod, whose
    replacement the Job controller makes later, after its back-off). Counting only the live ones, the
    placement took the first replacement for the whole gang and cleared resume-from before the late one
    came, which then started from fresh weights. An Indexed Job's pods say their completion index (a
    replacement shares its lost pod's, so counts once); otherwise the pods of the oldest cohort (created
    within GANG_SPREAD_S of the oldest), which a later replacement is not part of, and at least the live."""
    pods = live + lost
    indexes = [labels_of(p).get(COMPLETION_INDEX) for p in pods]
    if pods and all(indexes):
        return len(set(indexes))
    first = min((creation_seconds(p) for p in pods), default=0.0)
    cohort = [p for p in pods if creation_seconds(p) <= first + GANG_SPREAD_S]
    return max(len(live), len(cohort))


def _launcher_alive(view: dict[str, Any]) -> bool:
    """The sidecar has heard from its pod's launcher lately, and it is not exiting (exporter/restarts.py)."""
    launcher = view.get("launcher")
    return isinstance(launcher, dict) and launcher.get("alive") is True


def _int_field(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _launcher_generation(view: dict[str, Any]) -> int:
    launcher = view.get("launcher")
    return _int_field(launcher.get("generation")) if isinstance(launcher, dict) else 0


def _word_generation(view: dict[str, Any]) -> int:
    word = view.get("restart")
    return _int_field(word.get("generation")) if isinstance(word, dict) else 0


def _generation(view: dict[str, Any]) -> int:
    """The newest generation a sidecar knows: its word's or its launcher's."""
    return max(_word_generation(view), _launcher_generation(view))


def _in_place(record: Record) -> bool:
    """Whether the record's RestartInPlace restarted the whole gang's trainers: the gang steps after it
    are not needed. A rejoin (after ReplacePod) is not: its ConfirmPlacement still says where the
    replacement landed."""
    return any(s.get("kind") == StepKind.RESTART_IN_PLACE and s.get("phase") == Phase.SUCCEEDED
               and not (s.get("params") or {}).get("rejoin") for s in record.get("steps", []))  # fmt: skip


def _replaced(record: Record) -> int:
    """How many pods the record's ReplacePod replaced (its progress count), 0 if none."""
    for step in record.get("steps", []):
        if step.get("kind") == StepKind.REPLACE_POD:
            count = (step.get("progress") or {}).get("count")
            return count if isinstance(count, int) and not isinstance(count, bool) else 0
    return 0


def _checkpoint_json(pointer: dict[str, Any] | None) -> str:
    """The checkpoint of a resume-from pointer, as RestartGang and ReplacePod keep it in their progress
    (a string: the progress schema holds scalars), "null" when none was chosen. The webhook rebuilds the
    new pods' pointer from it (controller/admission.py restart_of); a progress without it is an older
    operator's, whose pointer is on the workload only."""
    if not pointer:
        return "null"
    return json.dumps({k: v for k, v in pointer.items() if k not in ("generation", "record")}, sort_keys=True)


def _progress_pointer(record: Record, kinds: tuple[str, ...]) -> dict[str, Any] | None:
    """The checkpoint in the progress (resumeFrom) of the record's first step of `kinds`; None when it
    chose none or wrote no progress."""
    for step in record.get("steps", []):
        if step.get("kind") in kinds:
            text = (step.get("progress") or {}).get("resumeFrom")
            try:
                pointer = json.loads(text) if isinstance(text, str) else None
            except ValueError:
                return None
            return pointer if isinstance(pointer, dict) else None
    return None


def _replace_pointer(record: Record) -> dict[str, Any] | None:
    """The checkpoint the record's ReplacePod gave the replacement, when it named a generation."""
    return _progress_pointer(record, (StepKind.REPLACE_POD,))


def _given_checkpoint(record: Record) -> dict[str, Any] | None:
    """The checkpoint the record's restart by new pods (RestartGang, ReplacePod) gave the webhook for
    its new pods (the step's progress resumeFrom); None when it chose none or wrote no progress, and when
    a rejoin succeeded: its word gave the replacement the generation and the checkpoint, whatever the
    pod was admitted with, and the replacement's launcher runs it."""
    if any(s.get("kind") == StepKind.RESTART_IN_PLACE and (s.get("params") or {}).get("rejoin")
           and s.get("phase") == Phase.SUCCEEDED for s in record.get("steps", [])):  # fmt: skip
        return None
    return _progress_pointer(record, (StepKind.RESTART_GANG, StepKind.REPLACE_POD))


def without_pointer(
    pods: Sequence[dict[str, Any]], checkpoint: dict[str, Any], created_after: float
) -> list[tuple[str, str]]:
    """(name, uid) of the live new pods (as new_pods_placement counts them) that carry the exporter but
    whose trainguard.io/resume-from does not name `checkpoint` (its step and path; a rejoin's pointer
    adds its generation): admitted without the restart's pointer. A pod without the exporter (the
    webhook failed open, or the pod opted out) is not one trainguard can give a pointer to."""
    out = []
    for pod in new_pods(pods, created_after):
        meta = pod.get("metadata") or {}
        if not is_injected(pod):
            continue
        try:
            given = json.loads(str((meta.get("annotations") or {}).get(RESUME_FROM) or "null"))
        except ValueError:
            given = None
        if not isinstance(given, dict) or any(given.get(k) != checkpoint.get(k) for k in ("step", "path")):
            out.append((str(meta.get("name", "")), str(meta.get("uid", ""))))
    return out


def _restarted(restarted: dict[str, str]) -> str:
    if not restarted:
        return ""
    return (f"; deleted {_names(sorted(restarted.values()))}: admitted without the restart's resume-from "
            "(before the webhook saw it), recreated by its owner with it")  # fmt: skip


def _replace_generation(record: Record) -> int | None:
    """The generation the record's ReplacePod put in the replacement's pointer, if it did."""
    for step in record.get("steps", []):
        if step.get("kind") == StepKind.REPLACE_POD:
            generation = (step.get("progress") or {}).get("generation")
            if isinstance(generation, int) and not isinstance(generation, bool) and generation > 0:
                return generation
    return None


def _rejoin_after(record: Record, index: int) -> bool:
    """Whether a RestartInPlace that rejoins the gang follows step `index` (a ReplacePod)."""
    return any(s.get("kind") == StepKind.RESTART_IN_PLACE and (s.get("params") or {}).get("rejoin")
               for s in record.get("steps", [])[index + 1 :])  # fmt: skip


def _gang_after(record: Record, index: int) -> bool:
    """Whether a RestartGang follows step `index`: what restarts the gang when it cannot be done in place."""
    return any(s.get("kind") == StepKind.RESTART_GANG for s in record.get("steps", [])[index + 1 :])
