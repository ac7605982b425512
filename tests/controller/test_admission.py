"""Sidecar injection at admission: every replica answers from the API, and nothing denies a pod."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.conftest import MONITOR
from trainguard.controller import admission
from trainguard.controller.admission import admit
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


def test_monitors_are_read_from_the_api_for_each_request() -> None:
    """A standby's watch-fed index is empty (kopf pauses its watches): reading the API is what makes
    every replica answer the same."""
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


def restart_record(phase: str, restart_phase: str, updated: str) -> dict[str, Any]:
    return {"id": "r", "phase": phase, "updated": updated, "dryRun": False,
            "steps": [{"kind": "Cordon", "phase": "Succeeded"}, {"kind": "RestartGang", "phase": restart_phase}]}  # fmt: skip


def test_during_a_gang_restart_new_pods_tolerate_spares_and_get_the_resume_pointer() -> None:
    mon = copy.deepcopy(MONITOR)
    mon["spec"]["workloadRef"] = {"kind": "Job", "name": "llama-pretrain"}
    mon["status"] = {"remediations": [restart_record("InProgress", "Succeeded", "2026-12-01T03:00:00Z")]}
    changes = admit(
        copy.deepcopy(POD),
        monitors_in=lambda ns: [copy.deepcopy(mon)],
        post_event=lambda *a: None,
        receiver_url="u",
        sidecar_image="i",
        native_sidecar=True,
        resume_pointer=lambda m: '{"step": 1000, "path": "/ckpt/1000"}',
        clock=lambda: 1_800_000_000.0,
    )
    assert {"key": "trainguard.io/spare", "operator": "Exists", "effect": "NoSchedule"} in changes["spec"][
        "tolerations"
    ]
    env = {e["name"]: e.get("value") for e in changes["spec"]["initContainers"][-1]["env"]}
    assert env["TRAINGUARD_RESUME_FROM"] == '{"step": 1000, "path": "/ckpt/1000"}'


def test_without_a_restart_no_spare_and_no_pointer() -> None:
    now = 1_800_000_000.0
    old = restart_record(
        "Succeeded", "Succeeded", "2027-01-15T07:00:00Z"
    )  # long finished: > 10 minutes before now
    for records in ([], [old], [restart_record("InProgress", "Planned", "2027-01-15T08:00:00Z")]):
        mon = copy.deepcopy(MONITOR) | {"status": {"remediations": records}}
        changes = admit(copy.deepcopy(POD), monitors_in=lambda ns, m=mon: [copy.deepcopy(m)],
                        post_event=lambda *a: None, receiver_url="u", sidecar_image="i", native_sidecar=True,
                        resume_pointer=lambda m: "never asked", clock=lambda: now)  # fmt: skip
        assert "tolerations" not in changes["spec"], records
        env = {e["name"] for e in changes["spec"]["initContainers"][-1]["env"]}
        assert "TRAINGUARD_RESUME_FROM" not in env
