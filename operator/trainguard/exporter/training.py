"""What the training process reports through the SDK, and what the operator asks of it.

Thread-safe: the SDK's reports arrive on HTTP threads, the poller reads a copy.
"""

from __future__ import annotations

import bisect
import copy
import logging
import math
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainguard.catalog import METRICS_BY_NAME
from trainguard.exporter.assignment import UNKNOWN_VISIBLE
from trainguard.exporter.checkpoints import CHECKPOINT_KINDS, checkpoint_ref, newer
from trainguard.exporter.faults import Faults
from trainguard.exporter.restarts import LAUNCHER_STALE_S, launcher_state, restart_word
from trainguard.exporter.stalls import StallClock

__all__ = ["CHECKPOINT_KINDS", "Collective", "Control", "TrainingState", "TrainingView"]

log = logging.getLogger("trainguard.exporter.training")

CHECKPOINT_HISTORY = 16
"""Checkpoints listed in the control view: the operator pins the newest saved before a fault, which
need not be the newest of all (a trainer may save once more between a NaN and the pause)."""
ADVISORIES_MAX = 32
COLLECTIVE_BUCKETS = METRICS_BY_NAME["trainguard_train_collective_seconds"].buckets
COLLECTIVE_OPS_MAX = 16
"""Distinct collective ops kept (the op label): a script inventing names cannot grow the scrape forever."""
DEFAULT_OP = "all_reduce"

# what the faults set, as a real fault of that kind would show it
SLOW_COLLECTIVE_S = 2.0
"""collective-slow: every collective takes this long (reported ones are moved here, and one more is
observed per second of the fault, so it shows without a trainer too)."""
SLOW_RESTORE_BYTES_PER_S = 50e6
FILLING_FS_SIZE_BYTES = 10 * 2**40
FILLING_FS_FULL_CHECKPOINT_BYTES = 2**40
FILLING_FS_START_AVAIL = 0.5
FILLING_FS_DROP_PER_S = 0.02
"""checkpoint-fs-filling: 10 TiB, half free when the fault starts, 2% of it more used each second (each
poll at the default 1 s poll interval), a full checkpoint of 1 TiB: full in 25 s, then stays full."""
QUEUE_DEPTH_FAULT = 500.0


@dataclass
class Collective:
    """One op's histogram as the exporter keeps it: counts per COLLECTIVE_BUCKETS bound (not cumulative;
    the last one is +Inf), their sum in seconds and their number. Only ever grows, as a counter does."""

    counts: list[float] = field(default_factory=lambda: [0.0] * (len(COLLECTIVE_BUCKETS) + 1))
    sum: float = 0.0
    count: float = 0.0

    def add(self, upper: float, n: float, total_s: float) -> None:
        """`n` observations of at most `upper` seconds each (an SDK bucket's bound), `total_s` in all."""
        self.counts[bisect.bisect_left(COLLECTIVE_BUCKETS, upper)] += n
        self.count += n
        self.sum += total_s


@dataclass
class TrainingView:
    start_ts: float | None = None
    """The earliest started_at of the SDK's hellos; None until a hello arrives. "Not yet" for a step
    or checkpoint means "not since then", so stall and checkpoint rules have a reference before the
    first one; a sidecar whose trainer has not said hello (no SDK, an image still being pulled, a
    model still loading) exports no start, so no stall is judged from the sidecar's own start."""
    step: float | None = None
    last_step_ts: float | None = None
    loss: float | None = None
    nonfinite_total: float = 0.0
    grad_norm: float | None = None
    tokens_per_second_per_gpu: float | None = None
    loss_scale: float | None = None
    loss_scale_updates_total: float = 0.0
    dataloader_wait_ratio: float | None = None
    allreduce_time_ratio: float | None = None
    step_seconds_total: float = 0.0
    step_collective_seconds_total: float = 0.0
    """Summed over the steps reported, each step's collective time capped at its duration: the rank's own
    pace is the share outside collectives (a straggler's peers wait for it there)."""
    stall_seconds_total: float = 0.0
    """Gaps between steps beyond the grace (exporter/stalls.py), the open one so far included."""
    checkpoint_save_seconds_total: float = 0.0
    """Seconds the trainer was blocked writing checkpoints (its processes' saves counted once)."""
    fragmentation: dict[str, float] = field(default_factory=dict)
    checkpoint_ts: dict[str, float] = field(default_factory=dict)
    checkpoint_step: dict[str, float] = field(default_factory=dict)
    inference_latency_s: float | None = None
    inference_queue_depth: float | None = None
    inference_kv_cache_hit_ratio: float | None = None
    oom_total: float = 0.0
    collectives: dict[str, Collective] = field(default_factory=lambda: {DEFAULT_OP: Collective()})
    """op -> histogram; all_reduce exists from the start (zero), so the first slow one shows in rate()."""
    checkpoint_size_bytes: dict[str, float] = field(default_factory=dict)
    checkpoint_fs_avail_bytes: float | None = None
    checkpoint_fs_size_bytes: float | None = None
    restoring: bool = False
    restore_read_bytes_per_s: float | None = None
    """Summed over the pod's trainer processes: the latest figure of each rank in the ongoing restore
    (or the last one), as each rank reads its own shard from the same storage."""
    reports_total: float = 0.0


