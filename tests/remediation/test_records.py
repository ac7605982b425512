"""Remediation records: the shape the CRD accepts, phases derived from the steps, resuming after a crash,
and a bounded list that never drops an unfinished record."""

from __future__ import annotations

import copy
import json
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import monitor
from trainguard.api.monitor import (
    RemediationPhase,
    RemediationRecord,
    RemediationStepKind,
    TrainingJobMonitorStatus,
)
from trainguard.catalog.events import fingerprint
from trainguard.remediation import records
from trainguard.remediation.model import ClusterState, Phase, Plan, Signal, Source, Step, StepKind
from trainguard.remediation.plan import plan
from trainguard.remediation.records import (
    RECORD_LIMIT,
    TooManyUnfinished,
    find,
    mark,
    new_record,
    next_step,
    with_record,
)
from trainguard.times import rfc3339, unix

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000.0


def node_fault_plan(record_id: str = "abc-1", *, dry_run: bool = False, fingerprint: str = "abc") -> Plan:
    node = {"node": "gpu-a", "reason": "GPULost"}
    return Plan(
        record_id=record_id,
        fingerprint=fingerprint,
        alert="GPULost",
        p0_class="nodeFault",
        steps=(
            Step(StepKind.REQUEST_CHECKPOINT, {"kind": "full", "timeout_s": "300", "avoid": "gpu-a"}),
            Step(StepKind.CORDON, node),
            Step(StepKind.TAINT, node),
            Step(StepKind.RESTART_GANG, {"from": "newest-good-checkpoint", "avoid": "gpu-a"}),
            Step(StepKind.CONFIRM_PLACEMENT, {"avoid": "gpu-a"}),
        ),
        node="gpu-a",
        gpu="3",
        dry_run=dry_run,
    )


def skipped_plan(record_id: str = "s-1", *, notify: bool = False) -> Plan:
    reason = "cordon cap reached: 1 node(s) cordoned by trainguard in the last 10m (cap 1)"
    steps = (Step(StepKind.NOTIFY, {"reason": reason}),) if notify else ()
    return Plan(record_id, "s", "GPULost", "nodeFault", steps, node="gpu-b", skipped=reason)


def done(record: dict[str, Any], at: float = T0 + 10) -> dict[str, Any]:
    for i in range(len(record["steps"])):
        record = mark(record, i, Phase.SUCCEEDED, "ok", at)
    return record


# ---- shape ------------------------------------------------------------------------------------------


def test_new_record_has_the_documented_shape() -> None:
    rec = new_record(node_fault_plan(), T0)
    assert set(rec) == {
        "id",
        "fingerprint",
        "alert",
        "class",
        "node",
        "gpu",
        "dryRun",
        "phase",
        "skipped",
        "message",
        "created",
        "updated",
        "steps",
    }
    assert rec["phase"] == "Planned" and rec["class"] == "nodeFault" and rec["dryRun"] is False
    assert rec["created"] == rec["updated"] == "2023-11-14T22:13:20.000Z"
    assert [s["kind"] for s in rec["steps"]] == [
        "RequestCheckpoint",
        "Cordon",
        "Taint",
        "RestartGang",
        "ConfirmPlacement",
    ]
    assert all(s["phase"] == "Planned" and s["detail"] == "" for s in rec["steps"])
    assert rec["steps"][1]["params"] == {"node": "gpu-a", "reason": "GPULost"}


def test_records_are_plain_json() -> None:
    rec = mark(new_record(node_fault_plan(), T0), 0, Phase.IN_PROGRESS, "asked 7 ranks", T0 + 1)
    assert json.loads(json.dumps(rec)) == rec
    assert all(type(s["phase"]) is str and type(s["kind"]) is str for s in rec["steps"])
    assert type(rec["phase"]) is str


def every_stage() -> list[dict[str, Any]]:
    rec = new_record(node_fault_plan(), T0)
    out = [rec, new_record(node_fault_plan(dry_run=True), T0), new_record(skipped_plan(), T0)]
    for i in range(5):
        rec = mark(rec, i, Phase.IN_PROGRESS, "", T0 + i)
        out.append(rec)
        rec = mark(rec, i, Phase.SUCCEEDED, f"step {i} done", T0 + i + 0.5)
        out.append(rec)
    out.append(mark(new_record(node_fault_plan(), T0), 0, Phase.FAILED, "x" * 10_000, T0 + 1))
    out.append(done(new_record(skipped_plan(notify=True), T0)))
    signed = records.claimed(
        records.sign(new_record(node_fault_plan(), T0), b"s" * 48, "ml", "job", "u-1"), "a" * 128
    )
    out += [
        signed,
        records.skip_rest(signed, "y" * 10_000, T0 + 1),
        records.refused(signed, "refused", T0 + 1),
    ]
    return out


