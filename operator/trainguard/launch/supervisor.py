"""The launcher's edge: the trainer as a child in its own process group, the signals, and the sidecar
(its control view polled for the operator's word, the launcher's reports posted). decide.py decides.

A sidecar that cannot be reached costs a log line, never the training: the trainer runs on, and the
launcher asks again at the next poll. Every report carries the launcher's whole state, so one lost on
the way is made good by the next (a heartbeat every HEARTBEAT_S at the latest).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from trainguard.launch import decide
from trainguard.launch.decide import Action, Settings, State
from trainguard.launch.warm import entry_of, order, warm_command
from trainguard.launch.word import BadWord, Word, child_env, word_of
from trainguard.sdk.transport import Transport

log = logging.getLogger("trainguard.launch")

PR_SET_PDEATHSIG = 1


def _die_with(parent: int) -> Callable[[], None]:
    """A preexec_fn: the child is sent SIGKILL when the launcher dies (Linux PR_SET_PDEATHSIG). The
    trainer runs in a session of its own, so a launcher killed outright (SIGKILL, the OOM killer) would
    otherwise leave it running: in a pod the runtime stops every process of the container, but a runner
    that stops only the launcher's group (the e2e pod runner, a bench, a shell) leaks it. Elsewhere than
    Linux it does nothing."""

    def arm() -> None:
        with contextlib.suppress(Exception):
            import ctypes  # noqa: PLC0415 - in the child only, between fork and exec

            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the launcher died before the signal was armed
            os._exit(1)

    return arm


HEARTBEAT_S = 5.0
"""The sidecar counts on a launcher heard from within 15 s (exporter/restarts.py LAUNCHER_STALE_S)."""
SIDECAR_TIMEOUT_S = 1.0
FIRST_WORD_TIMEOUT_S = 0.5
"""How long the first look for a word the sidecar already holds may take before the trainer starts."""
WARM_DELAY_S = 5.0
"""With --preload, the next warm trainer starts this long after a trainer did, not with it: its imports
would compete with the new trainer's for the CPU at the moment that counts."""


@dataclass(frozen=True)
class Options:
    command: Sequence[str]
    endpoint: str
    settings: Settings = field(default_factory=Settings)
    poll_interval_s: float = 0.1
    preload: tuple[str, ...] = ()
    """Modules a warm trainer imports ahead of the next restart (launch/warm.py); none: always cold."""


