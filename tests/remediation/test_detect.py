"""What the operator detects for itself in the pods and Jobs, on objects as the apiserver returns them: a
training pod OOMKilled, failed or evicted, a failed Job (TrainingInterrupted), and which terminations are
history (an earlier gang's). Every case is read both as raw API JSON and as the kubernetes client gives
it back (datetimes re-serialised with "+00:00"), since the wiring may hand over either. Node down is in
test_node_down.py."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from tests.conftest import monitor as make_monitor
from trainguard.catalog.alerts import TRAINING_INTERRUPTED
from trainguard.catalog.events import fingerprint
from trainguard.catalog.severity import grade_labels
from trainguard.remediation.detect import interruptions
from trainguard.remediation.model import Signal, Source
from trainguard.remediation.plan import NO_RESPONSE, record_id, triage
from trainguard.remediation.signals import signal_fingerprint
from trainguard.times import parse_rfc3339

NOW = parse_rfc3339("2023-11-14T22:20:00Z")
JOB_LABELS = {"app": "llama-pretrain", "batch.kubernetes.io/job-name": "llama-pretrain"}
MONITOR = make_monitor(**{"spec.workloadRef": {"kind": "Job", "name": "llama-pretrain"}})

_API = client.ApiClient()


def via_client(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the wiring gets it from the kubernetes client: deserialised into its model, then
    `sanitize_for_serialization` (times as datetime.isoformat, unknown fields dropped)."""
    model = {"Pod": "V1Pod", "Job": "V1Job", "Node": "V1Node", "Lease": "V1Lease"}[obj["kind"]]
    api: Any = _API  # the client is untyped
    out: dict[str, Any] = api.sanitize_for_serialization(
        api.deserialize(json.dumps(obj), model, "application/json")
    )
    return out


FORMS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {"raw": copy.deepcopy, "client": via_client}


@pytest.fixture(params=sorted(FORMS))
def form(request: pytest.FixtureRequest) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return FORMS[request.param]


# ---- recorded objects (trimmed of managedFields and the long specs; status fields as returned) ----

EXPORTER_STATUS = {
    "containerID": "containerd://5b1e",
    "image": "ghcr.io/trainguard/trainguard:0.1.0",
    "imageID": "ghcr.io/trainguard/trainguard@sha256:9f1c",
    "lastState": {},
    "name": "trainguard-exporter",
    "ready": True,
    "restartCount": 0,
    "started": True,
    "state": {"running": {"startedAt": "2023-11-14T21:00:04Z"}},
}


def running_trainer() -> dict[str, Any]:
    return {
        "containerID": "containerd://8c2a",
        "image": "nvcr.io/nvidia/pytorch:23.10-py3",
        "imageID": "nvcr.io/nvidia/pytorch@sha256:41aa",
        "lastState": {},
        "name": "trainer",
        "ready": True,
        "restartCount": 0,
        "started": True,
        "state": {"running": {"startedAt": "2023-11-14T21:00:05Z"}},
    }