def test_every_record_validates_against_the_model() -> None:
    for rec in every_stage():
        parsed = RemediationRecord.model_validate(rec)
        assert parsed.model_dump(by_alias=True, exclude_none=True) == rec


def test_every_record_validates_against_the_committed_crd_schema() -> None:
    """What the apiserver checks on a status write: the generated structural schema of one record."""
    crd = yaml.safe_load((ROOT / "crds" / "trainguard.io_trainingjobmonitors.yaml").read_text())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    schema = status["properties"]["remediations"]["items"]
    for rec in every_stage():
        assert conforms(rec, schema) == [], rec["phase"]
    bad = new_record(node_fault_plan(), T0) | {"class": "x" * 40}
    assert conforms(bad, schema) == [".class: longer than 32"]


def conforms(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """A small checker of the structural-schema keywords trainguard's CRDs use."""
    kind = schema.get("type")
    types = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int}
    if kind and not isinstance(value, types[kind]):
        return [f"{path}: not {kind}"]
    out: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{path}: {value!r} not in enum")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        out.append(f"{path}: longer than {schema['maxLength']}")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        out.append(f"{path}: more than {schema['maxItems']} items")
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        out.append(f"{path}: more than {schema['maxProperties']} properties")
    if kind == "object":
        props = schema.get("properties")
        out += [f"{path}.{k}: required" for k in schema.get("required", []) if k not in value]
        for k, v in value.items():
            if props is not None:
                if k not in props:
                    out.append(f"{path}.{k}: unknown field (pruned)")
                else:
                    out += conforms(v, props[k], f"{path}.{k}")
            elif "additionalProperties" in schema:
                out += conforms(v, schema["additionalProperties"], f"{path}.{k}")
    if kind == "array":
        for i, item in enumerate(value):
            out += conforms(item, schema["items"], f"{path}[{i}]")
    return out


def test_status_holds_fifty_records_and_not_more() -> None:
    records: list[dict[str, Any]] = []
    for i in range(RECORD_LIMIT):
        records = with_record(records, done(new_record(node_fault_plan(f"r-{i}"), T0 + i)))
    status = TrainingJobMonitorStatus.model_validate({"remediations": records})
    assert len(status.remediations) == 50
    with pytest.raises(ValueError, match="at most 50"):
        TrainingJobMonitorStatus.model_validate({"remediations": [*records, records[0]]})


def test_record_limit_is_the_status_bound() -> None:
    field = TrainingJobMonitorStatus.model_fields["remediations"]
    assert any(getattr(m, "max_length", None) == RECORD_LIMIT for m in field.metadata)


def test_api_literals_match_the_remediation_vocabulary() -> None:
    assert list(typing.get_args(RemediationStepKind)) == [k.value for k in StepKind]
    assert set(typing.get_args(RemediationPhase)) == {p.value for p in Phase}


def test_long_texts_are_clipped_to_the_schema() -> None:
    long_reason = "why " * 1000
    p = Plan(
        "id-1",
        "f",
        "GPULost",
        "nodeFault",
        (Step(StepKind.NOTIFY, {"reason": long_reason}),),
        skipped=long_reason,
    )
    rec = new_record(p, T0)
    RemediationRecord.model_validate(rec)
    assert rec["skipped"].endswith("...") and len(rec["message"]) == 1024
    assert len(rec["steps"][0]["params"]["reason"]) == 256


def test_too_many_steps_is_refused() -> None:
    p = Plan("id-1", "f", "GPULost", "nodeFault", tuple(Step(StepKind.NOTIFY) for _ in range(17)))
    with pytest.raises(ValueError, match="at most 16"):
        new_record(p, T0)


