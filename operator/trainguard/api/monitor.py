"""TrainingJobMonitor: which pods make up a training job, and how trainguard watches and protects it."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, WithJsonSchema, field_validator, model_validator

from trainguard.api.common import (
    API_VERSION,
    Condition,
    Duration,
    K8sName,
    LabelSelector,
    LabelValue,
    Metadata,
    Model,
    SecretKeyRef,
    cel,
    cel_rules,
    cel_string,
    duration_seconds,
)
from trainguard.catalog import COMMON_LABELS, DCGM_LABELS, Mode
from trainguard.catalog.rule_forms import NOT_SHARED_REASONS, REASON_MESSAGE_MAX, REASONS_MAX

EARLIER_DEFAULT_IMAGES = frozenset({"ghcr.io/trainguard/trainguard:0.1.0"})
"""What the CRD defaulted spec.exporter.image to before the sidecar followed the operator's image. The
apiserver stored that default in every monitor created then, so it is no override: those monitors'
sidecars follow the operator too (to pin exactly this image, name it by digest)."""

WARMUP_STEPS_BY_MODE: dict[Mode, int] = {Mode.TRAINING: 1000, Mode.FINETUNING: 100, Mode.INFERENCE: 0}


WORKLOAD_API_VERSIONS: dict[str, str] = {
    "Job": "batch/v1",
    "JobSet": "jobset.x-k8s.io/v1alpha2",
    "TrainJob": "trainer.kubeflow.org/v1alpha1",
    "PyTorchJob": "kubeflow.org/v1",
}
"""The apiVersion of each workload kind trainguard reads, when workloadRef names none."""


class WorkloadRef(Model):
    """The workload that owns the pods. The operator reads the gang, its restart budget and its Kueue
    admission from it, and restarts it through its own controller (docs/p0-response.md)."""

    kind: Literal["Job", "JobSet", "TrainJob", "PyTorchJob"]
    name: K8sName
    api_version: str | None = Field(
        default=None,
        max_length=253,
        description="Defaults by kind: batch/v1, jobset.x-k8s.io/v1alpha2, trainer.kubeflow.org/v1alpha1, "
        "kubeflow.org/v1. One the cluster does not serve makes the monitor Degraded (WorkloadUnresolved).",
    )

    def resolved_api_version(self) -> str:
        return self.api_version or WORKLOAD_API_VERSIONS[self.kind]


OTLP_ENDPOINT_PATTERN = (
    r"^https?://([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?([/?#]\S*)?$"
)
"""http or https, a host (a name or a bracketed IPv6 address), an optional port and path: what the
exporter's --otlp-endpoint accepts, and no user:password@ (it would sit in the pod spec in clear)."""
OTLP_ENDPOINT_ALLOWED = (
    "endpoint must be the full http:// or https:// URL of an OTLP/HTTP metrics endpoint, path included, "
    "such as http://victoria-metrics:8428/opentelemetry/v1/metrics; no user:password@ in it (the pod spec "
    "shows it): put credentials in the headersSecretRef Secret as an Authorization header"
)
OTLP_INTERVAL_DEFAULT = "15s"
"""The exporter's --otlp-interval default (15 seconds)."""


def _check_otlp_endpoint(url: str) -> str:
    if not re.fullmatch(OTLP_ENDPOINT_PATTERN, url):
        raise ValueError(OTLP_ENDPOINT_ALLOWED)
    return url


OTLPEndpoint = Annotated[
    str,
    AfterValidator(_check_otlp_endpoint),
    # the CRD checks the pattern with a CEL rule (OTLPExport), whose message says what to write; a schema
    # pattern would add a second, bare "should match" error
    WithJsonSchema({"type": "string", "minLength": 1, "maxLength": 2048}),
]


