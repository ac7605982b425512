"""The seam between the rules and what feeds them: every series a rendered rule reads is exported by
the sidecar (the catalogue's metric contract), recorded by an earlier rule of the same group, or one
of the few external series named here. A rule on a series nothing exports never fires, silently."""

from __future__ import annotations

import pytest

from tests.conftest import monitor, policy
from tests.promql import selected_names
from trainguard.catalog import METRICS
from trainguard.catalog.metrics import GOODPUT_METRICS
from trainguard.render.policy import effective_policy
from trainguard.render.prometheus import rule_group

EXTERNAL = {
    "up": "Prometheus' own scrape health of the PodMonitor's targets",
    "kube_node_status_condition": "kube-state-metrics",
    "kube_node_labels": "kube-state-metrics (the rack label allowed with --metric-labels-allowlist)",
    "kube_pod_status_phase": "kube-state-metrics",
}
"""Series trainguard reads but neither exports nor records; each needs its source named."""


@pytest.mark.parametrize("backend", ["nvml", "simulated", "dcgm"])
@pytest.mark.parametrize("mode", ["training", "finetuning", "inference"])
def test_every_series_a_rule_reads_is_produced_by_something(backend: str, mode: str) -> None:
    m = monitor(**{"spec.exporter.gpuBackend": backend, "spec.mode": mode})
    group = rule_group(m, effective_policy(m, [policy()]))
    # the operator's goodput families, which the goodput rules read beside the sidecars' series
    exported = {metric.name for metric in (*METRICS, *GOODPUT_METRICS)}
    # a histogram is read through its series, not its family name
    exported |= {
        f"{m.name}{suffix}"
        for m in METRICS
        if m.type == "histogram"
        for suffix in ("_bucket", "_sum", "_count")
    }
    if backend == "dcgm":
        # the sidecar runs --backend none: none of its own per-GPU series exist, dcgm-exporter's do
        exported -= {m.name for m in METRICS if m.is_gpu and not m.name.startswith("DCGM_FI_")}
    recorded: set[str] = set()
    missing: dict[str, set[str]] = {}
    for rule in group["rules"]:
        # a latch reads its own last value (render/prometheus.py's UP_LAST_SEEN)
        reads = selected_names(rule["expr"]) - exported - recorded - set(EXTERNAL) - {rule.get("record")}
        if reads:
            missing[rule.get("record") or rule["alert"]] = reads
        if "record" in rule:
            recorded.add(rule["record"])
    assert missing == {}, f"rules read series that nothing produces: {missing}"


def test_the_check_catches_a_series_nobody_exports() -> None:
    assert selected_names('time() - max by (a) (trainguard_train_last_step_seconds{a="b"})') == {
        "trainguard_train_last_step_seconds"
    }
    assert "trainguard_train_last_step_seconds" not in {m.name for m in METRICS}