def test_times_round_trip() -> None:
    assert unix(rfc3339(T0 + 0.25)) == T0 + 0.25
    assert unix("2023-11-14T22:13:20Z") == T0
    assert unix("2023-11-15T00:13:20+02:00") == T0
    assert unix("yesterday") == 0.0


# ---- phases -----------------------------------------------------------------------------------------


def test_phases_move_planned_in_progress_succeeded() -> None:
    rec = new_record(node_fault_plan(), T0)
    assert rec["phase"] == "Planned"
    rec = mark(rec, 0, Phase.IN_PROGRESS, "asked 7 ranks", T0 + 1)
    assert rec["phase"] == "InProgress" and rec["updated"] == rfc3339(T0 + 1)
    rec = mark(rec, 0, Phase.SUCCEEDED, "step 1200 saved", T0 + 2)
    assert rec["phase"] == "InProgress"
    assert rec["steps"][0] | {} == {
        "kind": "RequestCheckpoint",
        "params": {"kind": "full", "timeout_s": "300", "avoid": "gpu-a"},
        "phase": "Succeeded",
        "detail": "step 1200 saved",
        "time": rfc3339(T0 + 2),
    }
    rec = done(rec, T0 + 3)
    assert rec["phase"] == "Succeeded" and rec["created"] == rfc3339(T0)


def test_a_skipped_step_counts_as_done() -> None:
    rec = new_record(node_fault_plan(), T0)
    rec = mark(rec, 0, Phase.SKIPPED, "no healthy rank answered in 300s; newest checkpoint step 1100", T0 + 1)
    assert rec["phase"] == "InProgress" and next_step(rec) == 1
    rec = done(rec)
    assert rec["phase"] == "Succeeded"


def test_a_failed_step_fails_the_record_and_ends_it() -> None:
    rec = mark(new_record(node_fault_plan(), T0), 0, Phase.SUCCEEDED, "ok", T0 + 1)
    rec = mark(rec, 1, Phase.FAILED, "node gpu-a not found", T0 + 2)
    assert rec["phase"] == "Failed" and rec["message"] == "Cordon failed: node gpu-a not found"
    assert next_step(rec) is None
    with pytest.raises(ValueError, match="Failed"):
        mark(rec, 2, Phase.SUCCEEDED, "", T0 + 3)


def test_a_skipped_plan_with_a_notice_ends_skipped_once_sent() -> None:
    rec = new_record(skipped_plan(notify=True), T0)
    assert rec["phase"] == "Planned" and next_step(rec) == 0
    assert rec["message"] == rec["skipped"]
    rec = mark(rec, 0, Phase.SUCCEEDED, "posted to Alertmanager", T0 + 1)
    assert rec["phase"] == "Skipped" and next_step(rec) is None


def test_a_skipped_plan_without_steps_is_finished_at_once() -> None:
    rec = new_record(skipped_plan(), T0)
    assert rec["phase"] == "Skipped" and rec["steps"] == [] and next_step(rec) is None


def test_a_dry_run_is_recorded_in_full_and_never_carried_out() -> None:
    rec = new_record(node_fault_plan(dry_run=True), T0)
    assert rec["phase"] == "DryRun" and rec["dryRun"] is True
    assert len(rec["steps"]) == 5 and {s["phase"] for s in rec["steps"]} == {"DryRun"}
    assert next_step(rec) is None
    with pytest.raises(ValueError):
        mark(rec, 0, Phase.IN_PROGRESS, "", T0 + 1)


def test_mark_refuses_planned_or_dry_run_and_unknown_steps() -> None:
    rec = new_record(node_fault_plan(), T0)
    for phase in (Phase.PLANNED, Phase.DRY_RUN, "Done"):
        with pytest.raises(ValueError):
            mark(rec, 0, phase, "", T0)
    with pytest.raises(IndexError):
        mark(rec, 5, Phase.SUCCEEDED, "", T0)


def test_mark_and_with_record_leave_their_inputs_alone() -> None:
    rec = new_record(node_fault_plan(), T0)
    before = copy.deepcopy(rec)
    mark(rec, 0, Phase.SUCCEEDED, "ok", T0 + 1)
    records = [rec]
    with_record(records, rec | {"phase": "Succeeded"})
    assert rec == before and records == [before]


# ---- resuming ---------------------------------------------------------------------------------------