class OTLPExport(Model):
    """The sidecar also pushes its metrics over OTLP/HTTP (the image needs the otlp extra, which
    trainguard's own image has); /metrics keeps serving."""

    endpoint: OTLPEndpoint = Field(
        description="The full OTLP/HTTP metrics URL, e.g. http://victoria-metrics:8428/opentelemetry/v1/metrics "
        "(the sidecar's TRAINGUARD_OTLP_ENDPOINT)."
    )
    interval: Duration = Field(
        default=OTLP_INTERVAL_DEFAULT, description="Time between pushes, 1s to 1h (--otlp-interval)."
    )
    headers_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="A key of a Secret in the monitor's namespace holding headers for every push, as "
        "OTEL_EXPORTER_OTLP_HEADERS reads them (key=value,key2=value2, e.g. Authorization=Bearer%20<token>); "
        "the sidecar gets it from the Secret, so the pod spec never shows it. A missing Secret or key does "
        "not hold the pod: the sidecar then pushes without these headers.",
    )

    @field_validator("interval")
    @classmethod
    def _interval_sane(cls, v: str) -> str:
        if not 1 <= duration_seconds(v) <= 3600:
            raise ValueError(f"interval {v!r} must be between 1s and 1h")
        return v

    def interval_seconds(self) -> float:
        return duration_seconds(self.interval)

    model_config = cel_rules(
        cel(
            f"self.endpoint.matches({cel_string(OTLP_ENDPOINT_PATTERN)})", OTLP_ENDPOINT_ALLOWED, ".endpoint"
        ),
    )


class Exporter(Model):
    image: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        description="Overrides the sidecar's image. Unset: the operator's --sidecar-image (the chart sets it "
        "to the operator's own image), so an upgrade moves the sidecars of new pods with the operator.",
    )
    port: int = Field(
        default=9400, ge=1024, le=65535, description="Non-privileged port the sidecar serves on."
    )
    scrape_interval: Duration = "15s"
    gpu_backend: Literal["nvml", "dcgm", "simulated"] = Field(
        default="nvml",
        description=(
            "nvml: the sidecar reads the GPUs itself. dcgm: the rules read an existing dcgm-exporter "
            "(its series are joined to this job's pods). simulated: seeded fake GPUs, for demos and tests."
        ),
    )
    dcgm_job_label: str = Field(
        default="",
        max_length=128,
        description="With gpuBackend dcgm: the Prometheus `job` label of dcgm-exporter's series, if any.",
    )
    otlp: OTLPExport | None = Field(
        default=None,
        description="Also push the sidecar's metrics over OTLP, for a store without Prometheus (docs/otlp.md).",
    )

    @model_validator(mode="after")
    def _interval_sane(self) -> Exporter:
        seconds = duration_seconds(self.scrape_interval)
        if not 1 <= seconds <= 300:
            raise ValueError("scrapeInterval must be between 1s and 5m")
        return self

    def image_override(self) -> str | None:
        """The image this monitor asks for instead of the operator's, if any."""
        return None if self.image in EARLIER_DEFAULT_IMAGES else self.image


class Baseline(Model):
    """Dynamic baselines: mean and deviation over a trailing window that ends before the judged window."""

    warmup_steps: int | None = Field(
        default=None,
        ge=0,
        le=100_000_000,
        description="Steps before baseline alerts may fire; by mode: training 1000, finetuning 100.",
    )
    sigma: float = Field(default=3.0, gt=0, le=20, description="How many deviations count as anomalous.")
    window: Duration = Field(default="1h", description="Length of the trailing baseline window.")
    offset: Duration = Field(
        default="10m",
        description="The most recent span left out of the baseline, so an anomaly does not drag its own baseline.",
    )
    min_stddev_ratio: float = Field(
        default=0.05,
        gt=0,
        le=1,
        description="Floor of the deviation as a share of the mean, so a flat signal does not alert on noise.",
    )

    @model_validator(mode="after")
    def _window_longer_than_offset(self) -> Baseline:
        if duration_seconds(self.window) < 60:
            raise ValueError("window must be at least 1m")
        if duration_seconds(self.offset) >= duration_seconds(self.window):
            raise ValueError("offset must be shorter than window")
        return self


class Checkpoint(Model):
    incremental_every_steps: int = Field(default=100, ge=1, le=10_000_000)
    full_every_steps: int = Field(default=1000, ge=1, le=100_000_000)
    timeout: Duration = Field(
        default="5m",
        description="How long a checkpoint may take; a stall is only judged past it (at least 5m).",
    )

    @model_validator(mode="after")
    def _full_is_multiple(self) -> Checkpoint:
        if self.full_every_steps % self.incremental_every_steps:
            raise ValueError(
                f"fullEverySteps ({self.full_every_steps}) must be a multiple of incrementalEverySteps "
                f"({self.incremental_every_steps})"
            )
        return self

    model_config = cel_rules(
        cel(
            "self.fullEverySteps % self.incrementalEverySteps == 0",
            "fullEverySteps must be a multiple of incrementalEverySteps",
            ".fullEverySteps",
        )
    )


