"""The PodMonitor takes a series' identity from its scrape target, never from what the pod exposes: a
tenant's pod must not pose as another tenant's job (issue 21)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import monitor, policy
from trainguard.catalog import COMMON_LABELS
from trainguard.render.kubernetes import EXPORTED_TARGET_LABELS, monitor_objects, pod_monitor
from trainguard.render.policy import effective_policy


def endpoint(**changes: Any) -> dict[str, Any]:
    (only,) = pod_monitor(monitor(**changes))["spec"]["podMetricsEndpoints"]
    return dict(only)


def test_scraped_labels_never_win_over_the_targets() -> None:
    ep = endpoint()
    assert "honorLabels" not in ep, "honorLabels would let a pod's own namespace and training_job win"


def test_every_identity_label_is_set_from_the_target() -> None:
    by_label = {r["targetLabel"]: r for r in endpoint()["relabelings"]}
    assert set(by_label) == set(COMMON_LABELS)
    assert by_label["namespace"]["sourceLabels"] == ["__meta_kubernetes_namespace"]
    assert by_label["pod"]["sourceLabels"] == ["__meta_kubernetes_pod_name"]
    assert by_label["node"]["sourceLabels"] == ["__meta_kubernetes_pod_node_name"]
    assert all(r["action"] == "replace" for r in by_label.values())


def test_training_job_is_the_monitors_name_whatever_the_pod_says() -> None:
    rule = next(r for r in endpoint(**{"metadata.name": "bert-finetune"})["relabelings"]
                if r["targetLabel"] == "training_job")  # fmt: skip
    assert rule == {"targetLabel": "training_job", "replacement": "bert-finetune", "action": "replace"}
    assert "sourceLabels" not in rule, "a source label would let the target's own labels choose the job"


def test_what_the_pod_exposed_under_a_target_label_is_dropped() -> None:
    (drop,) = endpoint()["metricRelabelings"]
    assert drop["action"] == "labeldrop" and drop["regex"] == EXPORTED_TARGET_LABELS
    # Prometheus renames a scraped label that a target label overrides to exported_<name>, and to
    # exported_exported_<name> when the pod exposed that too; a relabel regex is anchored at both ends
    for name in ("namespace", "pod", "node", "training_job", "job", "instance"):
        assert re.fullmatch(drop["regex"], f"exported_{name}"), name
        assert re.fullmatch(drop["regex"], f"exported_exported_{name}"), name
    for kept in (
        *COMMON_LABELS,
        "gpu",
        "UUID",
        "Hostname",
        "kind",
        "exported_gpu_x",
        "my_exported_namespace",
    ):
        assert not re.fullmatch(drop["regex"], kept), kept


def test_the_reconciled_objects_carry_the_same_pod_monitor() -> None:
    m = monitor()
    objs = monitor_objects(m, effective_policy(m, [policy()]))
    assert next(o for o in objs if o["kind"] == "PodMonitor") == pod_monitor(m)


def test_the_plain_prometheus_job_in_the_docs_does_what_the_pod_monitor_does() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "rendering.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "kubernetes_sd_configs" in b)
    (job,) = yaml.safe_load(textwrap.dedent(block))
    assert "honor_labels" not in job
    relabels = {r["target_label"]: r for r in job["relabel_configs"] if "target_label" in r}
    for rule in endpoint()["relabelings"]:
        assert relabels[rule["targetLabel"]].get("source_labels") == rule.get("sourceLabels"), rule
        assert relabels[rule["targetLabel"]].get("replacement") == rule.get("replacement"), rule
    assert job["metric_relabel_configs"] == [{"regex": EXPORTED_TARGET_LABELS, "action": "labeldrop"}]