def pod(name: str, node: str, *, index: int = 0) -> dict[str, Any]:
    """A running pod of the Indexed Job, the exporter as a native sidecar (its status in
    initContainerStatuses) and, as on clusters before 1.29, also able to run as a regular container."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"0d6f7c1e-{index:04d}-4d1e-9d2b-1b2c3d4e5f60",
            "creationTimestamp": "2023-11-14T21:00:00Z",
            "labels": {**JOB_LABELS, "batch.kubernetes.io/job-completion-index": str(index)},
            "annotations": {"trainguard.io/injected": "true"},
            "finalizers": ["batch.kubernetes.io/job-tracking"],
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "llama-pretrain",
                    "uid": "7a3e2f10-5c4b-4a39-8e21-0f9d8c7b6a50",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [{"name": "trainer", "image": "nvcr.io/nvidia/pytorch:23.10-py3"}],
            "initContainers": [
                {
                    "name": "trainguard-exporter",
                    "image": "ghcr.io/trainguard/trainguard:0.1.0",
                    "restartPolicy": "Always",
                }
            ],
        },
        "status": {
            "phase": "Running",
            "hostIP": "10.0.0.11",
            "podIP": f"10.244.1.{10 + index}",
            "qosClass": "Burstable",
            "startTime": "2023-11-14T21:00:00Z",
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2023-11-14T21:00:04Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2023-11-14T21:00:06Z"},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": "2023-11-14T21:00:06Z"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2023-11-14T21:00:00Z"},
            ],
            "initContainerStatuses": [copy.deepcopy(EXPORTER_STATUS)],
            "containerStatuses": [running_trainer()],
        },
    }


def not_ready(p: dict[str, Any], at: str) -> None:
    for c in p["status"]["conditions"]:
        if c["type"] in ("Ready", "ContainersReady"):
            c.update(status="False", reason="PodFailed", lastTransitionTime=at)


def oom_killed() -> dict[str, Any]:
    """restartPolicy Never: the trainer OOMKilled, the pod Failed (the native sidecar is stopped)."""
    p = pod("llama-pretrain-0-x7k2p", "gpu-a")
    p["status"]["phase"] = "Failed"
    p["status"]["containerStatuses"][0].update(
        ready=False,
        started=False,
        state={
            "terminated": {
                "containerID": "containerd://8c2a",
                "exitCode": 137,
                "reason": "OOMKilled",
                "startedAt": "2023-11-14T21:00:05Z",
                "finishedAt": "2023-11-14T22:14:07Z",
            }
        },
    )
    p["status"]["initContainerStatuses"][0].update(
        ready=False,
        state={
            "terminated": {
                "exitCode": 0,
                "reason": "Completed",
                "startedAt": "2023-11-14T21:00:04Z",
                "finishedAt": "2023-11-14T22:14:09Z",
            }
        },
    )
    not_ready(p, "2023-11-14T22:14:09Z")
    return p


def exited_1() -> dict[str, Any]:
    p = pod("llama-pretrain-1-q9z4m", "gpu-b", index=1)
    p["status"]["phase"] = "Failed"
    p["status"]["containerStatuses"][0].update(
        ready=False,
        started=False,
        state={
            "terminated": {
                "containerID": "containerd://8c2a",
                "exitCode": 1,
                "reason": "Error",
                "startedAt": "2023-11-14T21:00:05Z",
                "finishedAt": "2023-11-14T22:15:31Z",
            }
        },
    )
    not_ready(p, "2023-11-14T22:15:32Z")
    return p


def evicted() -> dict[str, Any]:
    """Node-pressure eviction by the kubelet (1.27+: a DisruptionTarget condition, the containers
    killed with 137)."""
    p = pod("llama-pretrain-0-x7k2p", "gpu-a")
    p["status"].update(
        phase="Failed",
        reason="Evicted",
        message="The node was low on resource: memory. Threshold quantity: 100Mi, available: 91260Ki. "
        "Container trainer was using 503Gi, request is 480Gi, has larger consumption of memory. ",
    )
    p["status"]["conditions"].insert(
        0,
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "TerminationByKubelet",
            "message": "The node was low on resource: memory.",
            "lastTransitionTime": "2023-11-14T22:16:00Z",
        },
    )
    p["status"]["containerStatuses"][0].update(
        ready=False,
        started=False,
        state={
            "terminated": {
                "exitCode": 137,
                "reason": "Error",
                "startedAt": "2023-11-14T21:00:05Z",
                "finishedAt": "2023-11-14T22:16:02Z",
            }
        },
    )
    not_ready(p, "2023-11-14T22:16:02Z")
    return p


def succeeded() -> dict[str, Any]:
    p = pod("llama-pretrain-0-x7k2p", "gpu-a")
    p["status"]["phase"] = "Succeeded"
    p["status"]["containerStatuses"][0].update(
        ready=False,
        started=False,
        state={
            "terminated": {
                "exitCode": 0,
                "reason": "Completed",
                "startedAt": "2023-11-14T21:00:05Z",
                "finishedAt": "2023-11-14T22:10:00Z",
            }
        },
    )
    return p


def deleting() -> dict[str, Any]:
    """A pod of trainguard's gang restart on its way out: the trainer took SIGTERM and exited 143,
    the object stays until the Job controller removes its tracking finalizer."""
    p = exited_1()
    p["metadata"]["deletionTimestamp"] = "2023-11-14T22:17:30Z"
    p["metadata"]["deletionGracePeriodSeconds"] = 30
    p["status"]["containerStatuses"][0]["state"]["terminated"].update(
        exitCode=143, finishedAt="2023-11-14T22:17:31Z"
    )
    return p


def restarted_in_place() -> dict[str, Any]:
    """restartPolicy OnFailure: the kubelet restarted the OOMKilled trainer; the kill is in lastState."""
    p = pod("llama-pretrain-1-q9z4m", "gpu-b", index=1)
    p["spec"]["restartPolicy"] = "OnFailure"
    p["status"]["containerStatuses"][0].update(
        restartCount=1,
        lastState={
            "terminated": {
                "containerID": "containerd://77aa",
                "exitCode": 137,
                "reason": "OOMKilled",
                "startedAt": "2023-11-14T21:00:05Z",
                "finishedAt": "2023-11-14T22:18:40Z",
            }
        },
        state={"running": {"startedAt": "2023-11-14T22:18:41Z"}},
    )
    return p


def exporter_oom_killed() -> dict[str, Any]:
    """The sidecar was OOMKilled and restarted; training carries on."""
    p = pod("llama-pretrain-0-x7k2p", "gpu-a")
    p["status"]["initContainerStatuses"][0].update(
        restartCount=1,
        lastState={
            "terminated": {
                "exitCode": 137,
                "reason": "OOMKilled",
                "startedAt": "2023-11-14T21:00:04Z",
                "finishedAt": "2023-11-14T22:12:00Z",
            }
        },
    )
    return p


def exporter_as_container_failed() -> dict[str, Any]:
    """Before 1.29 the exporter is a regular container; its crash is not the trainer's."""
    p = pod("llama-pretrain-0-x7k2p", "gpu-a")
    p["spec"]["containers"].append(p["spec"].pop("initContainers")[0])
    exporter = p["status"].pop("initContainerStatuses")[0]
    exporter.update(
        ready=False,
        restartCount=3,
        state={"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting"}},
        lastState={
            "terminated": {
                "exitCode": 2,
                "reason": "Error",
                "startedAt": "2023-11-14T22:11:00Z",
                "finishedAt": "2023-11-14T22:11:01Z",
            }
        },
    )
    p["status"]["containerStatuses"].append(exporter)
    return p