NonFiniteLossAction = Literal["PauseAndPinCheckpoint", "Notify"]
NodeFaultAction = Literal["CheckpointCordonReschedule", "Cordon", "Notify"]
StallAction = Literal["RestartFromCheckpoint", "Notify"]
InterruptedAction = Literal["RestartFromCheckpoint", "Notify"]
EccDegradedAction = Literal["CordonAfterCheckpoint", "Notify"]
MaintenanceAction = Literal["CheckpointAndMove", "Notify"]
SlowNodeAction = Literal["ReplaceAtCheckpoint", "ReplaceNow", "Notify"]


class SlowNodeActions(Model):
    """The slowNode class's action per signal: a GPU's own degradation and a slow rank are different
    evidence, so each has its level (docs/p0-response.md)."""

    gpu: SlowNodeAction = Field(
        default="ReplaceAtCheckpoint",
        description="GPUPCIeLinkDegraded, GPUClocksThrottled, GPUClockBelowPeers (P1s, confirmed by the job's "
        "sidecar on the node): ReplaceAtCheckpoint waits for the job's next periodic checkpoint (up to "
        "slowNodeCheckpointWait), then cordons and taints the node and moves its rank(s) off it through the "
        "owner (a spare where one is labelled; a lemon node never is), within jobRestartBudget and the cordon "
        "caps; ReplaceNow takes an emergency checkpoint first instead of waiting; Notify does nothing more. "
        "Default ReplaceAtCheckpoint: a degraded GPU slows every step of a synchronous gang until it is "
        "replaced, does not heal by itself, and waiting for a checkpoint the job takes anyway loses no work.",
    )
    straggler: SlowNodeAction = Field(
        default="Notify",
        description="StragglerRank (P1, a rank's step time an outlier among its peers; confirmed from the "
        "sidecars' step times or the job's rule in Prometheus): the same levels. Default Notify: a slow rank "
        "has causes a new node does not cure (its data shard, an input pipeline, a noisy neighbour), so "
        "a person decides; choose ReplaceNow for a rank so slow the whole gang waits on it.",
    )


class RemediationActions(Model):
    """The automatic step per response class (the P0 classes and eccDegraded, a P1); `Notify` means
    none (Alertmanager has already notified)."""

    non_finite_loss: NonFiniteLossAction = Field(
        default="PauseAndPinCheckpoint",
        description="TrainingLossNonFinite: pause training and pin the newest checkpoint saved before the "
        "NaN, then, where every pod of the job runs its trainer under `trainguard launch`, restart the "
        "trainers in place from it (within jobRestartBudget); without launchers training stays paused at the "
        "pin. Never cordons.",
    )
    node_fault: NodeFaultAction = Field(
        default="CheckpointCordonReschedule",
        description="GPUNodeDown, GPUDoubleBitECCError, GPUCriticalXid, GPULost: cordon and taint the node "
        "(first: that disturbs no running pod), an emergency checkpoint from the healthy ranks, and restart "
        "the gang away from it (CheckpointCordonReschedule), or only cordon and taint (Cordon). The node "
        "must host a live pod of the job, and a GPU fault is first confirmed by the job's sidecar there.",
    )
    stall: StallAction = Field(
        default="Notify",
        description="TrainingJobStalled: restart the gang from the newest good checkpoint "
        "(RestartFromCheckpoint), within jobRestartBudget: in place where every pod runs `trainguard launch`, "
        "else by deleting its pods.",
    )
    interrupted: InterruptedAction = Field(
        default="RestartFromCheckpoint",
        description="TrainingInterrupted (a training pod OOMKilled, failed or evicted, its Job failed, or a "
        "trainer under `trainguard launch` failed): restart the gang from the newest good checkpoint, within "
        "jobRestartBudget: in place where every pod runs `trainguard launch`, else by deleting its pods.",
    )
    ecc_degraded: EccDegradedAction = Field(
        default="CordonAfterCheckpoint",
        description="GPUSingleBitECCErrorsHigh, GPURowRemapPending, GPURowRemapFailure and "
        "GPURetiredPagesPending (P1s: the GPU's memory is degrading and the node should be drained): cordon "
        "and taint the node within maxCordonedNodes, then ask every rank for a checkpoint "
        "(CordonAfterCheckpoint: the node takes no new pods before the checkpoint). The job is not restarted: it keeps running on "
        "the node until it next restarts, and the node takes no new pods.",
    )
    maintenance: MaintenanceAction = Field(
        default="CheckpointAndMove",
        description="NodeMaintenancePlanned (a node of the job cordoned or drained by a person, or annotated "
        "trainguard.io/maintenance-at with an RFC 3339 time within twice emergencyCheckpointTimeout): a full "
        "checkpoint from every rank, evictions of the job's pods held until it is taken, then the job moved "
        "off the node as after a node fault (CheckpointAndMove; an annotated node not yet cordoned is "
        "cordoned). Not counted against jobRestartBudget.",
    )
    slow_node: SlowNodeActions = Field(
        default_factory=SlowNodeActions,
        description="The slowNode class (slow, not dead: a degraded GPU or a straggling rank, P1s), per signal.",
    )