def test_next_step_resumes_after_a_crash_in_the_middle() -> None:
    """The operator died after cordoning, while tainting: the record read back from status resumes at
    the taint (left InProgress: the executor makes it again, idempotently), never at the checkpoint or
    the cordon already done."""
    rec = new_record(node_fault_plan(), T0)
    assert next_step(rec) == 0
    rec = mark(rec, 0, Phase.SUCCEEDED, "step 1200", T0 + 1)
    rec = mark(rec, 1, Phase.SUCCEEDED, "cordoned", T0 + 2)
    rec = mark(rec, 2, Phase.IN_PROGRESS, "", T0 + 3)
    status = TrainingJobMonitorStatus.model_validate({"remediations": [rec]}).model_dump(
        by_alias=True, exclude_none=True
    )
    restored = status["remediations"][0]
    assert next_step(restored) == 2
    restored = mark(restored, 2, Phase.SUCCEEDED, "tainted", T0 + 10)
    assert next_step(restored) == 3
    assert [s["phase"] for s in restored["steps"]] == [
        "Succeeded",
        "Succeeded",
        "Succeeded",
        "Planned",
        "Planned",
    ]


def test_next_step_is_none_when_finished() -> None:
    assert next_step(done(new_record(node_fault_plan(), T0))) is None


# ---- the bounded list -------------------------------------------------------------------------------


def test_with_record_replaces_by_id_in_place_or_appends() -> None:
    a, b = new_record(node_fault_plan("a"), T0), new_record(node_fault_plan("b"), T0 + 1)
    records = with_record(with_record([], a), b)
    assert [r["id"] for r in records] == ["a", "b"]
    a2 = mark(a, 0, Phase.IN_PROGRESS, "", T0 + 2)
    records = with_record(records, a2)
    assert [r["id"] for r in records] == ["a", "b"] and records[0]["phase"] == "InProgress"


def test_bounded_list_drops_the_oldest_finished_and_keeps_unfinished() -> None:
    unfinished = new_record(node_fault_plan("oldest-unfinished"), T0)
    records = [unfinished, *(done(new_record(node_fault_plan(f"f{i}"), T0 + i)) for i in range(1, 5))]
    out = with_record(records, new_record(node_fault_plan("new"), T0 + 9), limit=4)
    assert [r["id"] for r in out] == ["oldest-unfinished", "f3", "f4", "new"]
    assert out[0] == unfinished


def test_bounded_list_of_fifty_by_default() -> None:
    records: list[dict[str, Any]] = []
    for i in range(60):
        records = with_record(records, done(new_record(node_fault_plan(f"r{i}"), T0 + i)))
    assert len(records) == 50 and records[0]["id"] == "r10" and records[-1]["id"] == "r59"


def test_bounded_list_refuses_to_drop_an_unfinished_record() -> None:
    records = [new_record(node_fault_plan(f"u{i}"), T0 + i) for i in range(3)]
    with pytest.raises(TooManyUnfinished):
        with_record(records, new_record(node_fault_plan("u3"), T0 + 3), limit=3)


def test_find_returns_the_newest_record_of_a_fingerprint() -> None:
    old = done(new_record(node_fault_plan("x-1"), T0))
    new = new_record(node_fault_plan("x-2"), T0 + 99)
    other = new_record(node_fault_plan("y-1", fingerprint="other"), T0)
    assert find([old, other, new], "abc") == new
    assert find([other], "abc") is None


def test_a_record_from_the_planner_round_trips_through_status() -> None:
    labels = {"alertname": "GPULost", "severity": "P0", "namespace": "ml", "training_job": "llama-pretrain"}
    labels |= {"node": "gpu-a", "gpu": "1"}
    sig = Signal("GPULost", "P0", labels, fingerprint(labels), Source.SIDECAR, T0)
    rec = new_record(
        plan(sig, monitor(), ClusterState(now=T0, gpu_nodes=8, job_nodes=frozenset({"gpu-a", "gpu-b"}))), T0
    )
    status = TrainingJobMonitorStatus.model_validate({"remediations": [rec]})
    assert status.model_dump(by_alias=True, exclude_none=True)["remediations"] == [rec]


# ---- the operator's signature, claims and stopping ------------------------------------------------------

SIGN_KEY = b"s" * 48
UID = "u-1"


def signed_by_operator(record: dict[str, Any]) -> dict[str, Any]:
    return records.sign(record, SIGN_KEY, "ml", "job", UID)


