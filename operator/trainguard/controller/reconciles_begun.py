"""Which monitors' reconciles have begun in this process: the resync and a policy event leave a new
monitor whose own handler has not begun one to that handler.

kopf calls a monitor's create handler when it appears and its resume handler at each operator start (and
when a standby replica takes over), and that reconcile reads the monitor's policies by name from the API.
A policy event or a resync pass that reconciles the monitor before then does the work twice: 2,000
monitors applied with their policies cost about 2.7 reconciles each.

What this process knows is a fact where the caches are not: a monitor is entered when its reconcile
begins, before it reads anything, so a policy event that finds it missing knows that any reconcile of it
is still to begin and will read the policy that now exists. A monitor not entered is left to its handler
only while it is young (`AWAIT_HANDLER_S` since its creation, or not in the cache yet): one whose handler
keeps failing, or that kopf never handed over, is the resync's again after that.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from trainguard.kube.objects import creation_seconds

AWAIT_HANDLER_S = 600.0
"""How long a monitor no reconcile has begun for is left to its own handler (2,000 monitors applied at
once were all reconciled by their handlers within 240 s on a two-core machine)."""


class ReconcilesBegun:
    def __init__(self, clock: Callable[[], float] = time.time, await_s: float = AWAIT_HANDLER_S) -> None:
        self._clock = clock
        self._await_s = await_s
        self._began: set[tuple[str, str]] = set()
        self._guard = threading.Lock()

    def began(self, namespace: str, name: str) -> None:
        """Called by a reconcile before it reads the monitor or its policies."""
        with self._guard:
            self._began.add((namespace, name))

    def awaits_handler(self, namespace: str, name: str, body: Mapping[str, Any] | None) -> bool:
        """Whether the monitor (`body` as its cache holds it, None when the cache does not yet) has had
        no reconcile begin in this process and is young: its own handler will reconcile it."""
        with self._guard:
            if (namespace, name) in self._began:
                return False
        if body is None:
            return True  # kopf has seen it (a policy's index names it), the cache not yet: new
        created = creation_seconds(dict(body))
        return created > 0 and self._clock() - created < self._await_s

    def __len__(self) -> int:
        return len(self._began)