class Remediation(Model):
    """The automatic P0 response; every action is idempotent, rate-limited and recorded."""

    enabled: bool = True
    dry_run: bool = Field(default=False, description="Record and announce every action without doing it.")
    actions: RemediationActions = Field(default_factory=RemediationActions)
    emergency_checkpoint_timeout: Duration = Field(
        default="5m",
        description="How long a node fault waits for the healthy ranks' emergency checkpoint before it "
        "cordons and restarts anyway (eccDegraded: for every rank's, before it cordons).",
    )
    slow_node_checkpoint_wait: Duration = Field(
        default="2h",
        description="slowNode ReplaceAtCheckpoint: how long to wait for the job's next periodic checkpoint "
        "before giving up (the record fails, nothing is cordoned or restarted: the slow node stays, "
        "Alertmanager has notified). Set it above the job's checkpoint interval.",
    )
    max_cordoned_nodes: int | None = Field(
        default=None,
        ge=0,
        le=1000,
        description="Cluster-wide cap on nodes cordoned by trainguard per cordonWindow, counted over every "
        "monitor; unset: 10% of the GPU nodes (at least 1). At the cap trainguard notifies instead of "
        "cordoning or restarting.",
    )
    cordon_window: Duration = Field(default="10m", description="The window maxCordonedNodes counts over.")
    job_restart_budget: int = Field(
        default=3,
        ge=0,
        le=100,
        description="Gang restarts of this job per budgetWindow; past it trainguard notifies instead.",
    )
    budget_window: Duration = Field(default="24h", description="The window jobRestartBudget counts over.")
    training_advice: bool = Field(
        default=False,
        description="On GradientExplosion (a P1), post clip_gradients to the trainers through their "
        "sidecars (the SDK's advisories()).",
    )


class PolicyRef(Model):
    name: K8sName


RACK_LABEL = "topology.kubernetes.io/zone"


class Topology(Model):
    rack_label: str = Field(
        default=RACK_LABEL,
        max_length=253,
        pattern=r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
        description="The node label that names a node's rack (read from kube-state-metrics' kube_node_labels, "
        "which must allow it: --metric-labels-allowlist=nodes=[<label>]); RackThermalEvent groups by it.",
    )

    def ksm_label(self) -> str:
        """kube-state-metrics' name for the label: label_ and the name with every other character as _."""
        return "label_" + "".join(c if c.isalnum() else "_" for c in self.rack_label)


COST_LABELS_MAX = 8
COST_LABEL_NAME = r"^[a-zA-Z_][a-zA-Z0-9_]*$"
COST_LABELS_RESERVED: tuple[str, ...] = (
    *COMMON_LABELS,
    *DCGM_LABELS,
    *("job", "instance", "le", "quantile", "alertname", "alertstate", "priority", "severity", "kind", "rack"),
)
"""Labels the cost series, the raw series they come from or Prometheus already give a meaning; a cost
label of that name would overwrite or shadow them."""


def cost_label_problem(name: str) -> str | None:
    """Why `name` cannot be a spec.costLabels key, or None when it can."""
    if not re.fullmatch(COST_LABEL_NAME, name) or name.startswith("__"):
        return (
            f"{name!r} is not a Prometheus label name "
            "(letters, digits and _, not starting with a digit or __)"
        )
    if name in COST_LABELS_RESERVED:
        return f"{name!r} is reserved (it would overwrite a label trainguard's series carry)"
    return None