def failed_job() -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "llama-pretrain",
            "namespace": "ml",
            "uid": "7a3e2f10-5c4b-4a39-8e21-0f9d8c7b6a50",
            "creationTimestamp": "2023-11-14T21:00:00Z",
            "labels": {"app": "llama-pretrain"},
        },
        "spec": {
            "backoffLimit": 0,
            "completionMode": "Indexed",
            "completions": 2,
            "parallelism": 2,
            "template": {"spec": {"containers": [{"name": "trainer", "image": "x"}]}},
        },
        "status": {
            "failed": 1,
            "startTime": "2023-11-14T21:00:00Z",
            "uncountedTerminatedPods": {},
            "conditions": [
                {
                    "type": "FailureTarget",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastProbeTime": "2023-11-14T22:15:33Z",
                    "lastTransitionTime": "2023-11-14T22:15:33Z",
                },
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit",
                    "lastProbeTime": "2023-11-14T22:15:35Z",
                    "lastTransitionTime": "2023-11-14T22:15:35Z",
                },
            ],
        },
    }


def running_job() -> dict[str, Any]:
    job = failed_job()
    job["status"] = {
        "active": 2,
        "ready": 2,
        "startTime": "2023-11-14T21:00:00Z",
        "uncountedTerminatedPods": {},
    }
    return job


def t(text: str) -> float:
    return parse_rfc3339(text)


def only(signals: list[Signal]) -> Signal:
    assert len(signals) == 1, signals
    return signals[0]


# ---- TrainingInterrupted ------------------------------------------------------------------------


def test_an_oom_killed_trainer_is_a_p0_training_interrupted(form: Callable[..., dict[str, Any]]) -> None:
    sig = only(
        interruptions(
            [form(oom_killed()), form(pod("llama-pretrain-1-q9z4m", "gpu-b", index=1))], [], MONITOR, NOW
        )
    )
    assert sig.alertname == TRAINING_INTERRUPTED
    assert sig.severity == "P0"
    assert sig.source == Source.OPERATOR
    assert sig.firing
    assert sig.labels == {
        "alertname": TRAINING_INTERRUPTED,
        **grade_labels("P0"),
        "namespace": "ml",
        "training_job": "llama-pretrain",
        "pod": "llama-pretrain-0-x7k2p",
        "node": "gpu-a",
        "reason": "OOMKilled",
    }
    assert sig.starts_at == t("2023-11-14T22:14:07Z")  # the trainer's finishedAt, not the pod's
    assert sig.fingerprint == signal_fingerprint(sig.labels)
    assert "OOMKilled" in sig.annotations["description"]


