"""What the launcher does, decided from what happened: a word came, the trainer exited, a signal came,
time passed. Pure: each function takes the state and returns the new state and the actions, which the
supervisor carries out (spawn, signal the process group, report to the sidecar, exit).

The rules:
- The first trainer starts at once. A word the sidecar held before this launcher started (it restarted
  with its container) is history: its generation counts as seen, and the trainer asks its sidecar what
  to resume from (the pin, else the newest checkpoint) rather than take an old word's checkpoint.
- A word of a new generation (above every one seen: re-posts are ignored) stops the running trainer
  (SIGTERM to its process group, SIGKILL after the term grace) and starts the command again as that
  generation, from the word's checkpoint. A newer word while one stops replaces the one to start.
- A trainer that ends by itself is reported `exited`. Exit 0: training is over, the launcher exits 0.
  Otherwise it waits `word_timeout` for a word, and without one exits with the trainer's status, so the
  owner's own policy applies (restartPolicy, backoffLimit): it never restarts a trainer on its own,
  since a gang restart needs every rank and only the operator sees them all.
- SIGTERM or SIGINT is forwarded to the trainer's process group (SIGKILL after the term grace; at once
  on a second signal); the launcher then exits with the trainer's status.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainguard.launch.word import Word

RESTART = "restart"
SIGNAL = "signal"
EXIT = "exit"
"""Why a trainer exited (exporter/restarts.py EXIT_CAUSES): stopped for a new generation, stopped because
the launcher was told to stop, or by itself."""


@dataclass(frozen=True)
class Settings:
    term_grace_s: float = 2.0
    word_timeout_s: float = 30.0


@dataclass(frozen=True)
class State:
    generation: int = 0
    """The generation of the trainer running, or of the last one."""
    seen: int = 0
    """The highest generation of any word seen: a word at or below it is ignored."""
    running: bool = False
    pending: Word | None = None
    """The word to start once the running trainer is gone."""
    stopping: str | None = None
    """RESTART or SIGNAL while the running trainer is being stopped."""
    stop_at: float | None = None
    killed: bool = False
    """SIGKILL sent to the process group."""
    waiting_until: float | None = None
    """The trainer ended by itself, failed: exit with its status unless a word comes by then."""
    status: int | None = None
    """The last trainer's exit status, as a shell gives it (128 + N for signal N)."""
    signal: int | None = None
    """The signal that told the launcher to stop."""


@dataclass(frozen=True)
class Start:
    generation: int
    word: Word | None
    """None: the first trainer (no word applies)."""


@dataclass(frozen=True)
class Stop:
    hard: bool
    """SIGKILL (else SIGTERM) to the trainer's process group."""


@dataclass(frozen=True)
class Exited:
    """Report to the sidecar: the trainer of the state's generation exited."""

    cause: str
    code: int | None
    signal: int | None


@dataclass(frozen=True)
class Exit:
    status: int
    why: str


@dataclass(frozen=True)
class Say:
    message: str


Action = Start | Stop | Exited | Exit | Say


def status_of(returncode: int) -> tuple[int, int | None, int | None]:
    """(shell status, exit code, signal) of a child's return code (negative: killed by that signal)."""
    if returncode < 0:
        return 128 - returncode, None, -returncode
    return returncode, returncode, None


def begin(held: Word | None) -> tuple[State, list[Action]]:
    """The first trainer. `held`: the word the sidecar already held (its generation is not run again)."""
    generation = held.generation if held is not None else 0
    say = [
        Say(f"the sidecar holds generation {generation} from before this launcher: starting as it")
    ] * bool(held)
    return State(generation=generation, seen=generation, running=True), [*say, Start(generation, None)]


def on_word(state: State, word: Word, now: float) -> tuple[State, list[Action]]:
    if word.generation <= state.seen or state.stopping == SIGNAL or state.signal is not None:
        return state, []
    state = replace(state, seen=word.generation)
    about = f"generation {word.generation} (record {word.record or 'none'}, from {_step(word)})"
    if state.running:
        if state.stopping == RESTART:
            return replace(state, pending=word), [Say(f"{about} replaces the one to start")]
        stopped = replace(state, pending=word, stopping=RESTART, stop_at=now, killed=False)
        return stopped, [Say(f"{about}: stopping generation {state.generation}"), Stop(hard=False)]
    started = replace(state, generation=word.generation, running=True, waiting_until=None, pending=None)
    return started, [Say(f"{about}: starting it"), Start(word.generation, word)]


def on_exit(state: State, returncode: int, now: float, settings: Settings) -> tuple[State, list[Action]]:
    status, code, sig = status_of(returncode)
    cause = state.stopping or EXIT
    done = replace(state, running=False, stopping=None, stop_at=None, killed=False, status=status)
    how = f"exit code {code}" if sig is None else f"signal {sig}"
    said = Say(f"the trainer of generation {state.generation} ended ({how})")
    exited = Exited(cause, code, sig)
    if cause == RESTART and state.pending is not None:
        word = state.pending
        started = replace(done, generation=word.generation, running=True, pending=None)
        return started, [said, exited, Start(word.generation, word)]
    if cause == SIGNAL or state.signal is not None:
        return done, [said, exited, Exit(status, f"stopped by signal {state.signal}")]
    if status == 0:
        return done, [said, exited, Exit(0, "the trainer finished")]
    waiting = replace(done, waiting_until=now + settings.word_timeout_s)
    wait = Say(f"waiting up to {settings.word_timeout_s:g}s for the operator's word to restart it")
    return waiting, [said, exited, wait]


def on_signal(state: State, signum: int, now: float) -> tuple[State, list[Action]]:
    if not state.running:
        return replace(state, signal=signum), [
            Exit(128 + signum, f"stopped by signal {signum}, no trainer running")
        ]
    if state.stopping == SIGNAL or state.signal is not None:  # a second signal: no more grace
        return replace(state, killed=True), [Stop(hard=True)]
    stopping = replace(state, signal=signum, stopping=SIGNAL, stop_at=state.stop_at or now)
    return stopping, [Say(f"signal {signum}: stopping the trainer"), Stop(hard=False)]


def on_tick(state: State, now: float, settings: Settings) -> tuple[State, list[Action]]:
    if (
        state.running
        and state.stop_at is not None
        and not state.killed
        and now - state.stop_at >= settings.term_grace_s
    ):
        said = Say(f"the trainer outlived the term grace of {settings.term_grace_s:g}s: SIGKILL")
        return replace(state, killed=True), [said, Stop(hard=True)]
    if not state.running and state.waiting_until is not None and now >= state.waiting_until:
        why = (
            f"no word within {settings.word_timeout_s:g}s: exiting with the trainer's status {state.status}"
            " so that the owner's policy applies"
        )
        return replace(state, waiting_until=None), [Exit(state.status or 1, why)]
    return state, []


def _step(word: Word) -> str:
    step = (word.resume_from or {}).get("step")
    if step is None:
        return "what the trainer finds"
    return f"step {int(step) if float(step).is_integer() else step}"