class TrainingJobMonitorSpec(Model):
    selector: LabelSelector = Field(description="The job's pods, in the monitor's namespace.")
    workload_ref: WorkloadRef | None = None
    mode: Mode = Mode.TRAINING
    gpus_per_pod: int = Field(default=8, ge=0, le=64)
    exporter: Exporter = Field(default_factory=Exporter)
    baseline: Baseline = Field(default_factory=Baseline)
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    remediation: Remediation = Field(default_factory=Remediation)
    topology: Topology = Field(default_factory=Topology)
    policy_refs: list[PolicyRef] = Field(
        default_factory=list,
        max_length=8,
        description="AlertPolicies in the same namespace, applied in order (later ones override earlier).",
    )
    cost_labels: dict[str, LabelValue] = Field(
        default_factory=dict,
        max_length=COST_LABELS_MAX,
        description="Labels stamped onto the job's cost series (GPU-hours, peak GPU memory) for charge-back, "
        "e.g. {team: ml-infra, model: llama-70b}: Prometheus label names, not one a series already carries.",
    )

    @field_validator("cost_labels")
    @classmethod
    def _cost_label_names(cls, v: dict[str, str]) -> dict[str, str]:
        problems = [p for p in map(cost_label_problem, v) if p]
        if problems:
            raise ValueError("; ".join(problems))
        return v

    @model_validator(mode="after")
    def _selector_not_empty(self) -> TrainingJobMonitorSpec:
        if self.selector.is_empty():
            raise ValueError("selector must name at least one label (matchLabels or matchExpressions)")
        names = [p.name for p in self.policy_refs]
        if len(set(names)) != len(names):
            raise ValueError("policyRefs must not name the same policy twice")
        return self

    def warmup_steps(self) -> int:
        if self.baseline.warmup_steps is not None:
            return self.baseline.warmup_steps
        return WARMUP_STEPS_BY_MODE[self.mode]

    model_config = cel_rules(
        cel(
            "size(self.selector.matchLabels) > 0 || size(self.selector.matchExpressions) > 0",
            "selector must name at least one label (matchLabels or matchExpressions)",
            ".selector",
        ),
        cel(
            "self.policyRefs.all(p, self.policyRefs.exists_one(x, x.name == p.name))",
            "policyRefs must not name the same policy twice",
            ".policyRefs",
        ),
        cel(
            f"self.costLabels.all(k, k.matches({cel_string(COST_LABEL_NAME)}) && !k.startsWith('__') && "
            f"!(k in {list(COST_LABELS_RESERVED)}))",
            "costLabels keys must be Prometheus label names (letters, digits and _, not starting with a digit "
            f"or __) and none of {', '.join(COST_LABELS_RESERVED)}",
            ".costLabels",
        ),
    )


RemediationPhase = Literal["Planned", "DryRun", "InProgress", "Succeeded", "Failed", "Skipped"]
RemediationStepKind = Literal[
    "Pause",
    "PinCheckpoint",
    "RequestCheckpoint",
    "AwaitCheckpoint",
    "ConfirmFault",
    "Cordon",
    "Taint",
    "RestartInPlace",
    "RestartGang",
    "ReplacePod",
    "ConfirmPlacement",
    "Advise",
    "Notify",
]
REMEDIATION_STEPS_MAX = 16
REMEDIATION_PARAMS_MAX = 8
REMEDIATION_PARAM_VALUE_MAX = 256
REMEDIATION_DETAIL_MAX = 512
REMEDIATION_MESSAGE_MAX = 1024
ParamValue = Annotated[str, Field(max_length=REMEDIATION_PARAM_VALUE_MAX)]


