"""The remediation records in the monitors' status: read fresh by name (a GET, not the watch cache: the
record written a moment ago must be seen) under the monitor's lock, written before each action, and
announced as Events.

Every write is conditional: the status patch carries the resourceVersion of the monitor as read, so the
apiserver refuses (409) a write over one it has not seen, from another replica (an old leader during a
rolling upgrade), a user or the operator's own other writers. On a conflict the store reads again and
writes again only if the change still applies: a new record when the spec and the records it was
planned on are unchanged (only other status fields moved), an executor's change when the record stands
where that executor last saw it; otherwise it raises records.Superseded."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from trainguard.api import TrainingJobMonitor, monitor_of
from trainguard.kube.errors import is_conflict
from trainguard.remediation import goodput, records
from trainguard.remediation.records import Superseded
from trainguard.remediation.urgency import Urgency, cordon_pending
from trainguard.times import unix

log = logging.getLogger("trainguard.remediation")

Record = dict[str, Any]

WRITE_ATTEMPTS = 5
"""Conditional writes tried before giving up when other writers keep moving the monitor."""


class MonitorAPI(Protocol):
    """kube.Kube's monitor reads and writes."""

    def get_monitor(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def patch_status(
        self,
        plural: str,
        namespace: str,
        name: str,
        status: dict[str, Any],
        *,
        resource_version: str | None = None,
    ) -> None: ...

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


def _version(body: dict[str, Any]) -> str | None:
    version = (body.get("metadata") or {}).get("resourceVersion")
    return str(version) if version else None


class Fresh:
    """A record and its monitor as the API holds them now (record None: no record of that id)."""

    def __init__(self, record: Record | None, monitor: TrainingJobMonitor) -> None:
        self.record = record
        self.monitor = monitor


class RecordStore:
    def __init__(
        self,
        api: MonitorAPI,
        lock: Callable[[str, str], Any],
        on_step: Callable[[str, str], None] = lambda kind, phase: None,
        *,
        key: Callable[[], bytes | None],
        clock: Callable[[], float] = time.time,
        urgency: Urgency | None = None,
    ) -> None:
        self.api = api
        self.urgency = urgency
        """Ended for the record's job once its cordon is done (remediation/urgency.py)."""
        self.clock = clock
        """When records pruned from the status leave their goodput counts in it."""
        self.lock = lock
        """The monitor's lock (controller.handlers.LOCKS): its reconcile writes the same status."""
        self.on_step = on_step
        """Told (kind, phase) of each step that a saved record moved into a new phase (metrics)."""
        self.key = key
        """The operator key new records are signed with (None until the receiver has one)."""

    def read(self, namespace: str, name: str) -> tuple[dict[str, Any], TrainingJobMonitor] | None:
        """The monitor's body and model, read now; None when it is gone or invalid. Call under its lock."""
        body = self.api.get_monitor(namespace, name)
        monitor = monitor_of(body)
        return None if body is None or monitor is None else (body, monitor)

    def _write(self, body: dict[str, Any], record: Record, also: dict[str, Any] | None = None) -> Record:
        """Write the record into the body's status, with the other status fields of `also` in the same
        write (the planner's pendingSignals), conditional on the body's resourceVersion; raises the API's
        conflict when the monitor was written since `body` was read."""
        meta = body["metadata"]
        before = next((r for r in records_of(body) if r.get("id") == record.get("id")), None)
        kept = records_of(body)
        updated = records.with_record(kept, record)
        status = {"remediations": updated, **(also or {})}
        if {r.get("id") for r in kept} - {r.get("id") for r in updated}:  # pruned: their counts stay
            since = unix(str(meta.get("creationTimestamp") or ""))
            carried = goodput.carried_of(body.get("status"))
            status["goodput"] = goodput.carried_status(goodput.carry(kept, carried, since, self.clock()))
        self.api.patch_status("trainingjobmonitors", meta["namespace"], meta["name"],
                              status, resource_version=_version(body))  # fmt: skip
        body.setdefault("status", {}).update(status)
        for kind, phase in step_changes(before, record):
            self.on_step(kind, phase)
        if self.urgency is not None and not cordon_pending(record):
            self.urgency.end((meta["namespace"], meta["name"]))
        return record

    def create(
        self,
        body: dict[str, Any],
        record: Record,
        also: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> Record:
        """Sign a new record (for this monitor object: its uid) and write it into the body's status (under
        the monitor's lock, the body read fresh by the caller, who planned on it). On a conflict the
        monitor is read again: when it is the same object and its spec and records are those the plan was
        made on, the record is written onto the fresh body; else Superseded (plan again)."""
        meta = body["metadata"]
        key = self.key()
        if key is None:
            raise RuntimeError("no operator key yet: a remediation record cannot be signed")
        signed = records.sign(record, key, meta["namespace"], meta["name"], meta.get("uid") or "")
        current = body
        for _ in range(WRITE_ATTEMPTS):
            try:
                self._write(current, signed, also(current) if also else None)
            except Exception as exc:
                if not is_conflict(exc):
                    raise
                fresh = self.api.get_monitor(meta["namespace"], meta["name"])
                if (
                    fresh is None
                    or (fresh.get("metadata") or {}).get("uid") != meta.get("uid")
                    or fresh.get("spec") != body.get("spec")
                    or records_of(fresh) != records_of(body)
                ):
                    raise Superseded(
                        f"monitor {meta['namespace']}/{meta['name']} changed while planning"
                    ) from None
                current = fresh
                continue
            if current is not body:
                body.clear()
                body.update(current)
            return signed
        raise Superseded(f"monitor {meta['namespace']}/{meta['name']} kept changing while planning")

    def saver(self, namespace: str, name: str) -> Saver:
        """What one executor run reads and saves with (a new one for each run)."""
        return Saver(self, namespace, name)

    def announce(self, body: dict[str, Any], reason: str, message: str) -> None:
        try:
            warning = reason.endswith(("Failed", "Skipped"))
            self.api.post_event(body, reason, message, "Warning" if warning else "Normal")
        except Exception:
            log.exception("could not post the %s Event", reason)


class Saver:
    """One executor run's view of its record: `read` takes the record and the monitor from the API
    under the monitor's lock and remembers where the record stood; `__call__` writes a change of the
    record only while the API's copy still stands where this run last read or wrote it (records.same),
    conditionally on the monitor's resourceVersion, reading again after a conflict. Anything else
    raises records.Superseded: someone else moved the record, and this run must not act on it."""

    def __init__(self, store: RecordStore, namespace: str, name: str) -> None:
        self.store = store
        self.namespace = namespace
        self.name = name
        self.seen: Record | None = None

    def read(self, record_id: str) -> Fresh | None:
        """The record and its monitor now; None when the monitor is gone or invalid."""
        with self.store.lock(self.namespace, self.name):
            found = self.store.read(self.namespace, self.name)
        if found is None:
            return None
        body, monitor = found
        record = next((r for r in records_of(body) if r.get("id") == record_id), None)
        self.seen = record
        return Fresh(record, monitor)

    def __call__(self, record: Record) -> Record:
        where = f"{self.namespace}/{self.name}"
        for _ in range(WRITE_ATTEMPTS):
            with self.store.lock(self.namespace, self.name):
                body = self.store.api.get_monitor(self.namespace, self.name)
                if body is None:
                    raise Superseded(f"monitor {where} is gone; remediation {record['id']} stops")
                current = next((r for r in records_of(body) if r.get("id") == record["id"]), None)
                if current is None or not records.same(current, self.seen):
                    raise Superseded(
                        f"remediation {record['id']} of {where} was moved on by someone else "
                        f"(now {(current or {}).get('phase', 'gone')}, owner {(current or {}).get('owner') or 'none'})"
                    )
                try:
                    self.store._write(body, record)
                except Exception as exc:
                    if is_conflict(exc):
                        continue  # written meanwhile: read again, and write only if the record stands
                    raise
            self.seen = record
            return record
        raise Superseded(f"monitor {where} kept changing; remediation {record['id']} stops for now")
