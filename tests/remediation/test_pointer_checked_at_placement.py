"""ConfirmPlacement checks that every new pod of a restart was given the restart's resume-from pointer.
The webhook gives it from its cache of the monitor's status, which can lag: an OOM-killed rank's Job
may make the replacement between RestartGang's read of the gang and the moment its progress reaches that
cache (seen in e2e/test_pipeline.py on a loaded CI machine: rank 0 started from fresh weights). Such a
pod is deleted at sight and not counted placed; its owner's next one carries the pointer.
(executor.py on tests/remediation/fakes.py's FakeCluster; `without_pointer` is pure.)"""

from __future__ import annotations

import json
from typing import Any

from tests.remediation.fakes import CKPT_STEP, Rig, job_monitor
from tests.remediation.test_executor import restart_record
from trainguard.catalog.kubernetes import RESUME_FROM
from trainguard.remediation.executor import without_pointer
from trainguard.remediation.model import Phase
from trainguard.render.sidecar import INJECTED

CHECKPOINT = {"step": 1000, "path": "/ckpt/1000", "kind": "full", "ts": 5.0}


def lost_rank_replaced_early(rig: Rig) -> list[str]:
    """job-0 OOM-killed (Failed); its Job makes the replacement right after the restart read the gang,
    admitted by a webhook that has not seen the restart's progress. Returns the pods given no pointer."""
    rig.cluster.pods["job-0"]["phase"] = "Failed"
    read, webhook = rig.cluster.gang_pods, rig.cluster.admitted_pointer
    stale = [True]
    unpointed: list[str] = []

    def gang_pods(namespace: str, selector: str) -> list[dict[str, Any]]:
        pods = read(namespace, selector)
        if stale[0]:
            rig.cluster.replace_failed("job-0")
            stale[0] = False
        return pods

    def admitted() -> str | None:
        pointer = None if stale[0] else webhook()
        if pointer is None:
            unpointed.append(f"job-?-r{rig.cluster.generation}")
        return pointer

    rig.cluster.gang_pods = gang_pods  # type: ignore[method-assign]
    rig.cluster.admitted_pointer = admitted
    return unpointed


def test_a_replacement_admitted_before_the_pointer_is_deleted_and_recreated_with_it() -> None:
    rig = Rig()
    unpointed = lost_rank_replaced_early(rig)
    done = rig.run(restart_record(), job_monitor())

    assert done["phase"] == Phase.SUCCEEDED, done
    assert unpointed == ["job-?-r1"], "the Job's first replacement of rank 0 was admitted without it"
    deleted = [e[1] for e in rig.cluster.effects if e[0] == "delete"]
    assert deleted == ["job-1", "job-0-r1"], "the live rank by the restart, the pointerless one at placement"
    placed = done["steps"][1]["detail"]
    assert placed.startswith("placed job-0-r3->") and ", job-1-r2->" in placed, placed
    assert "deleted job-0-r1: admitted without the restart's resume-from" in placed, placed
    live = [p for p, s in rig.cluster.pods.items() if not s["terminating"] and not s.get("phase")]
    assert sorted(live) == ["job-0-r3", "job-1-r2"]
    assert {rig.cluster.sidecar[p]["resume_from"]["step"] for p in live} == {CKPT_STEP}, (
        "no rank of the new gang starts from fresh weights"
    )


def test_a_deleted_pod_the_cache_still_shows_live_is_not_counted_placed() -> None:
    """The pod cache learns of the deletion a moment later: until then the pod looks live and scheduled,
    and counting it would confirm the placement and clear the pointer before its replacement came."""
    rig = Rig()
    lost_rank_replaced_early(rig)
    read = rig.cluster.gang_pods
    lagging = 3
    ghost: dict[str, Any] = {}

    def cache(namespace: str, selector: str) -> list[dict[str, Any]]:
        nonlocal lagging
        pods = read(namespace, selector)
        seen = next((p for p in pods if p["metadata"]["name"] == "job-0-r1"), None)
        if seen is not None and "deletionTimestamp" not in seen["metadata"]:
            ghost.update(seen, spec={"nodeName": "gpu-a"}, status={"phase": "Running"})
        elif ghost and lagging:  # deleted (or gone): the cache still holds it as it was, running
            lagging -= 1
            pods = [p for p in pods if p["metadata"]["name"] != "job-0-r1"] + [ghost]
        return pods

    rig.cluster.gang_pods = cache  # type: ignore[method-assign]
    done = rig.run(restart_record(), job_monitor())

    assert done["phase"] == Phase.SUCCEEDED, done
    assert lagging < 3, "the cache showed the deleted pod live to the placement"
    placed = done["steps"][1]["detail"]
    assert "job-0-r1->" not in placed and placed.startswith("placed job-0-r3->"), placed
    assert [e[1] for e in rig.cluster.effects if e[0] == "delete"].count("job-0-r1") == 1, "deleted once"


def test_without_a_checkpoint_chosen_no_new_pod_is_judged() -> None:
    rig = Rig()
    for sidecar in rig.cluster.sidecar.values():  # no rank reports a checkpoint: the restart names none
        sidecar["checkpoints"], sidecar["resume_from"], sidecar["newest"] = [], None, None
    lost_rank_replaced_early(rig)
    done = rig.run(restart_record(), job_monitor())

    assert done["phase"] == Phase.SUCCEEDED, done
    assert done["steps"][0]["progress"]["resumeFrom"] == "null"
    assert [e[1] for e in rig.cluster.effects if e[0] == "delete"] == ["job-1"]


# ---- without_pointer: which new pods lack the pointer ----------------------------------------------


def pod(
    name: str, created: str = "2026-12-04T12:00:10Z", pointer: Any = CHECKPOINT, **extra: Any
) -> dict[str, Any]:
    annotations: dict[str, str] = {INJECTED: "llama"}
    if pointer is not None:
        annotations[RESUME_FROM] = pointer if isinstance(pointer, str) else json.dumps(pointer)
    meta: dict[str, Any] = {"name": name, "uid": f"{name}-uid", "creationTimestamp": created,
                            "annotations": annotations}  # fmt: skip
    meta.update(extra.pop("meta", {}))
    return {"metadata": meta, "spec": {}, "status": extra.pop("status", {"phase": "Pending"})}


RECORD_CREATED = 1796385610.4  # 2026-12-04T12:00:10.4Z


def test_which_new_pods_lack_the_pointer() -> None:
    rejoin = {**CHECKPOINT, "generation": 2, "record": "r"}
    not_injected = pod("plain", pointer=None)
    not_injected["metadata"]["annotations"] = {}
    pods = [
        pod("given"),
        pod("given-with-generation", pointer=rejoin),
        pod("none", pointer=None),
        pod("other-step", pointer={**CHECKPOINT, "step": 900}),
        pod("other-path", pointer={**CHECKPOINT, "path": "/elsewhere"}),
        pod("garbled", pointer="{not json"),
        pod("same-second-as-the-record", created="2026-12-04T12:00:10Z", pointer=None),
        pod("old-gang", created="2026-12-04T12:00:09Z", pointer=None),
        pod("being-deleted", pointer=None, meta={"deletionTimestamp": "2026-12-04T12:00:11Z"}),
        pod("finished", pointer=None, status={"phase": "Failed"}),
        not_injected,
    ]
    assert without_pointer(pods, CHECKPOINT, RECORD_CREATED) == [
        ("none", "none-uid"),
        ("other-step", "other-step-uid"),
        ("other-path", "other-path-uid"),
        ("garbled", "garbled-uid"),
        ("same-second-as-the-record", "same-second-as-the-record-uid"),
    ]
