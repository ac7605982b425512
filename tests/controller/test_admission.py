"""Sidecar injection at admission: every replica answers from its monitor cache (a restart's pointer
included, from the monitor's status), parses each monitor once per version, and nothing denies a pod."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.conftest import MONITOR
from trainguard.controller import admission
from trainguard.controller.admission import ParsedMonitors, admit
from trainguard.render.sidecar import EXPORTER

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "namespace": "ml",
        "generateName": "llama-pretrain-0-",
        "labels": {"app": "llama-pretrain"},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "llama-pretrain",
                             "uid": "job-uid", "controller": True}],
    },
    "spec": {"containers": [{"name": "trainer", "image": "t:1"}]},
}  # fmt: skip


def run(list_monitors: Any, events: list[tuple[str, str, str]], native: bool = True) -> Any:
    return admit(
        copy.deepcopy(POD),
        monitors_in=list_monitors,
        post_event=lambda obj, reason, msg, type_: events.append((obj["kind"], reason, type_)),
        receiver_url="https://op:8443/v1/events",
        sidecar_image="registry.example/trainguard:1.2.3",
        native_sidecar=native,
    )


def test_the_pods_namespace_monitors_are_read_for_each_request() -> None:
    """Through `monitors_in` (the operator's own watch cache, which a standby keeps too: kopf pauses a
    standby's watches)."""
    asked: list[str] = []

    def list_monitors(namespace: str) -> list[dict[str, Any]]:
        asked.append(namespace)
        return [copy.deepcopy(MONITOR)]

    changes = run(list_monitors, [])
    assert asked == ["ml"]
    assert [c["name"] for c in changes["spec"]["initContainers"]] == [EXPORTER]


def test_the_injected_sidecar_runs_the_image_the_operator_was_given() -> None:
    changes = run(lambda ns: [copy.deepcopy(MONITOR)], [])
    assert changes["spec"]["initContainers"][-1]["image"] == "registry.example/trainguard:1.2.3"


def test_an_old_apiserver_gets_a_regular_container() -> None:
    changes = run(lambda ns: [copy.deepcopy(MONITOR)], [], native=False)
    assert [c["name"] for c in changes["spec"]["containers"]] == ["trainer", EXPORTER]


def test_an_error_admits_the_pod_unchanged_and_says_why_in_an_event() -> None:
    events: list[tuple[str, str, str]] = []

    def broken(namespace: str) -> list[dict[str, Any]]:
        raise TimeoutError("apiserver did not answer")

    assert run(broken, events) is None, "no patch: the pod is admitted as it is, never denied"
    assert events == [("Job", "InjectionFailed", "Warning")], "about the pod's Job: the pod has no name yet"


def test_an_error_after_the_match_is_reported_on_the_monitor(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[tuple[str, str, str]] = []

    def exploding(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("a bug in the renderer")

    monkeypatch.setattr(admission, "inject", exploding)
    assert run(lambda ns: [copy.deepcopy(MONITOR)], events) is None
    assert events == [("TrainingJobMonitor", "InjectionFailed", "Warning")]


def test_an_event_that_cannot_be_posted_still_admits() -> None:
    def broken(namespace: str) -> list[dict[str, Any]]:
        raise TimeoutError("down")

    def no_events(*args: Any) -> None:
        raise OSError("events are down too")

    assert admit(copy.deepcopy(POD), monitors_in=broken, post_event=no_events, receiver_url="u",
                 sidecar_image="i", native_sidecar=True) is None  # fmt: skip


def test_an_invalid_monitor_selects_nothing() -> None:
    bad = copy.deepcopy(MONITOR)
    bad["spec"]["baseline"] = {"sigma": -1}
    assert run(lambda ns: [bad], []) is None


def restart_record(
    phase: str,
    restart_phase: str,
    updated: str,
    *,
    progress: dict[str, Any] | None = None,
    record_id: str = "r",
    kind: str = "RestartGang",
    placed: str = "Planned",
    created: str = "2026-12-01T02:59:00Z",
) -> dict[str, Any]:
    restart: dict[str, Any] = {"kind": kind, "phase": restart_phase}
    if progress is not None:
        restart["progress"] = progress
    return {"id": record_id, "phase": phase, "created": created, "updated": updated, "dryRun": False,
            "steps": [{"kind": "Cordon", "phase": "Succeeded"}, restart,
                      {"kind": "ConfirmPlacement", "phase": placed}]}  # fmt: skip


CHECKPOINT = '{"kind": "full", "path": "/ckpt/1000", "step": 1000}'
NOW = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def admitted(
    *records: dict[str, Any], workload: str | None = "never asked"
) -> tuple[dict[str, Any], list[str]]:
    """The changes for POD while the monitor's status holds `records`; and the API reads of the workload's
    pointer made meanwhile (`workload` is what the API would answer)."""
    mon = copy.deepcopy(MONITOR)
    mon["spec"]["workloadRef"] = {"kind": "Job", "name": "llama-pretrain"}
    mon["status"] = {"remediations": list(records)}
    asked: list[str] = []

    def from_api(m: Any) -> str | None:
        asked.append(m.name)
        return workload

    changes = admit(copy.deepcopy(POD), monitors_in=lambda ns: [copy.deepcopy(mon)], post_event=lambda *a: None,
                    receiver_url="u", sidecar_image="i", native_sidecar=True,
                    resume_pointer=from_api, clock=lambda: NOW)  # fmt: skip
    return changes, asked


def pointer_of(changes: dict[str, Any]) -> str | None:
    env = {e["name"]: e.get("value") for e in changes["spec"]["initContainers"][-1]["env"]}
    return env.get("TRAINGUARD_RESUME_FROM")


SPARE = {"key": "trainguard.io/spare", "operator": "Exists", "effect": "NoSchedule"}


def test_during_a_gang_restart_new_pods_tolerate_spares_and_get_the_pointer_from_the_status() -> None:
    record = restart_record("InProgress", "InProgress", "2027-01-15T07:59:00Z",
                            progress={"count": 2, "createdUpTo": 1, "resumeFrom": CHECKPOINT})  # fmt: skip
    changes, asked = admitted(record)
    assert SPARE in changes["spec"]["tolerations"]
    assert pointer_of(changes) == CHECKPOINT
    assert asked == [], "no API call: the pointer is in the monitor the cache holds"


def test_a_replacement_that_rejoins_gets_the_generation_and_the_record_in_its_pointer() -> None:
    record = restart_record("InProgress", "Succeeded", "2027-01-15T07:59:00Z", kind="ReplacePod", record_id="rec-7",
                            progress={"count": 1, "uids": "a/b", "resumeFrom": CHECKPOINT, "generation": 3})  # fmt: skip
    changes, _ = admitted(record)
    assert json.loads(str(pointer_of(changes))) == {
        **json.loads(CHECKPOINT),
        "generation": 3,
        "record": "rec-7",
    }


def test_no_pointer_once_the_new_pods_are_placed_or_when_none_was_known() -> None:
    progress = {"count": 2, "createdUpTo": 1, "resumeFrom": CHECKPOINT}
    placed = restart_record(
        "Succeeded", "Succeeded", "2027-01-15T07:59:00Z", progress=progress, placed="Succeeded"
    )
    unknown = restart_record(
        "InProgress", "Succeeded", "2027-01-15T07:59:00Z", progress={**progress, "resumeFrom": "null"}
    )
    for record in (placed, unknown):
        changes, asked = admitted(record)
        assert SPARE in changes["spec"]["tolerations"], "still within the restart's window"
        assert pointer_of(changes) is None and asked == []


def test_a_restart_an_older_operator_began_reads_the_pointer_from_the_workload() -> None:
    """Its progress has no resumeFrom: the pointer is on the workload only, read from the API."""
    record = restart_record(
        "InProgress", "Succeeded", "2027-01-15T07:59:00Z", progress={"count": 2, "createdUpTo": 1}
    )
    changes, asked = admitted(record, workload=CHECKPOINT)
    assert asked == ["llama-pretrain"] and pointer_of(changes) == CHECKPOINT


def test_the_newest_restart_gives_the_pointer() -> None:
    older = restart_record("Failed", "Succeeded", "2027-01-15T07:55:00Z", created="2027-01-15T07:50:00Z",
                           progress={"count": 2, "createdUpTo": 1, "resumeFrom": '{"step": 500}'})  # fmt: skip
    newer = restart_record("InProgress", "InProgress", "2027-01-15T07:59:00Z", created="2027-01-15T07:58:00Z",
                           progress={"count": 2, "createdUpTo": 2, "resumeFrom": CHECKPOINT})  # fmt: skip
    for records in ([older, newer], [newer, older]):
        assert pointer_of(admitted(*records)[0]) == CHECKPOINT


def test_without_a_restart_no_spare_and_no_pointer() -> None:
    old = restart_record(
        "Succeeded", "Succeeded", "2027-01-15T07:00:00Z"
    )  # long finished: > 10 minutes before now
    planned_only = restart_record("InProgress", "Planned", "2027-01-15T08:00:00Z")
    dry = {**restart_record("Succeeded", "Succeeded", "2027-01-15T07:59:00Z"), "dryRun": True}
    for records in ([], [old], [planned_only], [dry]):
        changes, asked = admitted(*records)
        assert "tolerations" not in changes["spec"], records
        assert pointer_of(changes) is None and asked == []


def versioned(name: str, version: str, app: str | None = None, **selector: Any) -> dict[str, Any]:
    mon = copy.deepcopy(MONITOR)
    mon["metadata"].update(name=name, resourceVersion=version)
    mon["spec"]["selector"] = selector or {"matchLabels": {"app": app}}
    return mon


LABELS = {"app": "llama-pretrain", "team": "a"}


def test_each_monitor_is_parsed_once_per_version(monkeypatch: pytest.MonkeyPatch) -> None:
    parses: list[str] = []
    real = admission.parse_spec

    def counting(body: Any, *args: Any) -> Any:
        parses.append(body["metadata"]["name"])
        return real(body, *args)

    monkeypatch.setattr(admission, "parse_spec", counting)
    parsed = ParsedMonitors()
    other = versioned("other", "7", "other")
    monitors = [versioned("llama-pretrain", "1", "llama-pretrain"), other]
    for _ in range(3):
        assert [m.name for m, _ in parsed("ml", monitors, LABELS)] == ["llama-pretrain"]
    assert sorted(parses) == ["llama-pretrain", "other"], "once each, not per request"
    # a new version (a spec edit) is parsed again, and its new selector is what matches
    edited = versioned("llama-pretrain", "2", "something-else")
    changes = admit(copy.deepcopy(POD), monitors_in=lambda ns: [edited, other], post_event=lambda *a: None,
                    receiver_url="u", sidecar_image="i", native_sidecar=True, parsed=parsed)  # fmt: skip
    assert changes is None and parses[-1] == "llama-pretrain" and parses.count("other") == 1
    # a monitor deleted is forgotten; an invalid one selects nothing and is not parsed again
    bad = versioned("bad", "3", "llama-pretrain")
    bad["spec"]["baseline"] = {"sigma": -1}
    before = len(parses)
    for _ in range(2):
        assert parsed("ml", [bad], LABELS) == []
    assert len(parses) == before + 1
    assert parsed("ml", [], LABELS) == []


def test_the_candidates_hold_every_monitor_that_selects_the_pod() -> None:
    """Indexed by one of their matchLabels: a monitor is tried only for pods that carry it; one
    without matchLabels is always tried; the oldest name still wins a tie."""
    monitors = [
        versioned("b-two-labels", "1", matchLabels={"app": "llama-pretrain", "team": "a"}),
        versioned("c-expression", "2", matchExpressions=[{"key": "team", "operator": "In", "values": ["a"]}]),
        versioned("d-other-team", "3", matchLabels={"app": "llama-pretrain", "team": "b"}),
        versioned("e-other-app", "4", "vision"),
        versioned("a-app", "5", "llama-pretrain"),
    ]
    candidates = ParsedMonitors()("ml", monitors, LABELS)
    assert {m.name for m, _ in candidates} >= {"a-app", "b-two-labels", "c-expression"}
    assert "e-other-app" not in {m.name for m, _ in candidates}
    everything = admission.every_valid("ml", monitors, LABELS)
    pod = {"metadata": {"namespace": "ml", "labels": LABELS}}
    found = admission.select(pod, candidates)
    assert found is not None and admission.select(pod, everything) is not None
    assert found[0].name == admission.select(pod, everything)[0].name == "a-app"  # type: ignore[index]


def test_the_caches_same_objects_are_recognised_without_reading_their_versions() -> None:
    """The watch cache hands out the same objects until an event replaces one: the same objects again
    are the snapshot the last admission made, its versions not read; a replaced one is read again."""
    reads: list[str] = []

    class Watched(dict):  # type: ignore[type-arg]
        def get(self, key: Any, default: Any = None) -> Any:
            if key == "metadata":
                reads.append(self["metadata"]["name"])
            return super().get(key, default)

    monitors = [
        Watched(versioned("llama-pretrain", "1", "llama-pretrain")),
        Watched(versioned("other", "7", "x")),
    ]
    parsed = ParsedMonitors()
    assert [m.name for m, _ in parsed("ml", list(monitors), LABELS)] == ["llama-pretrain"]
    reads.clear()
    assert [m.name for m, _ in parsed("ml", list(monitors), LABELS)] == ["llama-pretrain"]
    assert reads == [], "recognised by identity"
    edited = Watched(versioned("llama-pretrain", "2", "something-else"))
    assert parsed("ml", [edited, monitors[1]], LABELS) == []
    assert "llama-pretrain" in reads, "a replaced object is read"
