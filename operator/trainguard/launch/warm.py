"""A warm trainer (`trainguard launch --preload torch -- python train.py ...`): a Python interpreter the
launcher starts ahead of time, which does the trainer's heavy imports and then waits, parked, until a
restart hands it the new generation's environment and arguments; it then runs the trainer's script (or
module) in place of a cold `python train.py`. The interpreter's start and the imports (2-3 s for torch
on an idle core, far more on a busy node) leave the restart's critical path; the price is one more
interpreter in memory with those modules loaded.

Only for a command of the form `python [flags] SCRIPT args...` or `python [flags] -m MODULE args...`;
pure: the supervisor spawns what `warm_command` says and writes what `order` gives to its stdin.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath

PLAIN_FLAGS = frozenset({"-u", "-O", "-OO", "-B", "-s", "-E", "-I", "-b", "-bb", "-q", "-v", "-d"})
FLAGS_WITH_VALUE = frozenset({"-X", "-W"})

BOOT = r"""
import importlib, json, os, runpy, sys
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
try:
    os.write(int(sys.argv[2]), b"1")
except OSError:
    pass  # the launcher handed the order over before the imports were done: it no longer listens
os.close(int(sys.argv[2]))
line = sys.stdin.readline()
if not line:
    raise SystemExit(0)
order = json.loads(line)
devnull = os.open(os.devnull, os.O_RDONLY)
os.dup2(devnull, 0)
os.environ.clear()
os.environ.update(order["env"])
sys.argv = order["argv"]
if order["module"]:
    runpy.run_module(order["module"], run_name="__main__", alter_sys=True)
else:
    sys.path[0] = os.path.dirname(os.path.abspath(order["argv"][0]))
    runpy.run_path(order["argv"][0], run_name="__main__")
"""
"""What the warm interpreter runs: the preloads (its argv[1]), a byte to the file descriptor argv[2] once
they are imported (it is ready), then one order from stdin ({env, argv, module}), then the trainer as
`python SCRIPT` or `python -m MODULE` would run it."""


@dataclass(frozen=True)
class Entry:
    """A trainer command that is a Python program: the interpreter with its flags, and what it runs."""

    interpreter: tuple[str, ...]
    script: str | None
    module: str | None
    args: tuple[str, ...]


def entry_of(command: Sequence[str]) -> Entry | None:
    """The Python program a command runs, or None when it is not `python [flags] SCRIPT|-m MODULE ...`
    (a shell, torchrun, `python -c`): such a command is started cold."""
    if not command or not PurePath(command[0]).name.startswith("python"):
        return None
    interpreter, i = [command[0]], 1
    while i < len(command):
        arg = command[i]
        if arg in PLAIN_FLAGS:
            interpreter.append(arg)
            i += 1
        elif arg in FLAGS_WITH_VALUE and i + 1 < len(command):
            interpreter += [arg, command[i + 1]]
            i += 2
        elif arg == "-m" and i + 1 < len(command):
            return Entry(tuple(interpreter), None, command[i + 1], tuple(command[i + 2 :]))
        elif arg.startswith("-"):
            return None  # -c, -, or a flag this does not know
        else:
            return Entry(tuple(interpreter), arg, None, tuple(command[i + 1 :]))
    return None


def warm_command(entry: Entry, preload: Sequence[str], ready_fd: int) -> list[str]:
    """The warm interpreter's command; it writes one byte to `ready_fd` (inherited) once it is ready."""
    return [*entry.interpreter, "-c", BOOT, json.dumps(list(preload)), str(ready_fd)]


def order(entry: Entry, env: Mapping[str, str]) -> bytes:
    """The line the warm interpreter reads: the generation's environment and the trainer's argv."""
    argv = [entry.module or "", *entry.args] if entry.module else [str(entry.script), *entry.args]
    return (json.dumps({"env": dict(env), "argv": argv, "module": entry.module}) + "\n").encode()