class Supervisor:
    def __init__(
        self,
        options: Options,
        *,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.options = options
        self.transport = Transport(options.endpoint, timeout=SIDECAR_TIMEOUT_S)
        self.env = dict(os.environ if env is None else env)
        self.clock, self.wall = clock, wall
        self.state = State()
        self.child: subprocess.Popen[bytes] | None = None
        self.signals: list[int] = []
        self.instance: str | None = None
        self.reachable: bool | None = None
        self.bad_word: str = ""
        self.last_report = 0.0
        self.exit_status: int | None = None
        self.spawn_failed = False
        self.entry = entry_of(options.command) if options.preload else None
        if options.preload and self.entry is None:
            log.warning("--preload needs a command `python [flags] SCRIPT ...` or `python [flags] -m MODULE ...`;"
                        " %s is started cold", options.command[0])  # fmt: skip
        self.warm: subprocess.Popen[bytes] | None = None
        self.warm_at: float | None = None
        self.warm_ready: int | None = None
        """The read end of the warm trainer's ready pipe, until it said it is ready (then None)."""
        self.warm_since = 0.0

    # ---- the sidecar ----

    def _view(self, timeout: float | None = None) -> dict[str, Any] | None:
        try:
            view = self.transport.request("GET", "/v1/control", timeout=timeout)
        except (OSError, ValueError) as exc:
            self._reached(False, exc)
            return None
        self._reached(True)
        return view if isinstance(view, dict) else None

    def _reached(self, ok: bool, exc: BaseException | None = None) -> None:
        if ok and self.reachable is False:
            log.info("the sidecar at %s answers again", self.options.endpoint)
        elif not ok and self.reachable is not False:
            log.warning("the sidecar at %s does not answer (%s): the trainer runs on; no restart in place until "
                        "it does", self.options.endpoint, exc)  # fmt: skip
        self.reachable = ok

    def _word(self, view: dict[str, Any] | None) -> Word | None:
        try:
            word = word_of(view)
        except BadWord as exc:
            if str(exc) != self.bad_word:
                self.bad_word = str(exc)
                log.warning("ignoring the sidecar's restart word: %s", exc)
            return None
        self.bad_word = ""
        return word

    def _report(self, event: str, **more: Any) -> None:
        s = self.state
        state = "gone" if event == "bye" else "running" if s.running else "waiting"
        body = {"type": "launcher", "event": event, "state": state, "pid": os.getpid(), "generation": s.generation,
                "child": self.child.pid if self.child is not None and s.running else None, "ts": self.wall(),
                "warm": self._warm_state(), **more}  # fmt: skip
        self.last_report = self.clock()
        try:
            self.transport.request("POST", "/v1/report", {"events": [body]})
            self._reached(True)
        except (OSError, ValueError) as exc:
            self._reached(False, exc)

    # ---- the trainer ----

    def _spawn(self, generation: int, word: Word | None) -> None:
        env = child_env(self.env, generation, word)
        if self.entry is not None:
            self.warm_at = self.clock() + WARM_DELAY_S
        warm, self.warm = self.warm, None
        self._close_ready()
        if warm is not None and self.entry is not None and warm.poll() is None and warm.stdin is not None:
            try:
                warm.stdin.write(order(self.entry, env))
                warm.stdin.close()
                log.info("starting generation %d in the warm trainer (pid %d): %s", generation, warm.pid,
                         " ".join(self.options.command))  # fmt: skip
                self.child = warm
                self._report("started")
                return
            except OSError as exc:
                log.warning(
                    "the warm trainer (pid %d) did not take the order (%s): starting cold", warm.pid, exc
                )
                self._kill_group(warm.pid, signal.SIGKILL)
        log.info("starting generation %d: %s", generation, " ".join(self.options.command))
        try:
            # its own session and process group: the whole group is stopped, whatever it started
            self.child = subprocess.Popen(list(self.options.command), env=env, start_new_session=True,
                                          preexec_fn=_die_with(os.getpid()))  # noqa: PLW1509 - the launcher runs no thread  # fmt: skip
        except OSError as exc:
            log.error("cannot start %s: %s", self.options.command[0], exc)
            self.child = None
            self.spawn_failed = True  # as a shell would have it: a trainer that exited 127
            return
        self._report("started")

    def _warm_up(self) -> None:
        """Start the next warm trainer when it is due (--preload): parked until a restart needs it. Once it
        says it is ready (its imports done), the next report tells the sidecar (`warm: ready`)."""
        if self.warm is not None and self.warm_ready is not None:
            try:
                said = os.read(self.warm_ready, 1)
            except BlockingIOError:
                return
            self._close_ready()
            if said:
                log.info("the warm trainer (pid %d) is ready: its imports took %.1fs", self.warm.pid,
                         self.clock() - self.warm_since)  # fmt: skip
                self._report("alive")
            return
        if self.entry is None or self.warm is not None or self.warm_at is None or self.clock() < self.warm_at:
            return
        self.warm_at = None
        read, write = os.pipe()
        os.set_blocking(read, False)
        command = warm_command(self.entry, self.options.preload, write)
        try:
            self.warm = subprocess.Popen(command, env=self.env, stdin=subprocess.PIPE, start_new_session=True,
                                         pass_fds=(write,), preexec_fn=_die_with(os.getpid()))  # noqa: PLW1509 - the launcher runs no thread  # fmt: skip
        except OSError as exc:
            os.close(read)
            log.warning("cannot start a warm trainer (%s): the next restart starts cold", exc)
            return
        finally:
            os.close(write)
        self.warm_ready, self.warm_since = read, self.clock()
        log.info("a warm trainer (pid %d) preloads %s for the next restart", self.warm.pid,
                 ", ".join(self.options.preload))  # fmt: skip

    def _close_ready(self) -> None:
        if self.warm_ready is not None:
            os.close(self.warm_ready)
            self.warm_ready = None

    def _warm_state(self) -> str | None:
        """What the sidecar is told of the warm trainer: None (none), starting, or ready."""
        if self.warm is None or self.warm.returncode is not None:
            return None
        return "starting" if self.warm_ready is not None else "ready"

    @staticmethod
    def _kill_group(pid: int, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)

    def _stop(self, hard: bool) -> None:
        if self.child is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.child.pid, signal.SIGKILL if hard else signal.SIGTERM)

    def _reap(self) -> int | None:
        """The trainer's return code once it exited (negative: killed by that signal), else None. Every
        other child is reaped too: as PID 1 of a container the launcher inherits the trainer's orphans."""
        found: int | None = None
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if self.child is not None and pid == self.child.pid:
                found = os.waitstatus_to_exitcode(status)
                self.child.returncode = found
            elif self.warm is not None and pid == self.warm.pid:
                self.warm.returncode = os.waitstatus_to_exitcode(status)
                log.warning("the warm trainer (pid %d) exited with %d before it was needed: the next one starts "
                            "after %gs", pid, self.warm.returncode, WARM_DELAY_S)  # fmt: skip
                self.warm, self.warm_at = None, self.clock() + WARM_DELAY_S
                self._close_ready()
        if found is not None and self.child is not None:
            # what the trainer left in its group dies with it: a dataloader worker, a torchrun worker
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.child.pid, signal.SIGKILL)
        return found

    # ---- the loop ----

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.signals.append(signum)

    def _do(self, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, decide.Say):
                log.info("%s", action.message)
            elif isinstance(action, decide.Start):
                self._spawn(action.generation, action.word)
            elif isinstance(action, decide.Stop):
                self._stop(action.hard)
            elif isinstance(action, decide.Exited):
                self._report("exited", cause=action.cause, code=action.code, signal=action.signal)
            elif isinstance(action, decide.Exit):
                log.info("exiting with status %d: %s", action.status, action.why)
                self.exit_status = action.status

    def _apply(self, result: tuple[State, list[Action]]) -> None:
        self.state, actions = result
        self._do(actions)

    def run(self) -> int:
        """Supervise until the launcher exits; returns its exit status."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        settings = self.options.settings
        view = self._view(timeout=FIRST_WORD_TIMEOUT_S)
        self.instance = view.get("instance") if view else None
        self.state, first = decide.begin(self._word(view))
        self._report("hello")
        self._do(first)
        next_poll = self.clock()
        while self.exit_status is None:
            now = self.clock()
            if self.spawn_failed:
                self.spawn_failed = False
                self._apply(decide.on_exit(self.state, 127, now, settings))
                continue
            while self.signals and self.exit_status is None:
                self._apply(decide.on_signal(self.state, self.signals.pop(0), now))
            if self.exit_status is not None:
                break
            code = self._reap()  # every pass: the trainer's orphans and a dead warm trainer too
            if code is not None and self.state.running:
                self._apply(decide.on_exit(self.state, code, now, settings))
                continue
            if now >= next_poll:
                next_poll = now + self.options.poll_interval_s
                view = self._view()
                if view is not None:
                    instance = view.get("instance")
                    if isinstance(instance, str) and instance != self.instance:
                        if self.instance is not None:
                            log.info("the sidecar restarted: saying hello again")
                        self.instance = instance
                        self._report("hello")
                    word = self._word(view)
                    if word is not None:
                        self._apply(decide.on_word(self.state, word, now))
            self._apply(decide.on_tick(self.state, now, settings))
            if self.exit_status is None:
                self._warm_up()
            if self.exit_status is None and now - self.last_report >= HEARTBEAT_S:
                self._report("alive")
            time.sleep(min(self.options.poll_interval_s, 0.05))
        if self.state.running and self.child is not None:  # an Exit while the trainer still runs: never
            self._stop(hard=True)
        self._close_ready()
        if self.warm is not None:
            self._kill_group(self.warm.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                self.warm.wait(timeout=5)
        self._report("bye")
        return self.exit_status