class StepProgress(Model):
    """How far a step got, in fields a resumed executor reads (never the detail, which is for people):
    written before the step acts, so an operator killed halfway redoes the step from where it was."""

    count: int | None = Field(
        default=None,
        ge=0,
        description="RestartGang: how many pods of the gang it deletes (the new gang's size); ReplacePod: "
        "how many pods it replaces.",
    )
    created_up_to: int | None = Field(
        default=None,
        ge=0,
        description="RestartGang: unix seconds of the newest old pod's creation: a redo deletes only pods "
        "(or a JobSet's child Jobs) created up to then, never their replacements.",
    )
    uids: str | None = Field(
        default=None,
        max_length=2048,
        description="ReplacePod: each pod it replaces as name/uid, followed by /name/uid of the JobSet child "
        "Job it deletes with it, comma-separated: a redo acts on those only, never on their replacements.",
    )
    past_step: float | None = Field(
        default=None,
        description="RequestCheckpoint: the step every asked rank must save past (the newest any of them had). "
        "AwaitCheckpoint: the newest step any rank had saved when the wait began.",
    )
    since: float | None = Field(
        default=None,
        description="AwaitCheckpoint: unix seconds when the wait began: a redo keeps its deadline.",
    )
    asked: int | None = Field(
        default=None, ge=0, description="RequestCheckpoint: how many sidecars were asked."
    )
    generation: int | None = Field(
        default=None,
        ge=1,
        description="RestartInPlace: the generation posted to every pod's launcher: a redo posts the same one, "
        "which a launcher that already runs it ignores. ReplacePod: the generation put in the replacement's "
        "resume-from pointer, which the RestartInPlace after it (rejoin) posts.",
    )
    size: int | None = Field(
        default=None,
        ge=1,
        description="RestartInPlace after ReplacePod (rejoin): how many pods the gang has, the replacement "
        "included: the step ends when that many launchers run the generation.",
    )
    resume_from: str | None = Field(
        default=None,
        max_length=4096,
        description="RestartGang and ReplacePod: the checkpoint pointer (JSON {step, path, kind, ts}, or null when "
        "none was known) the new pods are given: the webhook reads it here, with ReplacePod's generation, until "
        "ConfirmPlacement sees them placed. When a rejoin follows ReplacePod, the healthy ranks restart from it.",
    )


class RemediationStep(Model):
    """One step of a remediation, in the order it is carried out."""

    kind: RemediationStepKind
    params: dict[str, ParamValue] = Field(default_factory=dict, max_length=REMEDIATION_PARAMS_MAX)
    phase: RemediationPhase
    detail: str = Field(
        default="", max_length=REMEDIATION_DETAIL_MAX, description="What the step found or did."
    )
    time: str = Field(default="", max_length=40, description="RFC 3339 time of the step's last change.")
    progress: StepProgress | None = None


class RemediationRecord(Model):
    """One decision about one alert and its steps, written before any step is taken, so an operator
    restarted halfway resumes it where it stands instead of repeating or losing a step."""

    id: str = Field(max_length=128)
    fingerprint: str = Field(max_length=64)
    alert: str = Field(max_length=128)
    p0_class: str = Field(
        alias="class",
        max_length=32,
        description="The response class: nonFiniteLoss, nodeFault, stall, interrupted, eccDegraded, maintenance, "
        "slowNode or trainingAdvice.",
    )
    node: str = Field(default="", max_length=253)
    gpu: str = Field(default="", max_length=64)
    dry_run: bool = False
    phase: RemediationPhase
    skipped: str = Field(
        default="",
        max_length=REMEDIATION_MESSAGE_MAX,
        description="Why the automatic response was not taken (a duplicate, disabled, the cordon cap, the "
        "restart budget); empty when it is.",
    )
    message: str = Field(
        default="", max_length=REMEDIATION_MESSAGE_MAX, description="The latest news: a skip or a failure."
    )
    created: str = Field(max_length=40, description="RFC 3339.")
    updated: str = Field(max_length=40, description="RFC 3339.")
    steps: list[RemediationStep] = Field(default_factory=list, max_length=REMEDIATION_STEPS_MAX)
    signature: str | None = Field(
        default=None,
        max_length=64,
        description="The operator's HMAC over what the record orders; a record without a valid one is "
        "refused.",
    )
    owner: str | None = Field(
        default=None,
        max_length=128,
        description="The executor carrying the record out (claimed before it acts).",
    )


PENDING_SIGNALS_MAX = 32
PENDING_LABELS_MAX = 32
PENDING_LABEL_VALUE_MAX = 256
PendingLabelValue = Annotated[str, Field(max_length=PENDING_LABEL_VALUE_MAX)]


