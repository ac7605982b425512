"""The shared vocabulary of the remediation room: a signal, a plan of steps, and the cluster state a
plan is decided on. Plain, JSON-friendly data: records of plans live in the monitor's status."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from trainguard.remediation.guardrails import Guardrails

if TYPE_CHECKING:  # the CLI's parser reads this module: no kubernetes client for `trainguard exporter`
    from trainguard.kube.workloads import Workload


class Source(StrEnum):
    ALERTMANAGER = "alertmanager"
    SIDECAR = "sidecar"
    OPERATOR = "operator"


@dataclass(frozen=True)
class Signal:
    """One alert instance, whichever path it came by. `fingerprint` is catalog.events.fingerprint of the
    labels, the same for the fast path and for Alertmanager, so one fault acts once."""

    alertname: str
    severity: str
    """Its grade, P0..P3: the `priority` label, or `severity` where the sender set no priority
    (catalog/severity.grade_of); the `severity` label itself may be a mapped word such as critical."""
    labels: dict[str, str]
    fingerprint: str
    source: Source
    starts_at: float
    """Unix seconds."""
    firing: bool = True
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def namespace(self) -> str:
        return self.labels.get("namespace", "")

    @property
    def training_job(self) -> str:
        return self.labels.get("training_job", "")

    @property
    def node(self) -> str:
        return self.labels.get("node", "")


class StepKind(StrEnum):
    PAUSE = "Pause"
    """Ask every pod's sidecar to pause training (the SDK's should_pause)."""
    PIN_CHECKPOINT = "PinCheckpoint"
    """Point every sidecar's resume_from at the newest good checkpoint, one saved before params['before_ts']."""
    REQUEST_CHECKPOINT = "RequestCheckpoint"
    """Ask the healthy ranks for an emergency full checkpoint; wait up to params['timeout_s'] for it."""
    AWAIT_CHECKPOINT = "AwaitCheckpoint"
    """Wait, asking nothing, until every rank has saved a checkpoint past the newest step any of them had
    when the wait began (the job's next periodic checkpoint), up to params['timeout_s']; past it the step
    fails and nothing after it is done (slowNode's ReplaceAtCheckpoint: no work is lost to the move)."""
    CONFIRM_FAULT = "ConfirmFault"
    """Ask the job's sidecars on params['node'] whether they saw params['alert'] (on GPU params['gpu']):
    a hardware claim is acted on only once the sidecar on that node confirms it."""
    CORDON = "Cordon"
    """Mark params['node'] unschedulable, annotated with who, when and why."""
    TAINT = "Taint"
    """Taint params['node'] trainguard.io/faulty=<params['reason']>:NoSchedule."""
    RESTART_IN_PLACE = "RestartInPlace"
    """Restart the trainers, not the pods: post a new generation's restart word ({generation, record,
    resume_from}, the newest checkpoint every rank has) to every pod's sidecar, where `trainguard launch`
    restarts its trainer; wait until every launcher runs that generation. Only where every live pod of the
    gang has a live launcher; else, or when a launcher does not start it in time, the RestartGang that
    follows restarts the gang (a NaN's plan has none: training stays paused at the pin)."""
    RESTART_GANG = "RestartGang"
    """Delete the job's pods so that their controller recreates them as one gang, resuming from the
    newest good checkpoint; replacement pods may use a spare node (trainguard.io/spare=true). A JobSet's
    or TrainJob's gang is restarted through the JobSet: its current child Jobs are deleted, and the
    JobSet recreates them at once."""
    REPLACE_POD = "ReplacePod"
    """Replace only the gang's pod(s) on params['node'] through the owner: on a node judged down
    (params['nodeDown']) the pod is marked Failed with a DisruptionTarget condition and force-deleted,
    on a live node it is evicted (policy/v1); a JobSet child Job of parallelism 1 is deleted first, so
    the JobSet recreates it at once."""
    CONFIRM_PLACEMENT = "ConfirmPlacement"
    """Wait until the new pods are scheduled away from params['avoid'] nodes; record where."""
    ADVISE = "Advise"
    """Post params['advice'] to every sidecar's advisories (the SDK's advisories())."""
    NOTIFY = "Notify"
    """Post an alert to Alertmanager saying what was not done and why (storm guard, budget)."""


class Phase(StrEnum):
    PLANNED = "Planned"
    DRY_RUN = "DryRun"
    IN_PROGRESS = "InProgress"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SKIPPED = "Skipped"


@dataclass(frozen=True)
class Step:
    kind: StepKind
    params: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """What to do about one signal. `skipped` says why nothing is done (a duplicate, disabled, over a
    budget: then `steps` holds at most a NOTIFY)."""

    record_id: str
    fingerprint: str
    alert: str
    p0_class: str
    steps: tuple[Step, ...]
    node: str = ""
    gpu: str = ""
    dry_run: bool = False
    skipped: str = ""


@dataclass(frozen=True)
class ClusterState:
    """What a plan is decided on, read by the edge and passed in."""

    now: float
    gpu_nodes: int
    """GPU nodes in the cluster (for the cordon cap)."""
    cordons: tuple[tuple[str, float], ...] = ()
    """(node, unix time) of every cordon trainguard made, cluster-wide (node annotations)."""
    records: tuple[dict[str, Any], ...] = ()
    """This monitor's remediation records (status.remediations), oldest first."""
    spares: tuple[str, ...] = ()
    """Schedulable nodes labelled trainguard.io/spare=true, lemons left out (remediation/lemon.py)."""
    job_nodes: frozenset[str] = frozenset()
    """Nodes that host a live pod of the monitor's job, read from the pod cache (never from a label): a
    node fault names one of these or is not acted on."""
    unready_nodes: frozenset[str] = frozenset()
    """Nodes whose Ready condition is not True in the node cache: a GPUNodeDown that another sender
    claims is acted on only for these (the operator's own detection judges Leases by its clock)."""
    guardrails: Guardrails = field(default_factory=Guardrails)
    """The platform's limits (operator flags), with the operator-wide mode read for this signal."""
    held: frozenset[str] = frozenset()
    """Nodes trainguard holds cordoned now: its annotation on a node still unschedulable, plus the
    cordons planned that the node cache does not show yet (the ceiling and the pool budgets)."""
    pools: Mapping[str, str] = field(default_factory=dict)
    """GPU node -> its pool (the value of the pool label; "" without it)."""
    pool_sizes: Mapping[str, int] = field(default_factory=dict)
    """GPU nodes per pool."""
    open_breakers: Mapping[str, str] = field(default_factory=dict)
    """Pool -> why its circuit breaker is open: no cordon there."""
    workload: Workload | None = None
    """The monitor's workload owner resolved (kube/workloads.py), when it names one: its problem, the
    restarts it has left and whether it allows one, and how one pod is replaced through it."""
