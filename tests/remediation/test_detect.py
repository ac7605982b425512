"""What the operator detects for itself, on objects as the apiserver returns them: a training pod
OOMKilled, failed or evicted, a failed Job (TrainingInterrupted); a node NotReady, Unknown or with an
expired Lease (GPUNodeDown). Every case is read both as raw API JSON and as the kubernetes client gives
it back (datetimes re-serialised with "+00:00"), since the wiring may hand over either."""

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
from trainguard.remediation.detect import interruptions, node_faults
from trainguard.remediation.model import Signal, Source
from trainguard.remediation.plan import record_id
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


def node(name: str, ready: str = "True", since: str = "2023-11-01T08:00:00Z") -> dict[str, Any]:
    reason = {"True": "KubeletReady", "False": "KubeletNotReady", "Unknown": "NodeStatusUnknown"}[ready]
    message = {
        "True": "kubelet is posting ready status",
        "False": "container runtime network not ready: NetworkReady=false",
        "Unknown": "Kubelet stopped posting node status.",
    }[ready]
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"3c1d-{name}",
            "creationTimestamp": "2023-11-01T08:00:00Z",
            "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true"},
        },
        "spec": {"podCIDR": "10.244.1.0/24"},
        "status": {
            "capacity": {"cpu": "96", "memory": "2113530768Ki", "nvidia.com/gpu": "8", "pods": "110"},
            "conditions": [
                {
                    "type": "MemoryPressure",
                    "status": "Unknown" if ready == "Unknown" else "False",
                    "reason": "KubeletHasSufficientMemory",
                    "lastHeartbeatTime": "2023-11-14T22:13:00Z",
                    "lastTransitionTime": "2023-11-01T08:00:00Z",
                },
                {
                    "type": "Ready",
                    "status": ready,
                    "reason": reason,
                    "message": message,
                    "lastHeartbeatTime": "2023-11-14T22:13:00Z",
                    "lastTransitionTime": since,
                },
            ],
        },
    }
    if ready == "Unknown":
        obj["spec"]["taints"] = [
            {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": since},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": since},
        ]
    return obj


def lease(name: str, renewed: str, duration: int = 40) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": "kube-node-lease",
            "creationTimestamp": "2023-11-01T08:00:00Z",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": f"3c1d-{name}"}],
        },
        "spec": {"holderIdentity": name, "leaseDurationSeconds": duration, "renewTime": renewed},
    }


FRESH = "2023-11-14T22:19:55.123456Z"  # 5 s before NOW


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
        "severity": "P0",
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


def test_the_monitors_failed_job_is_an_interruption_without_a_pod(
    form: Callable[..., dict[str, Any]],
) -> None:
    sig = only(interruptions([], [form(failed_job())], MONITOR, NOW))
    assert sig.labels == {
        "alertname": TRAINING_INTERRUPTED,
        "severity": "P0",
        "namespace": "ml",
        "training_job": "llama-pretrain",
        "reason": "JobFailed(BackoffLimitExceeded)",
    }
    assert sig.starts_at == t("2023-11-14T22:15:35Z")  # the Failed condition, not FailureTarget
    assert sig.fingerprint == fingerprint(
        {"alertname": TRAINING_INTERRUPTED, "namespace": "ml", "training_job": "llama-pretrain"}
    )


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


# ---- GPUNodeDown --------------------------------------------------------------------------------

PODS = [pod("llama-pretrain-0-x7k2p", "gpu-a"), pod("llama-pretrain-1-q9z4m", "gpu-b", index=1)]


def test_a_not_ready_node_of_the_job_is_a_p0_node_down(form: Callable[..., dict[str, Any]]) -> None:
    nodes = [form(node("gpu-a", "False", since="2023-11-14T22:17:12Z")), form(node("gpu-b"))]
    leases = [form(lease("gpu-a", FRESH)), form(lease("gpu-b", FRESH))]
    sig = only(node_faults(nodes, leases, [form(p) for p in PODS], MONITOR, NOW))
    assert sig.labels == {
        "alertname": "GPUNodeDown",
        "severity": "P0",
        "namespace": "ml",
        "training_job": "llama-pretrain",
        "node": "gpu-a",
    }
    assert sig.source == Source.OPERATOR
    assert sig.starts_at == t("2023-11-14T22:17:12Z")
    # the catalogue alert's fingerprint: the same as GPUNodeDown from Prometheus or the fast path
    assert sig.fingerprint == fingerprint(
        {"alertname": "GPUNodeDown", "namespace": "ml", "training_job": "llama-pretrain", "node": "gpu-a"}
    )
    assert "NotReady" in sig.annotations["description"]


def test_an_unknown_node_is_down(form: Callable[..., dict[str, Any]]) -> None:
    nodes = [form(node("gpu-b", "Unknown", since="2023-11-14T22:18:00Z"))]
    sig = only(node_faults(nodes, [], [form(p) for p in PODS], MONITOR, NOW))
    assert (sig.node, sig.starts_at) == ("gpu-b", t("2023-11-14T22:18:00Z"))


