"""The remediation records in the monitors' status: read fresh by name (a GET, not the watch cache: the
record written a moment ago must be seen) under the monitor's lock, written before each action, and
announced as Events."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from trainguard.api import TrainingJobMonitor, monitor_of
from trainguard.remediation import records

log = logging.getLogger("trainguard.remediation")

Record = dict[str, Any]


class MonitorAPI(Protocol):
    """kube.Kube's monitor reads and writes."""

    def get_monitor(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def patch_status(self, plural: str, namespace: str, name: str, status: dict[str, Any]) -> None: ...

    def post_event(
        self, regarding: dict[str, Any], reason: str, message: str, type_: str = "Normal"
    ) -> None: ...


def records_of(body: dict[str, Any]) -> list[Record]:
    return list((body.get("status") or {}).get("remediations") or [])


def step_changes(before: Record | None, after: Record) -> list[tuple[str, str]]:
    """(kind, phase) of each step of `after` whose phase differs from the same step in `before` (every
    step of a new record): what the saved record moved on, once per move."""
    old = list((before or {}).get("steps") or [])
    changes = []
    for i, step in enumerate(after.get("steps") or []):
        previous = old[i] if i < len(old) and old[i].get("kind") == step.get("kind") else {}
        if step.get("phase") != previous.get("phase"):
            changes.append((str(step.get("kind")), str(step.get("phase"))))
    return changes


def summary(record: Record) -> str:
    steps = ", ".join(f"{s.get('kind')}:{s.get('phase')}" for s in record.get("steps", []))
    where = f" on {record['node']}" if record.get("node") else ""
    return (
        f"{record.get('alert')}{where}: {record.get('phase')} [{steps}] {record.get('message') or ''}".strip()
    )


class RecordStore:
    def __init__(
        self,
        api: MonitorAPI,
        lock: Callable[[str, str], Any],
        on_step: Callable[[str, str], None] = lambda kind, phase: None,
    ) -> None:
        self.api = api
        self.lock = lock
        """The monitor's lock (controller.handlers.LOCKS): its reconcile writes the same status."""
        self.on_step = on_step
        """Told (kind, phase) of each step that a saved record moved into a new phase (metrics)."""

    def read(self, namespace: str, name: str) -> tuple[dict[str, Any], TrainingJobMonitor] | None:
        """The monitor's body and model, read now; None when it is gone or invalid. Call under its lock."""
        body = self.api.get_monitor(namespace, name)
        monitor = monitor_of(body)
        return None if body is None or monitor is None else (body, monitor)

    def save(self, body: dict[str, Any], record: Record, also: dict[str, Any] | None = None) -> Record:
        """Write the record into the body's status (under the monitor's lock, read fresh by the caller),
        with the other status fields of `also` in the same write (the planner's pendingSignals)."""
        meta = body["metadata"]
        before = next((r for r in records_of(body) if r.get("id") == record.get("id")), None)
        updated = records.with_record(records_of(body), record)
        status = {"remediations": updated, **(also or {})}
        self.api.patch_status("trainingjobmonitors", meta["namespace"], meta["name"], status)
        body.setdefault("status", {}).update(status)
        for kind, phase in step_changes(before, record):
            self.on_step(kind, phase)
        return record

    def saver(self, namespace: str, name: str) -> Callable[[Record], Record]:
        """What the executor saves with: the monitor read fresh under its lock for every write."""

        def save(record: Record) -> Record:
            with self.lock(namespace, name):
                fresh = self.api.get_monitor(namespace, name)
                if fresh is None:
                    raise RuntimeError(
                        f"monitor {namespace}/{name} is gone; remediation {record['id']} stops"
                    )
                return self.save(fresh, record)

        return save

    def current(self, namespace: str, name: str, record_id: str) -> Record | None:
        """The record as the API has it now (a watch cache may be a moment behind the executor)."""
        with self.lock(namespace, name):
            body = self.api.get_monitor(namespace, name)
        return next((r for r in records_of(body or {}) if r.get("id") == record_id), None)

    def announce(self, body: dict[str, Any], reason: str, message: str) -> None:
        try:
            warning = reason.endswith(("Failed", "Skipped"))
            self.api.post_event(body, reason, message, "Warning" if warning else "Normal")
        except Exception:
            log.exception("could not post the %s Event", reason)