def checks(record: dict[str, Any]) -> bool:
    return records.signed(record, SIGN_KEY, "ml", "job", UID)


def through_the_apiserver(record: dict[str, Any]) -> dict[str, Any]:
    """The record as the apiserver hands it back: JSON, a whole float as an integer (Go writes float64
    1000 as 1000), an absent field with a default in the CRD's schema filled in."""

    def whole(value: Any) -> Any:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, dict):
            return {k: whole(v) for k, v in value.items()}
        if isinstance(value, list):
            return [whole(v) for v in value]
        return value

    out = {"node": "", "gpu": "", "dryRun": False, "skipped": "", "message": ""} | whole(
        json.loads(json.dumps(record))
    )
    for step in out["steps"]:
        step.setdefault("params", {})
        step.setdefault("detail", "")
    return out


def test_a_signature_covers_where_the_record_stands_and_each_save_is_signed_again() -> None:
    """Every state the executor writes is signed again: a state moved on by someone else does not check."""
    rec = signed_by_operator(new_record(node_fault_plan(), T0))
    moved = records.claimed(mark(rec, 0, Phase.IN_PROGRESS, "asking", T0 + 1, progress={"asked": 2}), "me")
    assert checks(rec) and not checks(moved), "moved on without the operator's signature"
    assert checks(signed_by_operator(moved))
    assert checks(signed_by_operator(records.skip_rest(moved, "disabled", T0 + 2)))


def test_a_signature_holds_through_the_apiserver_and_over_the_texts_for_people() -> None:
    rec = mark(new_record(node_fault_plan(), T0), 0, Phase.IN_PROGRESS, "asking", T0 + 1,
               progress={"asked": 2, "pastStep": 1000.0})  # fmt: skip
    rec = signed_by_operator(rec)
    back = through_the_apiserver(rec)
    assert back["steps"][0]["progress"] == {"asked": 2, "pastStep": 1000} and checks(back)
    back["message"], back["steps"][0]["detail"], back["steps"][0]["time"] = "reworded", "reworded", "x"
    assert checks(back), "the texts for people are not what the executor acts on"


@pytest.mark.parametrize(
    "alter",
    [
        lambda r: r.update(node="gpu-z"),
        lambda r: r.update(dryRun=True),
        lambda r: r.update(created="2020-01-01T00:00:00.000Z"),
        lambda r: r["steps"][1]["params"].update(node="gpu-z"),
        lambda r: r["steps"].append({"kind": "Cordon", "params": {"node": "gpu-z"}, "phase": "Planned"}),
        lambda r: r["steps"].pop(),
        lambda r: r.update(signature=r["signature"][:-2] + "AA"),
        lambda r: r.pop("signature"),
        lambda r: r.update(phase=Phase.PLANNED),
        lambda r: r["steps"][0].update(phase=Phase.SUCCEEDED),
        lambda r: r["steps"][1].update(phase=Phase.SKIPPED),
        lambda r: r["steps"][0]["progress"].update(asked=1),
        lambda r: r["steps"][0].pop("progress"),
        lambda r: r.update(updated=rfc3339(T0 + 3600)),
        lambda r: r.update(owner="someone-else"),
        lambda r: r.update(skipped="disabled"),
    ],
    ids=[
        "node",
        "dry-run",
        "created",
        "param",
        "step-added",
        "step-dropped",
        "signature",
        "no-signature",
        "phase-reset",
        "step-marked-done",
        "step-skipped",
        "progress",
        "progress-dropped",
        "updated",
        "owner",
        "skipped",
    ],
)
def test_any_change_to_what_a_record_orders_or_where_it_stands_breaks_its_signature(alter: Any) -> None:
    rec = mark(
        new_record(node_fault_plan(), T0), 0, Phase.IN_PROGRESS, "asking", T0 + 1, progress={"asked": 2}
    )
    rec = signed_by_operator(records.claimed(rec, "me"))
    assert checks(rec)
    altered = copy.deepcopy(rec)
    alter(altered)
    assert not checks(altered)