class PendingSignal(Model):
    """A signal the receiver answered 200 for and the planner has not decided yet. Written to the status
    before the answer, removed by the planner in the write that decides it, and planned again by the
    leader's pass when an operator was killed or lost leadership in between (docs/p0-response.md)."""

    id: str = Field(
        max_length=128,
        description="The alert instance: the fingerprint and the start in unix seconds, as the record it "
        "becomes is named.",
    )
    alertname: str = Field(max_length=128)
    severity: str = Field(max_length=16)
    labels: dict[str, PendingLabelValue] = Field(
        default_factory=dict,
        max_length=PENDING_LABELS_MAX,
        description="The alert's labels (those that fit the bounds; the identifying ones always do).",
    )
    fingerprint: str = Field(max_length=64)
    source: Literal["alertmanager", "sidecar", "operator"]
    starts_at: str = Field(max_length=40, description="RFC 3339: when the fault started, as the sender said.")
    received: str = Field(max_length=40, description="RFC 3339: when the receiver took it in.")


class GoodputCarried(Model):
    """Training time lost that remediation records pruned from the status had counted, so the goodput
    counters (remediation/goodput.py) go on from there."""

    restart_seconds: float = Field(
        default=0.0, ge=0, description="Seconds lost to remediations that stop training."
    )
    maintenance_seconds: float = Field(
        default=0.0,
        ge=0,
        description="Seconds lost to planned maintenance moves (a person's cordon or drain).",
    )
    redone_work_seconds: float = Field(
        default=0.0,
        ge=0,
        description="Seconds spent again on work done since the checkpoint a restart resumed from.",
    )
    until: str = Field(
        default="", max_length=40, description="RFC 3339: the records kept count only the time after it."
    )


class RuleFormReason(Model):
    """One thing of the monitor that keeps its catalogue rules off the shared group."""

    reason: str = Field(
        max_length=64,
        description="What no series can carry (docs/rendering.md, what is not shared): one of "
        + ", ".join(NOT_SHARED_REASONS)
        + ".",
    )
    message: str = Field(
        max_length=REASON_MESSAGE_MAX, description="The monitor's own value and why, in words."
    )


class RulesStatus(Model):
    """Where the monitor's rules live (docs/rendering.md, the shared form)."""

    form: Literal["per-monitor", "shared", "own-group"] = Field(
        description="per-monitor: the operator runs --rule-form per-monitor, a group per monitor; shared: "
        "the shared group judges the job; own-group: the operator runs the shared form and the monitor "
        "keeps a group of its own, for `reasons`."
    )
    reasons: list[RuleFormReason] = Field(
        default_factory=list,
        max_length=REASONS_MAX,
        description="Why the monitor keeps a group of its own (empty when it does not), the first "
        f"{REASONS_MAX}.",
    )
    more_reasons: int = Field(default=0, ge=0, description="Reasons beyond those listed.")
    custom_rules: int = Field(
        default=0, ge=0, description="Custom rules, in a group of their own beside the shared group."
    )


class TrainingJobMonitorStatus(Model):
    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list, max_length=16)
    pods_monitored: int = 0
    pods_unmonitored: int = Field(
        default=0,
        ge=0,
        description="Live pods of the selector running without the exporter (admitted before the operator "
        "knew the monitor, or while its webhook was down): nothing watches them until they are recreated; "
        "a Warning Event (PodsWithoutExporter) names them.",
    )
    input_hash: str = Field(default="", max_length=128)
    receiver_secret: str = Field(
        default="",
        max_length=253,
        description="The receiver Secret trainguard wrote inline values into; emptied once none are left.",
    )
    remediations: list[RemediationRecord] = Field(default_factory=list, max_length=50)
    pending_signals: list[PendingSignal] = Field(
        default_factory=list,
        max_length=PENDING_SIGNALS_MAX,
        description="Signals answered 200 and not decided yet, oldest first, one per fault; the planner "
        "removes each as it decides it.",
    )
    goodput: GoodputCarried | None = Field(
        default=None,
        description="Time lost that pruned remediation records had counted (written as they are pruned).",
    )
    rules: RulesStatus | None = Field(
        default=None, description="Which rule form the monitor's rules take, and why (--rule-form)."
    )


class TrainingJobMonitor(Model):
    api_version: Literal["trainguard.io/v1alpha1"] = "trainguard.io/v1alpha1"
    kind: Literal["TrainingJobMonitor"] = "TrainingJobMonitor"
    metadata: Metadata
    spec: TrainingJobMonitorSpec
    status: TrainingJobMonitorStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace

    def owner_reference(self) -> dict[str, Any]:
        ref: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": "TrainingJobMonitor",
            "name": self.name,
            "controller": True,
            "blockOwnerDeletion": True,
        }
        if self.metadata.uid:
            ref["uid"] = self.metadata.uid
        return ref
