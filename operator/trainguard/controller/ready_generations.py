"""The generation of each monitor that this process last reconciled to Ready: kopf's create handler, called
again for a monitor at a generation already done, does nothing.

kopf marks an object handled by patching an annotation onto it, then waits up to 5 s
(`consistency_timeout`) for the watch to bring that version back. While 2,000 monitors were applied the
watch lagged more than that, so kopf took the unmarked copy it held for a new object and called the create
handler again: 3,445 creations for 2,006 monitors, each a whole reconcile with its writes. A longer wait
held every object's next change that long, and was withdrawn (docs/performance.md).

Here the repeat is told by what this process did, not by a cache: the same uid at the same generation,
reconciled to Ready. Anything else runs: another object of that name (another uid), a changed spec (a new
generation), a reconcile that failed or never ran in this process (after a restart kopf resumes every
monitor), and every update and resume. What can change without a new generation has its own path: a
policy's event reconciles the monitors that name it, and the resync repairs an object edited by hand.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any


class ReadyGenerations:
    def __init__(self) -> None:
        self._ready: dict[tuple[str, str], tuple[str, Any]] = {}
        self._guard = threading.Lock()

    def reconciled(self, body: Mapping[str, Any], ready: bool) -> None:
        """After a reconcile of the monitor `body` (as it read it): whether it ended Ready."""
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
        with self._guard:
            if ready and meta.get("uid"):
                self._ready[key] = (str(meta["uid"]), meta.get("generation"))
            else:
                self._ready.pop(key, None)

    def holds(self, namespace: str, name: str, uid: str, generation: Any) -> bool:
        """Whether the last reconcile of the monitor in this process ended Ready at this uid and generation."""
        with self._guard:
            return self._ready.get((namespace, name)) == (uid, generation)

    def __len__(self) -> int:
        return len(self._ready)
