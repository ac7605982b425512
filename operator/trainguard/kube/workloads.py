"""What a monitor's workload owner says, read from its objects: the gang's pods (for a JobSet or a
TrainJob, the current restart attempt only), the restarts the owner has left for trainguard, whether it
allows a restart at all, how one pod is replaced through it, and the Kueue Workload that admits it.

Pure: the edge (kube/cache.py) reads the objects into an `OwnerRead`, `resolve` decides. Standard
library only, like kube/objects.py, so the planner, the executor and the reconcile share one reading.
Field paths and labels are those of the controllers' sources (JobSet v0.11.1, Trainer v2.2.0,
training-operator v1.9.3, Kueue v0.17.0; docs/p0-response.md, "Restarts through the owner").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from trainguard.kube.objects import creation_seconds, is_terminating, labels_of

Obj = dict[str, Any]

JOB_CONTROLLER_UID = "batch.kubernetes.io/controller-uid"
JOB_CONTROLLER_UID_LEGACY = "controller-uid"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
TRAINJOB_STEP = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINJOB_TRAINER_STEP = "trainer"
PYTORCH_JOB_NAME = "training.kubeflow.org/job-name"
KUEUE_JOB_UID = "kueue.x-k8s.io/job-uid"
KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
DISRUPTION_TARGET = "DisruptionTarget"

MANAGED_BY = {
    "Job": ("spec.managedBy", "kubernetes.io/job-controller"),
    "JobSet": ("spec.managedBy", "jobset.sigs.k8s.io/jobset-controller"),
    "TrainJob": ("spec.managedBy", "trainer.kubeflow.org/trainjob-controller"),
    "PyTorchJob": ("spec.runPolicy.managedBy", "kubeflow.org/training-operator"),
}
"""Per kind, where its managedBy is and the controller of this cluster: another value (MultiKueue's)
means the object is run elsewhere and nothing trainguard does here would restart it."""

JOB_BACKOFF_LIMIT_DEFAULT = 6
"""batch/v1 Job's spec.backoffLimit when unset."""
NO_JOBSET_RESTARTS = "the JobSet allows no restarts (spec.failurePolicy.maxRestarts)"
"""The notice a restart plan becomes for a JobSet (or a TrainJob's JobSet) without a failure policy or
with maxRestarts 0: trainguard never restarts what the owner declared unrestartable."""


@dataclass(frozen=True)
class OwnerRead:
    """What the edge read for one workloadRef: raw objects, nothing decided."""

    kind: str
    name: str
    namespace: str
    api_version: str
    served: bool = True
    """The cluster serves the kind at that apiVersion (its CRD is installed)."""
    owner: Obj | None = None
    """The object the workloadRef names; None when it does not exist."""
    jobset: Obj | None = None
    """A TrainJob's JobSet (the same name, owned by it); for a JobSet, the owner itself."""
    jobset_served: bool = True
    """For a TrainJob: the cluster serves JobSets."""
    jobs: tuple[Obj, ...] = ()
    """The namespace's batch Jobs (a JobSet's children are picked out by ownerReference)."""
    pods: tuple[Obj, ...] = ()
    """The pods the monitor's spec.selector selects."""
    workloads: tuple[Obj, ...] = ()
    """Kueue Workloads labelled kueue.x-k8s.io/job-uid with the owner's uid (none without Kueue)."""


@dataclass(frozen=True)
class ChildJob:
    """A batch Job of the gang: the Job itself, or a JobSet's child Job of the current attempt."""

    name: str
    uid: str
    parallelism: int
    failures_left: int
    """How many more pod failures its backoffLimit takes before the Job fails."""
    ignores_disruption: bool
    """Its podFailurePolicy ignores a pod failure with a DisruptionTarget condition (an eviction)."""
    created: float = 0.0


@dataclass(frozen=True)
class Admission:
    """The Kueue Workload that admits the owner."""

    name: str
    admitted: bool
    evicted: str = ""
    """The reason of its Evicted condition while it is True, else ""."""
    active: bool = True
    """spec.active: false evicts it and Kueue never admits it again."""


@dataclass(frozen=True)
class Replacement:
    """How the pod of the gang on a faulty node is replaced through its owner."""

    pod: str
    uid: str
    node: str
    child_job: ChildJob | None = None
    """Delete this child Job (Background) after the pod: its JobSet recreates it at once (same restart
    attempt, nothing counted, no back-off record). None: the owner recreates the pod by itself."""
    refusal: str = ""
    """Why removing the pod would fail the owner instead of replacing it ("" when it would not)."""
    wait: str = ""
    """What the replacement waits for, in words (a Job controller's back-off)."""


@dataclass(frozen=True)
class Workload:
    """The owner, resolved: what the planner, the executor and the monitor's status read."""

    kind: str
    name: str
    problem: str = ""
    """Why the workloadRef cannot be resolved (the monitor's WorkloadResolved condition is False, and a
    restart becomes a notice), naming the field; "" when it resolves."""
    missing: bool = False
    """The problem is only that the object does not exist (yet): a monitor applied before its job, as a
    GitOps sync or a pipeline does, is waiting, not Degraded."""
    pods: tuple[Obj, ...] = ()
    """The gang: the owner's pods the monitor selects, of the current restart attempt."""
    older: tuple[str, ...] = ()
    """Pods of an older JobSet restart attempt (history, being deleted by the JobSet)."""
    budget_left: int | None = None
    """Gang restarts the owner lets through before it fails the workload; None: the owner sets no limit
    that trainguard's restarts spend."""
    refusal: str = ""
    """Why the owner allows no restart now ("" when it allows one): a restart plan becomes a notice."""
    attempt: int | None = None
    """The JobSet's status.restarts (the restart attempt of its current child Jobs)."""
    children: tuple[ChildJob, ...] = ()
    """The gang's batch Jobs (a Job: itself; a JobSet or TrainJob: the current attempt's children)."""
    admission: Admission | None = None
    notes: tuple[str, ...] = ()
    """What is worth saying but changes nothing (the owner's pods the selector leaves out)."""
    uid: str = ""
    jobset: str = ""
    """The JobSet behind a JobSet or TrainJob."""
    jobset_uid: str = ""

    @property
    def marks_failed(self) -> bool:
        """Whether a dead node's pod is marked Failed (DisruptionTarget) before it is forced off: a Job's,
        so that its podFailurePolicy can Ignore the loss; not a PyTorchJob's, whose training-operator
        counts a pod Failed while it runs as a new failure against runPolicy.backoffLimit (with 0 it
        fails the job), and recreates a pod that is only deleted at once, counting it against nothing
        (e2e/test_training_controllers.py, TestPyTorchJobPodReplacement)."""
        return self.kind != "PyTorchJob"

    def replacements(self, node: str, *, terminating: bool = False) -> list[Replacement]:
        """The live pods of the gang on `node`, each with how it is replaced through the owner; with
        `terminating`, those already being deleted too (not yet terminal): on a dead node they stay
        Terminating until forced off."""
        on = [
            p for p in self.pods
            if _node(p) == node and (_live(p) or (terminating and is_terminating(p) and not _terminal(p)))
        ]  # fmt: skip
        return [self._replacement(p) for p in sorted(on, key=_name)]

    def _replacement(self, pod: Obj) -> Replacement:
        meta = pod.get("metadata") or {}
        name, uid = str(meta.get("name") or ""), str(meta.get("uid") or "")
        job = self.child_of(pod)
        if self.kind == "PyTorchJob":
            return Replacement(name, uid, _node(pod), wait="none: the training-operator recreates it at once")
        if self.kind in ("JobSet", "TrainJob") and job is not None and job.parallelism <= 1:
            return Replacement(
                name, uid, _node(pod), child_job=job, wait="none: the JobSet recreates its child Job at once"
            )
        if job is None:
            return Replacement(
                name, uid, _node(pod), refusal=f"pod {name} belongs to no Job of {self.kind} {self.name}"
            )
        wait = "the Job controller's back-off (10 s, doubling per failure of the Job)"
        if not job.ignores_disruption and job.failures_left < 1:
            owner = f"Job {job.name}" + (f" and so {self.kind} {self.name}" if self.kind != "Job" else "")
            return Replacement(
                name, uid, _node(pod), job, refusal=(
                    f"removing pod {name} would fail {owner}: its backoffLimit has no failure left and its "
                    "podFailurePolicy does not Ignore DisruptionTarget (add that rule to the Job template)"
                ), wait=wait,
            )  # fmt: skip
        return Replacement(name, uid, _node(pod), None, wait=wait)

    def child_of(self, pod: Obj) -> ChildJob | None:
        """The gang's Job that controls `pod` (its controller ownerReference)."""
        uid = _controller_uid(pod)
        return next((j for j in self.children if j.uid == uid), None) if uid else None

    @property
    def live(self) -> tuple[Obj, ...]:
        return tuple(p for p in self.pods if _live(p))


def resolve(read: OwnerRead) -> Workload:
    """The owner as `read` shows it: a problem naming the field when it cannot be resolved."""
    ref = f"{read.kind} {read.namespace}/{read.name}"
    if not read.served:
        return Workload(read.kind, read.name, problem=(
            f"spec.workloadRef: {read.kind} ({read.api_version}) is not served by this cluster: install its "
            "controller (its CRD) or fix spec.workloadRef.kind and apiVersion"
        ))  # fmt: skip
    owner = read.owner
    if owner is None:
        return Workload(read.kind, read.name, missing=True, problem=(
            f"spec.workloadRef: {ref} not found: create it, or fix spec.workloadRef.name"
        ))  # fmt: skip
    foreign = _managed_elsewhere(read.kind, owner)
    if foreign:
        return Workload(read.kind, read.name, problem=f"spec.workloadRef: {ref} {foreign}")
    uid = str((owner.get("metadata") or {}).get("uid") or "")
    admission = _admission(read.workloads)
    if read.kind == "Job":
        found = _job(read, owner)
    elif read.kind in ("JobSet", "TrainJob"):
        found = _jobset(read, owner)
    elif read.kind == "PyTorchJob":
        found = _pytorchjob(read, owner)
    else:
        found = Workload(
            read.kind, read.name, problem=f"spec.workloadRef.kind: {read.kind} is not a kind trainguard reads"
        )
    if found.problem:
        return found
    refusal = found.refusal or _finished(read.kind, owner) or _not_admitted(admission)
    return replace(found, uid=uid, admission=admission, refusal=refusal)


# ---- per kind ----


def _job(read: OwnerRead, job: Obj) -> Workload:
    uid = str((job.get("metadata") or {}).get("uid") or "")
    mine = [p for p in read.pods if _controlled_by_job(p, uid)]
    problem = _foreign(read, mine)
    if problem:
        return Workload("Job", read.name, problem=problem)
    child = _child_job(job)
    gang = [p for p in mine if _live(p)]
    per_index = (job.get("spec") or {}).get("backoffLimitPerIndex")
    if isinstance(per_index, int):
        # each restart fails every index once: the index that failed most sets what is left
        worst = max((_int((p.get("metadata") or {}).get("annotations", {}).get(
            "batch.kubernetes.io/job-index-failure-count")) for p in mine), default=0)  # fmt: skip
        left = per_index - worst
        why = f"spec.backoffLimitPerIndex {per_index}, {worst} failure(s) of its most failed index"
    else:
        # a plain DELETE sets no DisruptionTarget: every pod a gang restart deletes is one failure
        left = child.failures_left // max(1, len(gang))
        limit = (job.get("spec") or {}).get("backoffLimit", JOB_BACKOFF_LIMIT_DEFAULT)
        failed = (job.get("status") or {}).get("failed") or 0
        why = (f"spec.backoffLimit {limit} less status.failed {failed} leaves {child.failures_left} failure(s), "
               f"and a gang restart deletes {max(1, len(gang))} pod(s), each a failure")  # fmt: skip
    refusal = "" if left > 0 else f"the Job has no restart left ({why})"
    return Workload("Job", read.name, pods=tuple(mine), budget_left=max(0, left), refusal=refusal,
                    children=(child,))  # fmt: skip


def _jobset(read: OwnerRead, owner: Obj) -> Workload:
    trainjob = read.kind == "TrainJob"
    jobset = read.jobset
    if trainjob and not read.jobset_served:
        return Workload(read.kind, read.name, problem=(
            f"spec.workloadRef: TrainJob {read.namespace}/{read.name} runs as a JobSet, and this cluster "
            "serves no JobSets (jobset.x-k8s.io/v1alpha2): install JobSet"
        ))  # fmt: skip
    if jobset is None:
        return Workload(read.kind, read.name, problem=(
            f"spec.workloadRef: TrainJob {read.namespace}/{read.name} has no JobSet of its name yet "
            "(the Trainer creates it once the TrainJob's runtime resolves)"
        ))  # fmt: skip
    if trainjob:
        foreign = _managed_elsewhere("JobSet", jobset)
        if foreign:
            return Workload(
                read.kind,
                read.name,
                problem=f"spec.workloadRef: the JobSet of TrainJob {read.name} {foreign}",
            )
    meta = jobset.get("metadata") or {}
    js_name, js_uid = str(meta.get("name") or ""), str(meta.get("uid") or "")
    status = jobset.get("status") or {}
    attempt = _int(status.get("restarts"))
    owned = [p for p in read.pods if labels_of(p).get(JOBSET_NAME) == js_name]
    problem = _foreign(read, owned)
    if problem:
        return Workload(read.kind, read.name, problem=problem)
    mine = [p for p in owned if _trainer_step(p)]  # a TrainJob's initializer pods are not the gang
    current = [p for p in mine if _int(labels_of(p).get(RESTART_ATTEMPT)) == attempt]
    older = sorted(_name(p) for p in mine if _int(labels_of(p).get(RESTART_ATTEMPT)) < attempt)
    children = tuple(
        _child_job(j)
        for j in read.jobs
        if _controller_uid(j) == js_uid and _int(labels_of(j).get(RESTART_ATTEMPT)) == attempt
    )
    policy = (jobset.get("spec") or {}).get("failurePolicy")
    whose = "" if not trainjob else f" (the JobSet {js_name} of TrainJob {read.name})"
    if not isinstance(policy, dict) or not _int(policy.get("maxRestarts")):
        left, refusal = 0, NO_JOBSET_RESTARTS + whose
    else:
        limit, used = _int(policy.get("maxRestarts")), _int(status.get("restartsCountTowardsMax"))
        left = max(0, limit - used)
        refusal = "" if left else (
            f"the JobSet has no restart left{whose}: status.restartsCountTowardsMax {used} of "
            f"spec.failurePolicy.maxRestarts {limit}"
        )  # fmt: skip
    return Workload(read.kind, read.name, pods=tuple(current), older=tuple(older), budget_left=left,
                    refusal=refusal, attempt=attempt, children=tuple(sorted(children, key=lambda c: c.name)),
                    jobset=js_name, jobset_uid=js_uid)  # fmt: skip


def _pytorchjob(read: OwnerRead, job: Obj) -> Workload:
    uid = str((job.get("metadata") or {}).get("uid") or "")
    mine = [
        p for p in read.pods
        if labels_of(p).get(PYTORCH_JOB_NAME) == read.name or _controller_uid(p) == uid
    ]  # fmt: skip
    problem = _foreign(read, mine)
    if problem:
        return Workload("PyTorchJob", read.name, problem=problem)
    limit = ((job.get("spec") or {}).get("runPolicy") or {}).get("backoffLimit")
    if not isinstance(limit, int):
        return Workload("PyTorchJob", read.name, pods=tuple(mine))
    # the training-operator counts only the container restarts of Running pods against backoffLimit;
    # a deleted pod is recreated at once and counted by no one
    used = sum(
        _int(c.get("restartCount"))
        for p in mine
        if (p.get("status") or {}).get("phase") == "Running"
        for c in (p.get("status") or {}).get("containerStatuses") or []
    )
    left = max(0, limit - used)
    refusal = "" if left else (
        f"the PyTorchJob has no restart left: its Running pods' containers restarted {used} time(s), "
        f"spec.runPolicy.backoffLimit is {limit}"
    )  # fmt: skip
    return Workload("PyTorchJob", read.name, pods=tuple(mine), budget_left=left, refusal=refusal)


# ---- the JobSet's own gang restart, for `trainguard launch` ----

LAUNCHER_RESTART_EXIT_CODE = 86
"""The exit code with which `trainguard launch` asks its pod's owner to restart the gang (issue 22's
design, 2.2 item 3): a Job podFailurePolicy FailJob rule on it makes the child Job fail with reason
PodFailurePolicy, and a JobSet failure-policy rule on that reason restarts the JobSet."""
JOB_FAILURE_MESSAGE = (
    "Container {container} for pod {pod} failed with exit code {code} matching FailJob rule at index {index}"
)
"""The Job controller's message for a FailJob rule (k8s pkg/controller/job/pod_failure_policy.go), which a
JobSet rule's onJobFailureMessagePatterns is matched against."""


def launcher_restart(jobset: Obj, code: int = LAUNCHER_RESTART_EXIT_CODE) -> str:
    """Why a launcher's exit with `code` would not restart the JobSet through its own failure policy ("" when
    it would): the hook for a whole-gang restart through the JobSet (RestartJobSet, counted against
    maxRestarts), which needs the launcher in every pod to exit with the code. Each replicated Job's
    template needs a podFailurePolicy FailJob rule on the code before any rule that could match first,
    and the JobSet's first failure-policy rule that matches a PodFailurePolicy failure with that message
    must restart it (no rule matching: RestartJobSet, the default)."""
    spec = jobset.get("spec") or {}
    for rjob in spec.get("replicatedJobs") or []:
        policy = (((rjob.get("template") or {}).get("spec") or {}).get("podFailurePolicy") or {}).get(
            "rules"
        ) or []
        first = next((r for r in policy if _on_exit(r, code)), None)
        if first is None or first.get("action") != "FailJob":
            return (
                f"replicated Job {rjob.get('name')} has no podFailurePolicy rule FailJob onExitCodes In [{code}] "
                "(spec.replicatedJobs[].template.spec.podFailurePolicy)"
            )
    failure = spec.get("failurePolicy")
    if not isinstance(failure, dict) or not _int(failure.get("maxRestarts")):
        return NO_JOBSET_RESTARTS
    message = JOB_FAILURE_MESSAGE.format(container="trainer", pod="pod", code=code, index=0)
    for rule in failure.get("rules") or []:
        reasons = rule.get("onJobFailureReasons") or []
        if reasons and "PodFailurePolicy" not in reasons:
            continue
        patterns = rule.get("onJobFailureMessagePatterns") or []
        if patterns and not any(_matches(p, message) for p in patterns):
            continue
        if rule.get("action") in ("RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts"):
            return ""
        return (
            f"the JobSet's failure-policy rule {rule.get('name') or '(unnamed)'} {rule.get('action')}s on it"
        )
    return ""


def _on_exit(rule: Obj, code: int) -> bool:
    """A podFailurePolicy rule that matches a container exiting with `code` (an onPodConditions rule does
    not: the launcher's exit sets no condition)."""
    exits = rule.get("onExitCodes")
    if not isinstance(exits, dict):
        return False
    values = {_int(v) for v in exits.get("values") or []}
    return (code in values) if exits.get("operator") == "In" else (code not in values)


def _matches(pattern: str, text: str) -> bool:
    """An RE2 pattern, as Python reads it (the subset a message pattern uses); an invalid one matches nothing."""
    try:
        return re.search(pattern, text) is not None
    except re.error:
        return False


# ---- readings ----


def _child_job(job: Obj) -> ChildJob:
    meta, spec, status = job.get("metadata") or {}, job.get("spec") or {}, job.get("status") or {}
    limit = spec.get("backoffLimit", JOB_BACKOFF_LIMIT_DEFAULT)
    limit = limit if isinstance(limit, int) else JOB_BACKOFF_LIMIT_DEFAULT
    parallelism = spec.get("parallelism")
    return ChildJob(
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        parallelism=parallelism if isinstance(parallelism, int) else 1,
        failures_left=limit - _int(status.get("failed")),
        ignores_disruption=ignores_disruption(spec.get("podFailurePolicy")),
        created=creation_seconds(job),
    )


def ignores_disruption(policy: Any) -> bool:
    """A Job's podFailurePolicy has a rule, before any other rule that could match first, that Ignores a
    pod with DisruptionTarget=True: an evicted or force-failed pod then costs no backoffLimit."""
    rules = (policy or {}).get("rules") if isinstance(policy, dict) else None
    for rule in rules or []:
        on = rule.get("onPodConditions") or []
        disrupted = any(c.get("type") == DISRUPTION_TARGET and c.get("status", "True") == "True" for c in on)
        if disrupted:
            return rule.get("action") == "Ignore"
        if rule.get("onExitCodes"):
            # an exit-code rule may match the evicted container first (137 after SIGKILL)
            return False
    return False


def _admission(workloads: Iterable[Obj]) -> Admission | None:
    """The newest Kueue Workload of the owner, read from its conditions and spec.active."""
    found = sorted(workloads, key=lambda w: (creation_seconds(w), _name(w)))
    if not found:
        return None
    w = found[-1]
    conditions = {c.get("type"): c for c in (w.get("status") or {}).get("conditions") or []}
    admitted = (conditions.get("Admitted") or {}).get("status") == "True"
    evicted = conditions.get("Evicted") or {}
    reason = str(evicted.get("reason") or "Evicted") if evicted.get("status") == "True" else ""
    return Admission(_name(w), admitted, reason, (w.get("spec") or {}).get("active", True) is not False)


def _not_admitted(admission: Admission | None) -> str:
    """Why Kueue's Workload allows no restart now, or "". Like every refusal, it says what the owner
    allows, not what trainguard does: the plan's notice and the executor's failed step add that."""
    if admission is None:
        return ""
    if not admission.active:
        return f"Kueue's Workload {admission.name} is deactivated (spec.active: false)"
    if admission.evicted:
        return f"Kueue evicted the workload (Workload {admission.name}, {admission.evicted}): it is requeued"
    if not admission.admitted:
        return f"Kueue has not admitted the workload (Workload {admission.name})"
    return ""


FINISHED = {
    "Job": ("Complete", "Failed"),
    "JobSet": ("Completed", "Failed"),
    "TrainJob": ("Complete", "Failed"),
    "PyTorchJob": ("Succeeded", "Failed"),
}


def _finished(kind: str, owner: Obj) -> str:
    """A JobSet, TrainJob or PyTorchJob that has finished is not restarted (a Job's failure is the
    detection's business: a failed Job with live pods is still restarted, remediation/detect.py)."""
    if kind == "Job":
        return ""
    for c in (owner.get("status") or {}).get("conditions") or []:
        if c.get("type") in FINISHED.get(kind, ()) and c.get("status") == "True":
            return f"the {kind} has finished (condition {c.get('type')}): its controller recreates nothing"
    return ""


def _managed_elsewhere(kind: str, obj: Obj) -> str:
    path, ours = MANAGED_BY.get(kind, ("", ""))
    if not path:
        return ""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if value in (None, "", ours):
        return ""
    return f"is managed by {value} ({path}), not by {ours}: it runs elsewhere, and trainguard cannot restart it here"


def _foreign(read: OwnerRead, mine: list[Obj]) -> str:
    """A problem when spec.selector selects live pods the owner does not own: a restart would touch them."""
    ids = {id(p) for p in mine}
    others = sorted(_name(p) for p in read.pods if id(p) not in ids and _live(p))
    if not others:
        return ""
    shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
    return (
        f"spec.selector selects pods that {read.kind} {read.name} does not own ({shown}): narrow "
        "spec.selector to the workload's pods, or fix spec.workloadRef"
    )


def _trainer_step(pod: Obj) -> bool:
    """Not a TrainJob's initializer pod (those carry another ancestor step)."""
    step = labels_of(pod).get(TRAINJOB_STEP)
    return step is None or step == TRAINJOB_TRAINER_STEP


def _controlled_by_job(pod: Obj, uid: str) -> bool:
    labels = labels_of(pod)
    return bool(uid) and (
        labels.get(JOB_CONTROLLER_UID) == uid
        or labels.get(JOB_CONTROLLER_UID_LEGACY) == uid
        or _controller_uid(pod) == uid
    )


def _controller_uid(obj: Obj) -> str:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid") or "")
    return ""


def controlled_by(obj: Obj, uid: str) -> bool:
    """`obj`'s controller ownerReference names `uid` (a JobSet's child Job, before it is deleted)."""
    return bool(uid) and _controller_uid(obj) == uid


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _node(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _live(pod: Obj) -> bool:
    return not is_terminating(pod) and not _terminal(pod)


__all__ = [
    "NO_JOBSET_RESTARTS",
    "Admission",
    "ChildJob",
    "OwnerRead",
    "Replacement",
    "Workload",
    "controlled_by",
    "ignores_disruption",
    "launcher_restart",
    "resolve",
]