def test_a_lease_expired_beyond_the_grace_is_a_node_down_before_ready_turns(
    form: Callable[..., dict[str, Any]],
) -> None:
    renewed = "2023-11-14T22:18:30.250000Z"  # expires 22:19:10.25, 49.75 s before NOW
    nodes = [form(node("gpu-a")), form(node("gpu-b"))]
    leases = [form(lease("gpu-a", renewed)), form(lease("gpu-b", FRESH))]
    sig = only(node_faults(nodes, leases, PODS, MONITOR, NOW))
    assert sig.node == "gpu-a"
    assert sig.starts_at == pytest.approx(t(renewed) + 40)
    # within the grace it is not (yet) down
    assert node_faults(nodes, leases, PODS, MONITOR, NOW, lease_grace_s=60) == []


def test_a_node_down_keeps_its_time_as_ready_catches_up_with_the_lease() -> None:
    """First the lease expires, a pass later the node lifecycle controller marks Ready Unknown: one
    fault, one time, so the planner sees the same record id."""
    renewed = "2023-11-14T22:18:30Z"
    leases = [lease("gpu-a", renewed)]
    first = only(node_faults([node("gpu-a")], leases, PODS, MONITOR, NOW))
    later = only(
        node_faults(
            [node("gpu-a", "Unknown", since="2023-11-14T22:19:20Z")], leases, PODS, MONITOR, NOW + 120
        )
    )
    assert record_id(first) == record_id(later)


@pytest.mark.parametrize(
    ("case", "nodes", "leases", "pods"),
    [
        ("Ready with a fresh lease", [node("gpu-a")], [lease("gpu-a", FRESH)], PODS),
        (
            "a lease just expired, within the grace",
            [node("gpu-a")],
            [lease("gpu-a", "2023-11-14T22:18:50Z")],
            PODS,
        ),
        ("no lease at all, Ready", [node("gpu-a")], [], PODS),
        (
            "a down node with none of the job's pods",
            [node("gpu-c", "Unknown", since="2023-11-14T22:18:00Z")],
            [],
            PODS,
        ),
        (
            "a down node of another job",
            [node("gpu-a", "False", since="2023-11-14T22:18:00Z")],
            [],
            [{**PODS[0], "metadata": {**PODS[0]["metadata"], "labels": {"app": "bert"}}}],
        ),
        (
            "a down node where the job's pod already Succeeded",
            [node("gpu-a", "False", since="2023-11-14T22:18:00Z")],
            [],
            [succeeded()],
        ),
        (
            "a stale lease of another namespace's same name",
            [node("gpu-a")],
            [
                {
                    **lease("gpu-a", "2023-11-14T21:00:00Z"),
                    "metadata": {"name": "gpu-a", "namespace": "kube-system"},
                }
            ],
            PODS,
        ),
    ],
)
def test_node_down_must_not_fire(
    case: str, nodes: list[dict[str, Any]], leases: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> None:
    assert node_faults(nodes, leases, pods, MONITOR, NOW) == [], case


def test_an_unreachable_sidecar_is_never_a_node_down() -> None:
    """The exporter does not answer (not ready, crash-looping), the pod is not Ready; the node is."""
    p = exporter_as_container_failed()
    not_ready(p, "2023-11-14T22:11:01Z")
    assert node_faults([node("gpu-a")], [lease("gpu-a", FRESH)], [p], MONITOR, NOW) == []


def test_pods_evicted_from_an_unreachable_node_still_tie_it_to_the_job() -> None:
    """The taint manager deletes the pods of an unreachable node; they stay Terminating there."""
    p = pod("llama-pretrain-0-x7k2p", "gpu-a")
    p["metadata"]["deletionTimestamp"] = "2023-11-14T22:19:30Z"
    got = node_faults([node("gpu-a", "Unknown", since="2023-11-14T22:18:00Z")], [], [p], MONITOR, NOW)
    assert [s.node for s in got] == ["gpu-a"]


def test_one_signal_per_down_node_per_job() -> None:
    nodes = [
        node("gpu-a", "Unknown", since="2023-11-14T22:19:00Z"),
        node("gpu-b", "False", since="2023-11-14T22:18:00Z"),
    ]
    leases = [lease("gpu-a", "2023-11-14T22:17:00Z"), lease("gpu-b", FRESH)]
    pods = [*PODS, pod("llama-pretrain-2-m2v8c", "gpu-a", index=2)]
    got = node_faults(nodes, leases, pods, MONITOR, NOW)
    assert [(s.node, s.starts_at) for s in got] == [
        ("gpu-a", t("2023-11-14T22:17:40Z")),  # the lease's expiry, earlier than Ready's change
        ("gpu-b", t("2023-11-14T22:18:00Z")),
    ]


def test_node_down_is_stable_across_passes() -> None:
    nodes, leases = (
        [node("gpu-a", "Unknown", since="2023-11-14T22:18:00Z")],
        [lease("gpu-a", "2023-11-14T22:17:00Z")],
    )
    first = node_faults(nodes, leases, PODS, MONITOR, NOW)
    later = node_faults(
        [via_client(n) for n in nodes], [via_client(x) for x in leases], PODS, MONITOR, NOW + 300
    )
    assert first == later and len(first) == 1