def test_a_non_zero_exit_names_its_code(form: Callable[..., dict[str, Any]]) -> None:
    sig = only(interruptions([form(exited_1())], [], MONITOR, NOW))
    assert sig.labels["reason"] == "Error(exit 1)"
    assert (sig.labels["pod"], sig.node) == ("llama-pretrain-1-q9z4m", "gpu-b")
    assert sig.starts_at == t("2023-11-14T22:15:31Z")


def test_an_eviction_is_named_as_the_cause_at_its_disruption_time(
    form: Callable[..., dict[str, Any]],
) -> None:
    sig = only(interruptions([form(evicted())], [], MONITOR, NOW))
    assert sig.labels["reason"] == "Evicted"
    assert sig.starts_at == t("2023-11-14T22:16:00Z")


def test_an_eviction_without_a_disruption_condition_dates_by_the_container() -> None:
    """Before 1.26 the kubelet wrote no DisruptionTarget condition."""
    p = evicted()
    p["status"]["conditions"] = [c for c in p["status"]["conditions"] if c["type"] != "DisruptionTarget"]
    sig = only(interruptions([p], [], MONITOR, NOW))
    assert (sig.labels["reason"], sig.starts_at) == ("Evicted", t("2023-11-14T22:16:02Z"))


def test_a_trainer_restarted_in_place_after_an_oom_kill_still_interrupted_the_gang(
    form: Callable[..., dict[str, Any]],
) -> None:
    sig = only(interruptions([form(restarted_in_place())], [], MONITOR, NOW))
    assert (sig.labels["reason"], sig.starts_at) == ("OOMKilled", t("2023-11-14T22:18:40Z"))


def test_a_failed_pod_without_a_container_verdict_is_an_interruption() -> None:
    """The graceful node shutdown manager fails the pod; the containers' statuses can be gone."""
    p = pod("llama-pretrain-0-x7k2p", "gpu-a")
    p["status"].update(
        phase="Failed",
        reason="Terminated",
        message="Pod was terminated in response to imminent node shutdown.",
    )
    p["status"]["containerStatuses"] = []
    not_ready(p, "2023-11-14T22:16:40Z")
    sig = only(interruptions([p], [], MONITOR, NOW))
    assert (sig.labels["reason"], sig.starts_at) == ("Terminated", t("2023-11-14T22:16:40Z"))


def test_the_monitors_failed_job_with_a_live_pod_is_a_p0_interruption(
    form: Callable[..., dict[str, Any]],
) -> None:
    live = form(pod("llama-pretrain-1-q9z4m", "gpu-b", index=1))
    sig = only(interruptions([live], [form(failed_job())], MONITOR, NOW))
    assert sig.labels == {
        "alertname": TRAINING_INTERRUPTED,
        **grade_labels("P0"),
        "namespace": "ml",
        "training_job": "llama-pretrain",
        "reason": "JobFailed(BackoffLimitExceeded)",
    }
    assert sig.starts_at == t("2023-11-14T22:15:35Z")  # the Failed condition, not FailureTarget
    assert sig.fingerprint == fingerprint(
        {"alertname": TRAINING_INTERRUPTED, "namespace": "ml", "training_job": "llama-pretrain"}
    )


def test_a_failed_job_with_no_pod_left_notifies_at_p2_and_is_never_restarted(
    form: Callable[..., dict[str, Any]],
) -> None:
    """The Job controller recreates no pod of a failed Job: a gang restart would delete nothing and spend
    the budget, so the signal only notifies (P2: e-mail and ticket), which the planner never acts on."""
    sig = only(interruptions([], [form(failed_job())], MONITOR, NOW))
    assert sig.severity == sig.labels["severity"] == "P2"
    assert sig.labels["reason"] == "JobFailed(BackoffLimitExceeded)"
    assert "resubmit" in sig.annotations["description"]
    assert triage(sig, MONITOR) is not None and triage(sig, MONITOR).startswith(NO_RESPONSE)  # type: ignore[union-attr]
    # its last pod's OOM kill, with nothing left to restart, notifies the same way
    got = interruptions([form(oom_killed())], [form(failed_job())], MONITOR, NOW)
    assert [(s.labels["reason"], s.severity) for s in got] == [
        ("OOMKilled", "P2"),
        ("JobFailed(BackoffLimitExceeded)", "P2"),
    ]
    assert all(triage(s, MONITOR) is not None for s in got)


def created(p: dict[str, Any], at: str) -> dict[str, Any]:
    p["metadata"]["creationTimestamp"] = at
    return p