@dataclass
class Control:
    """Set by the operator (authenticated), read by the SDK."""

    pause: bool = False
    checkpoint: str | None = None
    advisories: list[dict[str, Any]] = field(default_factory=list)
    resume_from: dict[str, Any] | None = None
    """What the trainer resumes from: the pin while there is one, else the newest checkpoint."""
    pinned: bool = False
    """The operator chose resume_from (after a NaN: the newest checkpoint saved before it; after a gang
    restart: --resume-from). Checkpoints reported since do not move it: a trainer that went on after
    the NaN saves the corrupted state."""
    pinned_at: float | None = None
    """When the pin was posted. A checkpoint past the pin ends it only when saved by a trainer that
    started after this: that trainer asked resume_from first and resumed from the pin. None for the
    pointer the pod was created with: every trainer of this pod resumed from it."""
    newest: dict[str, Any] | None = None
    """The newest checkpoint reported (by step), pinned or not: resume_from once a pin is cleared."""
    restart: dict[str, Any] | None = None
    """The operator's word to `trainguard launch` (exporter/restarts.py): restart the trainer as this
    generation, from this checkpoint. Kept as posted; the launcher ignores a generation it has run."""


def _num(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _finite(value: Any) -> float | None:
    number = _num(value)
    return number if number is not None and math.isfinite(number) else None


def _pid(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _specific(visible: Any) -> str | None:
    """A visible-devices value that names GPUs; None for absent, "all", "none", "void" or empty."""
    if not isinstance(visible, str) or visible.strip().lower() in UNKNOWN_VISIBLE:
        return None
    return visible


class TrainingState:
    def __init__(
        self,
        gpus_per_pod: int = 1,
        faults: Faults | None = None,
        clock: Callable[[], float] = time.time,
        resume_from: dict[str, Any] | None = None,
    ) -> None:
        """`resume_from`: the operator's resume-from pointer for this pod (--resume-from, checked by
        checkpoints.resume_pointer), held as a pin from the start; with a generation, also held as the
        launcher's word (the pod replaces a rank of a gang restarting in place as that generation)."""
        self.gpus = max(1, gpus_per_pod)
        self.faults = faults or Faults()
        self.clock = clock
        self.lock = threading.Lock()
        self.view = TrainingView()
        self.control = Control()
        if resume_from is not None:
            pointer = {k: v for k, v in resume_from.items() if k not in ("generation", "record")}
            self.control.resume_from, self.control.pinned = pointer, True
            if resume_from.get("generation"):
                self.control.restart = {
                    "generation": resume_from["generation"],
                    "record": resume_from.get("record", ""),
                    "resume_from": dict(pointer),
                }
        self.checkpoints: list[dict[str, Any]] = []
        """The last CHECKPOINT_HISTORY good checkpoints reported, by step (oldest first)."""
        self.prev_step_ts: float | None = None
        self.step_time_s: float | None = None
        """The last step's duration: how long the operator must see no step before it calls the gang stuck."""
        self.instance = secrets.token_hex(8)
        """Chosen at start: an SDK that sees a new one says hello again (the sidecar restarted)."""
        self.visible_devices: str | None = None
        """NVIDIA_VISIBLE_DEVICES of the training container, from the SDK's hello."""
        self.hello_pids: set[int] = set()
        """Training processes that said hello (or bye): the trainers this sidecar serves."""
        self.bye_pids: set[int] = set()
        """Those that said bye (their Reporter closed, or their interpreter exited)."""
        self.restoring_pids: set[int] = set()
        """Trainer processes loading a checkpoint now (0: an SDK that did not say its pid)."""
        self.restore_rates: dict[int, float] = {}
        """pid -> its latest read throughput in the ongoing (or last) restore."""
        self.slow_collectives_at: float | None = None
        """collective-slow: when its last per-second observation was added; None while it is off."""
        self.fs_filling_since: float | None = None
        """checkpoint-fs-filling: when this sidecar first saw it active; None while it is off."""
        self.launcher: dict[str, Any] | None = None
        """The last state `trainguard launch` reported (exporter/restarts.py); None: no launcher here."""
        self.launcher_seen: float | None = None
        """When that report came (this sidecar's clock)."""
        self.stalls = StallClock()
        """Stalls and checkpoint writes, kept at the reports; the open gap is read at each snapshot."""

    def trainers_done(self) -> bool:
        """Every trainer that said hello has said bye, and there was at least one: training is over.
        Not while a launcher runs: its trainer says bye before every in-place restart, and the next
        generation says hello after; the launcher's own bye ends it."""
        with self.lock:
            if self._launcher_alive(self.clock()):
                return False
            return bool(self.hello_pids) and self.hello_pids <= self.bye_pids

    def _launcher_alive(self, now: float) -> bool:
        return (
            self.launcher is not None
            and self.launcher["state"] != "gone"
            and self.launcher_seen is not None
            and now - self.launcher_seen < LAUNCHER_STALE_S
        )

    def reported_visible_devices(self) -> str | None:
        with self.lock:
            return self.visible_devices

    def set_gpus(self, gpus: int) -> None:
        with self.lock:
            self.gpus = max(1, gpus)

    def snapshot(self) -> TrainingView:
        """What the collectors export: the reported state, with the active faults applied."""
        now = self.clock()
        with self.lock:
            self._slow_collectives(now)
            self.view.stall_seconds_total = self.stalls.open_stall(now)
            self.view.checkpoint_save_seconds_total = self.stalls.open_saved(now)
            view = copy.deepcopy(self.view)
        view.oom_total += self.faults.oom_added
        if self.faults.has("restore-slow"):
            view.restoring, view.restore_read_bytes_per_s = True, SLOW_RESTORE_BYTES_PER_S
        if self.faults.has("inference-queue"):
            view.inference_queue_depth = QUEUE_DEPTH_FAULT
        if not self.faults.has("checkpoint-fs-filling"):
            self.fs_filling_since = None
        else:
            if self.fs_filling_since is None:
                self.fs_filling_since = now
            free = FILLING_FS_START_AVAIL - FILLING_FS_DROP_PER_S * max(0.0, now - self.fs_filling_since)
            view.checkpoint_fs_size_bytes = float(FILLING_FS_SIZE_BYTES)
            view.checkpoint_fs_avail_bytes = FILLING_FS_SIZE_BYTES * max(0.0, free)
            view.checkpoint_size_bytes["full"] = float(FILLING_FS_FULL_CHECKPOINT_BYTES)
        return view

    def _slow_collectives(self, now: float) -> None:
        """collective-slow, without a trainer: one SLOW_COLLECTIVE_S observation when it is first seen
        and one per second after (kept after the fault ends: the histogram counts only grow)."""
        if not self.faults.has("collective-slow"):
            self.slow_collectives_at = None
            return
        if self.slow_collectives_at is None:
            self.slow_collectives_at = now - 1.0
        due = math.floor(now - self.slow_collectives_at)
        if due >= 1:
            self.view.collectives[DEFAULT_OP].add(SLOW_COLLECTIVE_S, due, SLOW_COLLECTIVE_S * due)
            self.slow_collectives_at += due

    def control_view(self) -> dict[str, Any]:
        """GET /v1/control: what the operator set, for the SDK and for the operator itself."""
        with self.lock:
            c = self.control
            return {
                "instance": self.instance,
                "pause": c.pause,
                "checkpoint": c.checkpoint,
                "advisories": copy.deepcopy(c.advisories),
                "resume_from": dict(c.resume_from) if c.resume_from else None,
                "pinned": c.pinned,
                "checkpoints": [dict(x) for x in self.checkpoints],
                "restart": copy.deepcopy(c.restart),
                "launcher": self._launcher_view(),
                # the trainer's progress: a gang whose ranks take no step is stuck (a lost peer), and an
                # emergency checkpoint asked of it will never come
                "step": self.view.step,
                "step_time_s": self.step_time_s,
                # its share in collectives: a straggler's peers wait there for it (remediation/slow_node.py)
                "allreduce_time_ratio": self.view.allreduce_time_ratio,
            }

    def _launcher_view(self) -> dict[str, Any] | None:
        """The launcher's last report, with `alive`: heard from within LAUNCHER_STALE_S and not gone (the
        operator restarts in place only where every pod's launcher is alive). The caller holds the lock."""
        if self.launcher is None:
            return None
        now = self.clock()
        seen = self.launcher_seen if self.launcher_seen is not None else now
        return {**self.launcher, "seen": seen, "alive": self._launcher_alive(now)}

    def set_control(self, body: Any) -> None:
        """POST /v1/control. The whole body is checked before anything changes: a 400 leaves the
        control as it was (a refused checkpoint kind must not have paused training already).
        `resume_from` pins a checkpoint ({step, kind, path, ts}); null lifts the pin, and resume_from
        is the newest checkpoint again. `restart` is the word to the launcher (restarts.restart_word);
        one of a generation older than the one held is refused (an older operator's word)."""
        if not isinstance(body, dict):
            raise ValueError("expected a JSON object")
        if "pause" in body and not isinstance(body["pause"], bool):
            raise ValueError("pause must be true or false")
        if "checkpoint" in body and body["checkpoint"] not in (None, *CHECKPOINT_KINDS):
            raise ValueError(f"checkpoint must be one of {', '.join(CHECKPOINT_KINDS)} or null")
        advisories = body.get("advisories")
        if "advisories" in body and not (
            isinstance(advisories, list) and all(isinstance(a, dict) for a in advisories)
        ):
            raise ValueError("advisories must be a list of objects")
        pin = checkpoint_ref(body["resume_from"]) if "resume_from" in body else None
        word = restart_word(body["restart"]) if "restart" in body else None
        with self.lock:
            c = self.control
            held = c.restart["generation"] if c.restart else 0
            if word is not None and word["generation"] < held:
                raise ValueError(
                    f"restart.generation {word['generation']} is older than the generation this sidecar holds"
                    f" ({held}): a stale word is refused"
                )
            if "restart" in body:
                c.restart = word
            if "pause" in body:
                c.pause = body["pause"]
            if "checkpoint" in body:
                c.checkpoint = body["checkpoint"]
            if advisories is not None:
                c.advisories = copy.deepcopy(advisories[-ADVISORIES_MAX:])
            if "resume_from" in body:
                self._pin(pin)

    def _pin(self, pin: dict[str, Any] | None) -> None:
        c = self.control
        if pin is None:
            c.pinned, c.pinned_at, c.resume_from = False, None, c.newest
            return
        if not (c.pinned and c.pinned_at is not None and c.resume_from == pin):
            c.pinned_at = self.clock()  # the same pin posted again (the executor's redo) keeps its time
        c.pinned, c.resume_from = True, pin

    def ingest(self, report: dict[str, Any]) -> bool:
        """Apply one SDK report; returns True when it carried a non-finite loss (a fast-path event)."""
        kind = report.get("type")
        with self.lock:
            self.view.reports_total += 1
            if kind == "step":
                return self._step(report)
            if kind == "hello":
                self._hello(report)
            elif kind == "bye":
                pid = _pid(report.get("pid"))
                if pid is not None:
                    self.hello_pids.add(pid)  # a hello lost on the way still leaves a trainer that ended
                    self.bye_pids.add(pid)
                    self._restore_done(pid)  # a trainer that ended is loading nothing
                    if self.hello_pids <= self.bye_pids:  # no trainer left: no step is awaited
                        self.stalls.reset(_finite(report.get("ts")) or self.clock())
            elif kind == "saving":
                self.stalls.saving(_finite(report.get("ts")) or self.clock())
            elif kind == "checkpoint":
                self._checkpoint(report)
            elif kind == "request":
                self._request(report)
            elif kind == "oom":
                self.view.oom_total += 1
                log.warning("the trainer ran out of GPU memory (gpu %s): %s", report.get("device"),
                            str(report.get("message", ""))[:300])  # fmt: skip
            elif kind == "collectives":
                self._collectives(report)
            elif kind == "restore":
                self._restore(report)
            elif kind == "launcher":
                state = launcher_state(report)
                if state is not None:
                    self.launcher, self.launcher_seen = state, self.clock()
            elif kind == "fragmentation":
                ratio = _num(report.get("ratio"))
                if ratio is not None:
                    self.view.fragmentation[str(report.get("gpu", 0))] = ratio
        return False

    def _request(self, r: dict[str, Any]) -> None:
        """Inference mode: each field only when the report carries it (an SDK may send the KV-cache
        hit ratio on its own)."""
        v = self.view
        if "latency_s" in r:
            v.inference_latency_s = _num(r.get("latency_s"))
        if "queue_depth" in r:
            v.inference_queue_depth = _num(r.get("queue_depth"))
        ratio = _finite(r.get("kv_cache_hit_ratio"))
        if ratio is not None:
            v.inference_kv_cache_hit_ratio = min(1.0, max(0.0, ratio))

    def _collectives(self, r: dict[str, Any]) -> None:
        """The SDK's histogram since its last report: {"le": [bounds], "ops": {op: {"counts": [...one
        per bound, then +Inf], "sum": s}}}. Each SDK bucket lands in the exporter's bucket that holds
        its upper bound, so an SDK with other bounds never makes a latency look shorter than it was."""
        bounds = r.get("le")
        ops = r.get("ops")
        if not isinstance(bounds, list) or not isinstance(ops, dict):
            return
        uppers = [_finite(b) for b in bounds]
        if any(u is None or u < 0 for u in uppers):
            return
        uppers_f = [float(u) for u in uppers if u is not None] + [math.inf]
        slow = self.faults.has("collective-slow")
        for op, h in ops.items():
            counts = h.get("counts") if isinstance(h, dict) else None
            if (
                not isinstance(op, str)
                or not op
                or not isinstance(counts, list)
                or len(counts) != len(uppers_f)
            ):
                continue
            ns = [_finite(c) for c in counts]
            total_s = _finite(h.get("sum"))
            if any(n is None or n < 0 for n in ns) or total_s is None or total_s < 0:
                continue
            hist = self.view.collectives.get(op[:64])
            if hist is None:
                if len(self.view.collectives) >= COLLECTIVE_OPS_MAX:
                    continue
                hist = self.view.collectives[op[:64]] = Collective()
            n_all = sum(float(n) for n in ns if n is not None)
            if slow:  # a slow fabric slows every collective the trainer times
                hist.add(SLOW_COLLECTIVE_S, n_all, SLOW_COLLECTIVE_S * n_all)
                continue
            for upper, n in zip(uppers_f, ns, strict=True):
                if n:
                    hist.add(upper, float(n), 0.0)
            hist.sum += total_s

    def _restore(self, r: dict[str, Any]) -> None:
        """A checkpoint being loaded: state start, progress (with read_bytes_per_second) or end."""
        pid = _pid(r.get("pid")) or 0
        state = r.get("state")
        rate = _finite(r.get("read_bytes_per_second"))
        if state == "start":
            # loading a checkpoint: the steps start again from its step, and the wait is the restart's
            self.stalls.reset(_finite(r.get("ts")) or self.clock())
            if not self.restoring_pids:
                self.restore_rates.clear()  # a new restore: the last one's figures are history
            self.restoring_pids.add(pid)
            self.restore_rates.pop(pid, None)
        elif state in ("progress", "end"):
            if rate is not None and rate >= 0:
                self.restore_rates[pid] = rate
            if state == "end":
                self.restoring_pids.discard(pid)
            else:
                self.restoring_pids.add(pid)
        self._restore_view()

    def _restore_done(self, pid: int) -> None:
        if pid in self.restoring_pids:
            self.restoring_pids.discard(pid)
            self._restore_view()

    def _restore_view(self) -> None:
        self.view.restoring = bool(self.restoring_pids)
        self.view.restore_read_bytes_per_s = sum(self.restore_rates.values()) if self.restore_rates else None

    def _step(self, r: dict[str, Any]) -> bool:
        v, faults = self.view, self.faults
        if faults.has("stall"):
            return False  # a hung rank reports nothing
        now = _num(r.get("ts")) or self.clock()
        v.step = _num(r.get("step"))
        v.last_step_ts = now
        if v.step is not None and math.isfinite(v.step):
            self.stalls.step(v.step, now)
        nonfinite = False
        loss = _num(r.get("loss"))
        if faults.has("nan-loss"):
            loss = math.nan
        if loss is not None:
            if math.isfinite(loss):
                v.loss = loss
            else:
                v.nonfinite_total += 1
                nonfinite = True
        grad = _num(r.get("grad_norm"))
        if grad is not None:
            v.grad_norm = grad * (100.0 if faults.has("grad-explosion") else 1.0)
            # a non-finite gradient norm is a diverged step too, unless a dynamic loss scaler is on
            # (it reports its scale with the norm): an fp16 overflow is a step it skips by design
            if not math.isfinite(grad) and not nonfinite and _num(r.get("loss_scale")) is None:
                v.nonfinite_total += 1
                nonfinite = True
        step_time = _num(r.get("step_time_s"))
        if step_time is None and self.prev_step_ts is not None:
            step_time = now - self.prev_step_ts
        self.prev_step_ts = now
        if step_time is not None and math.isfinite(step_time) and step_time >= 0:
            self.step_time_s = step_time
            v.step_seconds_total += step_time
            collective = _finite(r.get("allreduce_s"))
            if collective is not None and collective > 0:
                v.step_collective_seconds_total += min(collective, step_time)
        tokens = _num(r.get("tokens"))
        if tokens is not None and step_time and step_time > 0:
            tps = tokens / step_time / self.gpus
            v.tokens_per_second_per_gpu = tps * (0.4 if faults.has("throughput-drop") else 1.0)
        scale = _num(r.get("loss_scale"))
        if scale is not None:
            if v.loss_scale is not None and scale != v.loss_scale:
                v.loss_scale_updates_total += 1
            v.loss_scale = scale
        if step_time and step_time > 0:
            for key, attr in (
                ("dataloader_wait_s", "dataloader_wait_ratio"),
                ("allreduce_s", "allreduce_time_ratio"),
            ):
                part = _num(r.get(key))
                if part is not None:
                    setattr(v, attr, min(1.0, max(0.0, part / step_time)))
        return nonfinite

    def _hello(self, r: dict[str, Any]) -> None:
        """The SDK's first report, and again for each new exporter instance: what a restarted
        sidecar would otherwise have lost (start time, last step, checkpoints) and which GPUs are
        the pod's. A trainer exists from now on, so the job's start is exported."""
        pid = _pid(r.get("pid"))
        if pid is not None and pid not in self.hello_pids:
            self.stalls.reset(self.clock())  # a new trainer: it loads before its first step
        if pid is not None:
            self.hello_pids.add(pid)
            self.bye_pids.discard(pid)  # a process that said bye and starts a new Reporter trains again
        started = _finite(r.get("started_at"))
        if started is None or started <= 0:
            started = self.clock()  # a trainer said hello without a usable start: it exists by now
        current = self.view.start_ts
        self.view.start_ts = started if current is None else min(current, started)
        self._restore_last_step(r.get("last_step"))
        visible = _specific(r.get("visible_devices"))
        if visible is not None:  # "all" or none after a specific set says nothing new: keep the set
            self.visible_devices = visible
        checkpoints = r.get("checkpoints")
        if not isinstance(checkpoints, dict):
            return
        for kind in CHECKPOINT_KINDS:
            c = checkpoints.get(kind)
            if not isinstance(c, dict):
                continue
            ts = _num(c.get("ts"))
            if ts is None or not math.isfinite(ts):
                continue
            known = self.view.checkpoint_ts.get(kind)
            if known is not None and ts <= known:
                continue  # the exporter already knows this one or a newer one
            path = c.get("path")
            self._record_checkpoint(kind, ts, _num(c.get("step")), path, _finite(r.get("started_at")))

    def _restore_last_step(self, last: Any) -> None:
        """The trainer's newest step, for a sidecar restarted since: without it the stall rule would
        judge from the job's start (hours ago) until the next step report arrives."""
        if not isinstance(last, dict):
            return
        step, ts = _finite(last.get("step")), _finite(last.get("ts"))
        if step is None or ts is None or ts <= 0:
            return
        known = self.view.last_step_ts
        if known is not None and ts <= known:
            return  # the exporter has seen this step or a newer one
        self.view.step, self.view.last_step_ts = step, ts

    def _record_checkpoint(
        self, kind: str, ts: float, step: float | None, path: Any, trainer_started: float | None
    ) -> None:
        """A good checkpoint, from a report or a hello. `trainer_started` is the started_at of the
        trainer that saved it (None when the SDK did not say): whether it may end a pin."""
        self.view.checkpoint_ts[kind] = ts
        if step is None or not math.isfinite(step):
            return  # nothing to resume from without a step
        self.view.checkpoint_step[kind] = step
        ref = {"step": step, "kind": kind, "path": path if isinstance(path, str) and path else None, "ts": ts}
        if ref not in self.checkpoints:
            self.checkpoints = sorted([*self.checkpoints, ref], key=lambda x: (x["step"], x["ts"]))
            self.checkpoints = self.checkpoints[-CHECKPOINT_HISTORY:]
        c = self.control
        if c.pinned and not self._ends_pin(step, trainer_started):
            c.newest = newer(c.newest, ref)
            return
        if c.pinned:  # a trainer that resumed from the pin saved past it: its checkpoints are good again
            c.pinned, c.pinned_at, c.newest = False, None, ref
        else:
            c.newest = newer(c.newest, ref)
        c.resume_from = c.newest

    def _ends_pin(self, step: float, trainer_started: float | None) -> bool:
        c = self.control
        pinned_step = float(c.resume_from["step"]) if c.resume_from else -1.0
        if step <= pinned_step:
            return False
        if c.pinned_at is None:
            return True  # the pod started from the pointer: every trainer here resumed from it
        return trainer_started is not None and trainer_started > c.pinned_at

    def _checkpoint(self, r: dict[str, Any]) -> None:
        kind = str(r.get("kind")) if r.get("kind") in CHECKPOINT_KINDS else "incremental"
        # the trainer was blocked writing it, whether the write succeeded or not
        seconds = _finite(r.get("seconds"))
        ended = _finite(r.get("ts")) or self.clock()
        self.stalls.save_done(seconds if seconds is not None and seconds >= 0 else None, ended)
        if not r.get("ok", True):
            return
        # measured by the SDK where the trainer wrote it (the sidecar need not mount the volume)
        size = _finite(r.get("size_bytes"))
        if size is not None and size >= 0:
            self.view.checkpoint_size_bytes[kind] = size
        avail, total = _finite(r.get("fs_avail_bytes")), _finite(r.get("fs_size_bytes"))
        if avail is not None and total is not None and 0 <= avail <= total:
            self.view.checkpoint_fs_avail_bytes, self.view.checkpoint_fs_size_bytes = avail, total
        self._record_checkpoint(kind, _finite(r.get("ts")) or self.clock(), _num(r.get("step")), r.get("path"),
                                _finite(r.get("started_at")))  # fmt: skip
        # a requested checkpoint is done once one at least as complete is saved
        if self.control.checkpoint == kind or (self.control.checkpoint == "incremental" and kind == "full"):
            self.control.checkpoint = None
