"""The quickstart's monitor and policy in a test's namespace, the Indexed Job they watch, and how a
test knows the operator has taken them in (the monitor's conditions)."""

from __future__ import annotations

from typing import Any

import yaml

from e2e.cluster import REPO, Cluster
from tests.processes import wait_for

QUICKSTART = REPO / "examples" / "quickstart.yaml"
MON = ("trainguard.io/v1alpha1", "TrainingJobMonitor")
NAME = "trainguard-llama-pretrain"
"""The name of the objects the operator renders for the quickstart's monitor."""


def quickstart(ns: str, **policy_spec: Any) -> list[dict[str, Any]]:
    """The quickstart's monitor and policy in `ns`, the policy's spec updated with `policy_spec`."""
    docs = [d for d in yaml.safe_load_all(QUICKSTART.read_text()) if d]
    for d in docs:
        d["metadata"]["namespace"] = ns
        if d["kind"] == "AlertPolicy":
            d["spec"].update(policy_spec)
    return docs


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return dict(c)
    return None


def ready(
    cluster: Cluster, ns: str, name: str = "llama-pretrain", generation: int | None = None
) -> dict[str, Any] | None:
    """The monitor once Ready (at `generation`, if given), else None."""
    obj = cluster.get(*MON, ns, name)
    c = condition(obj, "Ready")
    if (
        c
        and c["status"] == "True"
        and (generation is None or obj["status"].get("observedGeneration") == generation)
    ):
        return obj
    return None


def indexed_job(ns: str, name: str = "llama-pretrain", completions: int = 2) -> dict[str, Any]:
    """The quickstart's training job: `completions` pods of 8 GPUs each, a trainer and a log shipper."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "completionMode": "Indexed",
            "completions": completions,
            "parallelism": completions,
            "template": {
                "metadata": {"labels": {"app": "llama-pretrain"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "registry.invalid/llama:1",
                            "env": [{"name": "EXISTING", "value": "kept"}],
                            "resources": {"limits": {"nvidia.com/gpu": "8"}},
                        },
                        {"name": "logshipper", "image": "registry.invalid/ship:1"},
                    ],
                },
            },
        },
    }


def start_job(
    cluster: Cluster,
    ns: str,
    remediation: dict[str, Any] | None = None,
    node_selector: dict[str, str] | None = None,
) -> list[Any]:
    """The quickstart's monitor (with a workloadRef to the Job and `remediation`) and policy, Ready, and
    the Job's 2 pods Running (on nodes matching `node_selector`, when given); returns the pods."""
    monitor, policy = quickstart(ns)
    monitor["spec"]["workloadRef"] = {"kind": "Job", "name": "llama-pretrain"}
    monitor["spec"]["remediation"] = {"emergencyCheckpointTimeout": "2s", **(remediation or {})}
    cluster.apply([monitor, policy])
    wait_for("monitor Ready", lambda: ready(cluster, ns))
    job = indexed_job(ns)
    if node_selector:
        job["spec"]["template"]["spec"]["nodeSelector"] = node_selector
    cluster.apply([job])
    return wait_for(
        "2 job pods Running",
        lambda: (items := cluster.core.list_namespaced_pod(ns, label_selector="app=llama-pretrain").items)
        and len(items) == 2 and all(p.status.phase == "Running" for p in items) and items,
        timeout=90,
    )  # fmt: skip