def restart_record(
    created_up_to: int | None, *, phase: str = "Succeeded", dry_run: bool = False
) -> dict[str, Any]:
    progress = {"count": 2} | ({"createdUpTo": created_up_to} if created_up_to is not None else {})
    return {
        "id": "r1", "alert": TRAINING_INTERRUPTED, "dryRun": dry_run, "phase": phase,
        "created": "2023-11-14T22:17:30Z",
        "steps": [{"kind": "RestartGang", "phase": phase, "progress": progress},
                  {"kind": "ConfirmPlacement", "phase": phase}],
    }  # fmt: skip


def test_an_oom_kill_of_a_gang_replaced_long_ago_is_history(form: Callable[..., dict[str, Any]]) -> None:
    """The pod OOM-killed 61 hours ago lingers (restartPolicy Never keeps a Job's failed pod); the job
    has run a new gang since. Nothing remembers it (a new monitor, a status lost, dry run left, its
    record out of the history): its termination must not restart the new gang."""
    old = created(oom_killed(), "2023-11-12T09:00:00Z")
    old["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = "2023-11-12T09:20:00Z"
    gang = [
        created(pod(f"llama-pretrain-{i}-new{i}", "gpu-b", index=i), "2023-11-12T09:21:00Z") for i in (0, 1)
    ]
    assert interruptions([form(p) for p in (old, *gang)], [], MONITOR, NOW) == []


def test_an_oom_kill_of_the_current_gang_is_an_interruption_however_old_its_kubelets_clock(
    form: Callable[..., dict[str, Any]],
) -> None:
    """The same gang: its pods were created together, one was OOM-killed and the Job controller made its
    replacement (restartPolicy Never). The finishedAt, by a kubelet whose clock is far behind, is older
    than every pod's creation: creation times are compared with creation times only."""
    victim = oom_killed()  # created 21:00:00 with the rest of the gang
    victim["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = "2023-11-14T20:00:00Z"
    other = pod("llama-pretrain-1-q9z4m", "gpu-b", index=1)
    replacement = created(pod("llama-pretrain-0-r3pl4", "gpu-c"), "2023-11-14T22:14:10Z")
    sig = only(interruptions([form(p) for p in (victim, other, replacement)], [], MONITOR, NOW))
    assert (sig.labels["pod"], sig.labels["reason"]) == ("llama-pretrain-0-x7k2p", "OOMKilled")


def test_a_rank_created_a_second_before_its_peers_is_of_the_same_gang(
    form: Callable[..., dict[str, Any]],
) -> None:
    """A gang's pods are created within seconds, at one-second resolution: the OOM-killed rank created at
    21:00:00 and its peer at 21:00:01 are one gang, and the kill is an interruption (a comparison without
    the margin missed it whenever the seconds differed)."""
    victim = oom_killed()  # created 21:00:00
    other = created(pod("llama-pretrain-1-q9z4m", "gpu-b", index=1), "2023-11-14T21:00:01Z")
    sig = only(interruptions([form(p) for p in (victim, other)], [], MONITOR, NOW))
    assert sig.labels["reason"] == "OOMKilled"


def test_a_termination_before_the_last_gang_restart_is_history() -> None:
    """trainguard restarted the gang (its RestartGang step deleted the pods created up to 21:00:00); the
    OOM-killed pod of the old gang lingers and no live pod is left to date the new gang (all Pending
    pods of it were deleted, say): the record alone says the termination was acted on."""
    old = oom_killed()  # created 21:00:00
    up_to = int(t("2023-11-14T21:00:00Z"))
    assert interruptions([old], [], MONITOR, NOW, [restart_record(up_to)]) == []
    # a pod of the new gang, created after the restart, is interrupted all the same
    new = created(oom_killed(), "2023-11-14T21:00:01Z")
    assert (
        only(interruptions([new], [], MONITOR, NOW, [restart_record(up_to)])).labels["reason"] == "OOMKilled"
    )


@pytest.mark.parametrize(
    ("case", "record"),
    [
        ("a restart still in progress", restart_record(int(t("2023-11-14T21:00:00Z")), phase="InProgress")),
        ("a dry run", restart_record(int(t("2023-11-14T21:00:00Z")), phase="DryRun", dry_run=True)),
    ],
)
def test_a_restart_that_did_not_happen_makes_nothing_history(case: str, record: dict[str, Any]) -> None:
    assert only(interruptions([oom_killed()], [], MONITOR, NOW, [record])).labels["reason"] == "OOMKilled", (
        case
    )


def test_a_restart_recorded_without_its_progress_dates_the_old_gang_by_the_record() -> None:
    """An older operator's RestartGang step with no createdUpTo: the pods created before the record."""
    assert interruptions([oom_killed()], [], MONITOR, NOW, [restart_record(None)]) == []
    late = created(oom_killed(), "2023-11-14T22:17:31Z")  # after the record: the new gang
    assert len(interruptions([late], [], MONITOR, NOW, [restart_record(None)])) == 1


@pytest.mark.parametrize(
    ("case", "objects"),
    [
        ("a running pod", lambda: ([pod("llama-pretrain-0-x7k2p", "gpu-a")], [running_job()])),
        ("a pod that Succeeded", lambda: ([succeeded()], [])),
        ("a pod being deleted (the gang restart's SIGTERM, exit 143)", lambda: ([deleting()], [])),
        (
            "an evicted pod being deleted (drain, the taint manager)",
            lambda: (
                [
                    {
                        **evicted(),
                        "metadata": {**evicted()["metadata"], "deletionTimestamp": "2023-11-14T22:16:05Z"},
                    }
                ],
                [],
            ),
        ),
        ("the exporter sidecar OOMKilled", lambda: ([exporter_oom_killed()], [])),
        ("the exporter as a regular container crash-looping", lambda: ([exporter_as_container_failed()], [])),
        (
            "another job's pod",
            lambda: (
                [{**oom_killed(), "metadata": {**oom_killed()["metadata"], "labels": {"app": "bert"}}}],
                [],
            ),
        ),
        (
            "a pod of the same labels in another namespace",
            lambda: ([{**oom_killed(), "metadata": {**oom_killed()["metadata"], "namespace": "other"}}], []),
        ),
        (
            "another Job failed",
            lambda: ([], [{**failed_job(), "metadata": {**failed_job()["metadata"], "name": "bert"}}]),
        ),
    ],
)
def test_must_not_fire(
    case: str, objects: Callable[[], tuple[list[dict[str, Any]], list[dict[str, Any]]]]
) -> None:
    pods, jobs = objects()
    assert interruptions(pods, jobs, MONITOR, NOW) == [], case


def test_a_container_that_exited_0_in_a_running_pod_is_not_an_interruption() -> None:
    p = pod("llama-pretrain-0-x7k2p", "gpu-a")
    p["status"]["containerStatuses"].append(
        {
            **running_trainer(),
            "name": "data-prep",
            "ready": False,
            "state": {
                "terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": "2023-11-14T22:00:00Z"}
            },
        }
    )
    assert interruptions([p], [], MONITOR, NOW) == []


def test_a_pod_that_succeeded_is_not_an_interruption_even_with_an_oom_kill_inside() -> None:
    """containerd reports OOMKilled when any process of the container was killed (a data-loader worker
    the trainer replaced), also when the trainer then exited 0 and the pod completed."""
    p = succeeded()
    p["status"]["containerStatuses"][0]["state"]["terminated"]["reason"] = "OOMKilled"
    assert interruptions([p], [], MONITOR, NOW) == []


def test_a_failed_job_is_not_read_without_a_job_workload_ref() -> None:
    assert interruptions([], [failed_job()], make_monitor(), NOW) == []
    pytorch = make_monitor(**{"spec.workloadRef": {"kind": "PyTorchJob", "name": "llama-pretrain"}})
    assert interruptions([], [failed_job()], pytorch, NOW) == []


def test_the_same_termination_gives_the_same_signal_on_every_pass() -> None:
    """The planner de-duplicates by fingerprint and time (record_id): a later pass over the same
    objects, through the client or not, must give the same ids."""
    pods, jobs = [oom_killed(), exited_1()], [failed_job()]
    first = interruptions(pods, jobs, MONITOR, NOW)
    later = interruptions([via_client(p) for p in pods], [via_client(j) for j in jobs], MONITOR, NOW + 600)
    assert [record_id(s) for s in first] == [record_id(s) for s in later]
    assert first == later
    assert len({record_id(s) for s in first}) == 3


def test_signals_come_oldest_first() -> None:
    got = interruptions([exited_1(), oom_killed()], [failed_job()], MONITOR, NOW)
    assert [s.labels["reason"] for s in got] == [
        "OOMKilled",
        "Error(exit 1)",
        "JobFailed(BackoffLimitExceeded)",
    ]


def test_a_time_ahead_of_the_clock_is_capped_at_now() -> None:
    early = t("2023-11-14T22:14:00Z")
    assert only(interruptions([oom_killed()], [], MONITOR, early)).starts_at == early