def test_a_signature_is_the_monitor_objects_and_the_keys() -> None:
    rec = signed_by_operator(new_record(node_fault_plan(), T0))
    assert not records.signed(rec, SIGN_KEY, "ml", "other-job", UID)
    assert not records.signed(rec, SIGN_KEY, "other-ns", "job", UID)
    assert not records.signed(rec, SIGN_KEY, "ml", "job", "u-2"), "a monitor created again under its name"
    assert not records.signed(rec, b"t" * 48, "ml", "job", UID)
    assert not checks(new_record(node_fault_plan(), T0)), "unsigned"


# ---- replays ----------------------------------------------------------------------------------------


def test_an_unfinished_record_is_stale_once_the_operator_last_wrote_it_longer_ago_than_the_window() -> None:
    planned = new_record(node_fault_plan(), T0)
    assert records.stale(planned, T0 + records.RESUME_WINDOW_S) == ""
    why = records.stale(planned, T0 + records.RESUME_WINDOW_S + 1)
    assert why.startswith(
        "refused as stale: the operator last wrote this record 901s ago, more than the 900s"
    )
    moved = mark(planned, 0, Phase.SUCCEEDED, "", T0 + 600)
    assert records.stale(moved, T0 + 600 + records.RESUME_WINDOW_S) == "", (
        "from its last write, not its creation"
    )
    assert records.stale(done(planned), T0 + 10**6) == "", "a finished record has nothing left to run"


def test_a_record_stopped_in_a_step_that_waits_may_be_older_by_that_wait() -> None:
    """RequestCheckpoint waits up to its signed timeout_s (300 s here) without a save: an operator killed
    at the end of that wait left the record that much older."""
    asking = mark(new_record(node_fault_plan(), T0), 0, Phase.IN_PROGRESS, "asking", T0)
    assert records.stale(asking, T0 + records.RESUME_WINDOW_S + 300) == ""
    assert records.stale(asking, T0 + records.RESUME_WINDOW_S + 301).startswith("refused as stale")
    next_one = mark(mark(asking, 0, Phase.SUCCEEDED, "", T0), 1, Phase.IN_PROGRESS, "", T0)
    assert records.stale(next_one, T0 + records.RESUME_WINDOW_S + 1).startswith("refused as stale")


def test_a_finished_record_is_remembered_until_every_earlier_state_of_it_is_stale() -> None:
    finished = done(new_record(node_fault_plan(), T0), at=T0 + 100)
    assert records.horizon(finished) == T0 + 100 + records.RESUME_WINDOW_S + 300
    earliest = new_record(node_fault_plan(), T0)
    assert records.stale(earliest, records.horizon(finished) + 1)


def test_a_record_planned_again_for_the_same_alert_is_another_record() -> None:
    first = new_record(node_fault_plan(dry_run=True), T0)
    again = new_record(node_fault_plan(), T0 + 60)
    assert first["id"] == again["id"] and records.identity(first) != records.identity(again)
    assert records.identity(mark(again, 0, Phase.IN_PROGRESS, "", T0 + 61)) == records.identity(again)


def test_skip_rest_skips_what_is_not_done_and_says_why() -> None:
    rec = mark(
        mark(new_record(node_fault_plan(), T0), 0, Phase.SUCCEEDED, "ok", T0 + 1),
        1,
        Phase.IN_PROGRESS,
        "",
        T0 + 2,
    )
    out = records.skip_rest(rec, "disabled", T0 + 3)
    assert out["phase"] == Phase.SKIPPED and out["message"] == "disabled"
    assert out["steps"][0]["phase"] == Phase.SUCCEEDED
    assert {s["phase"] for s in out["steps"][1:]} == {Phase.SKIPPED}
    assert records.next_step(out) is None
    refused = records.refused(new_record(node_fault_plan(), T0), "refused: unsigned", T0)
    assert refused["phase"] == Phase.FAILED and records.is_finished(refused)


def test_two_copies_are_the_same_only_at_the_same_point_and_owner() -> None:
    rec = new_record(node_fault_plan(), T0)
    assert records.same(rec, copy.deepcopy(rec)) and records.same(rec, {**rec, "extra": 1})
    assert not records.same(rec, records.claimed(rec, "me"))
    assert not records.same(records.claimed(rec, "a"), records.claimed(rec, "b")), "even in the same instant"
    assert not records.same(rec, mark(rec, 0, Phase.IN_PROGRESS, "", T0))
    assert not records.same(rec, None) and records.same(None, None)
