"""The names trainguard writes on Kubernetes objects it does not own: node annotations and taints,
the spare-node label, the workload's resume pointer and the label of the namespaces holding a monitor. Users, dashboards and `trainguard uncordon`
read them, so each is defined here once (docs/architecture.md, "Public contracts"). Also the labels of
the objects it writes for itself, which its Secret-write policy checks."""

from __future__ import annotations

CORDONED_AT = "trainguard.io/cordoned-at"
"""On a node trainguard cordoned: unix seconds of the cordon (the storm guard counts from it)."""
CORDONED_BY = "trainguard.io/cordoned-by"
"""On a node trainguard cordoned: the remediation record's id. A cordon without it is a person's."""
CORDON_REASON = "trainguard.io/cordon-reason"
"""On a node trainguard cordoned: the alert and what was seen."""
MAINTENANCE_AT = "trainguard.io/maintenance-at"
"""Set by a person on a node: the planned maintenance time, RFC 3339 (e.g. 2026-12-03T22:00:00Z). The jobs
on it checkpoint and move off it ahead of that time (remediation/maintenance.py)."""
FAULTY_TAINT = "trainguard.io/faulty"
"""The NoSchedule taint on a faulty node; its value is the alert (kube_node_spec_taint shows it)."""
SPARE_LABEL = "trainguard.io/spare"
"""A warm spare node (`=true`); also the key of the NoSchedule taint that keeps other pods off it."""
FAULT_HISTORY = "trainguard.io/fault-history"
"""On a node trainguard acted on: a JSON list of its faults, [{ts, cause, record}] oldest first, bounded;
written with the cordon, so it outlives the operator and the cordon (remediation/lemon.py)."""
LEMON_LABEL = "trainguard.io/lemon"
"""On a node whose faults reach the platform's threshold (`=true`), kept by the leader; also the key of
the NoSchedule taint the leader puts on a lemon that is a spare, so no replacement lands on it."""
LEMON_REASON = "trainguard.io/lemon-reason"
"""On a lemon: its faults in the window against the platform's threshold, in words."""
RESUME_FROM = "trainguard.io/resume-from"
"""On the workload: JSON {step, path, kind, ts} of the checkpoint a gang restart resumes from. On a pod:
the pointer the webhook gave its exporter (TRAINGUARD_RESUME_FROM), which ConfirmPlacement checks (the
operator's pod cache keeps no environment)."""
MONITORED = "trainguard.io/monitored"
"""On a namespace that holds a TrainingJobMonitor (`=true`), kept by the operator: the sidecar-injection
webhook's namespaceSelector, so the apiserver calls it for no pod of another namespace
(deploy/namespace-label-policy.yaml lets the operator change this label of a namespace, nothing else)."""
MONITORED_VALUE = "true"

MANAGED_BY = "app.kubernetes.io/managed-by"
"""The label on every object the operator writes for itself, Secrets included, with the value
MANAGED_BY_VALUE: deploy/secret-write-policy.yaml lets the operator's ServiceAccount create or update
no Secret without it, nor one that lacked it before."""
MANAGED_BY_VALUE = "trainguard"
PART_OF = "app.kubernetes.io/part-of"
MANAGED_LABELS = {MANAGED_BY: MANAGED_BY_VALUE, PART_OF: "trainguard"}
"""The labels of the Secrets the operator writes in its own namespace (its key, the webhook's TLS)."""
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
"""The label the Job controller puts on each pod of an Indexed Job (Kubernetes 1.28 and later): its rank's
slot, which a replacement pod shares."""
