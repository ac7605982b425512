"""The slow-GPU and straggler panels (issue 25): what each reads, and what its query computes on both
GPU backends, evaluated by promtool over input series (the sidecar's own names, and dcgm-exporter's as
the rules join them to the job, `trainguard_dcgm:`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.render.test_dashboards import substituted
from tests.toolchains import promtool_test_rules
from trainguard.catalog.metrics import THROTTLE_REASONS
from trainguard.render.dashboards import panel_queries, render_dashboards
from trainguard.render.prometheus import OWN_EXCESS, OWN_SPREAD

ROW = "Slow GPUs and stragglers"
JOB = {"namespace": "ml", "training_job": "llama-pretrain"}
"""The job the tests' substituted template variables select (tests/render/test_dashboards.py)."""


def board(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(render_dashboards()[name])
    return loaded


def row_panels(b: dict[str, Any], title: str) -> list[dict[str, Any]]:
    """The panels after the row titled `title`, up to the next row."""
    panels = b["panels"]
    (start,) = [i for i, p in enumerate(panels) if p["type"] == "row" and p["title"] == title]
    out = []
    for p in panels[start + 1 :]:
        if p["type"] == "row":
            break
        out.append(p)
    return out


def targets(panel: dict[str, Any]) -> dict[str, str]:
    """legendFormat -> expr of each target."""
    return {t["legendFormat"]: t["expr"] for t in panel["targets"]}


def job_queries() -> dict[str, dict[str, str]]:
    return {p["title"]: targets(p) for p in row_panels(board("training-job.json"), ROW)}


def test_the_job_dashboard_has_its_slow_gpu_row_last_so_other_panels_keep_their_ids() -> None:
    b = board("training-job.json")
    rows = [p["title"] for p in b["panels"] if p["type"] == "row"]
    assert rows[-1] == ROW, rows
    assert [p["title"] for p in row_panels(b, ROW)] == [
        "PCIe link generation",
        "PCIe link width",
        "PCIe link bandwidth share",
        "SM clock",
        "SM clock / job median",
        "Clock throttle reasons held",
        "Straggler excess per rank",
    ]


def test_links_and_clocks_are_drawn_against_their_maxima_on_both_backends() -> None:
    q = job_queries()
    for title, metric in (("PCIe link generation", "LINK_GEN"), ("PCIe link width", "LINK_WIDTH")):
        current, maximum = q[title]["{{pod}} GPU {{gpu}}"], q[title]["max {{pod}} GPU {{gpu}}"]
        for backend in ("", "trainguard_dcgm:"):
            assert f"{backend}DCGM_FI_DEV_PCIE_{metric}{{" in current, current
            assert f"{backend}DCGM_FI_DEV_PCIE_MAX_{metric}{{" in maximum, maximum
    clock = q["SM clock"]
    assert "DCGM_FI_DEV_SM_CLOCK{" in clock["{{pod}} GPU {{gpu}}"]
    assert "DCGM_FI_DEV_MAX_SM_CLOCK{" in clock["max {{modelName}}"]
    assert clock["job median"].startswith("quantile by (namespace, training_job) (0.5, ")


def test_the_straggler_panel_reads_the_stragglerrank_recording_rules() -> None:
    q = job_queries()["Straggler excess per rank"]
    assert q["{{pod}}"] == f'{OWN_EXCESS}{{namespace="$namespace",training_job="$training_job"}}'
    assert OWN_SPREAD in q["outlier bound"]


def test_every_throttle_reason_is_decoded_from_dcgm_exporters_bitmask() -> None:
    held = job_queries()["Clock throttle reasons held"]["{{reason}}"]
    for reason, bit in THROTTLE_REASONS.items():
        assert f'/ {bit}) % 2, "reason", "{reason}"' in held, reason


def test_the_node_row_shows_each_gpus_clock_and_link() -> None:
    b = board("cluster-health.json")
    (row,) = [p for p in b["panels"] if p["type"] == "row" and p.get("repeat") == "node"]
    titles = [p["title"] for p in row_panels(b, row["title"])]
    assert titles[3:] == ["SM clock", "PCIe link bandwidth share"], titles
    for title, expr in panel_queries(b):
        if title in titles[3:]:
            assert 'Hostname="$node"' in expr, expr


# ---- the queries, evaluated ---------------------------------------------------------------------


def gpu_labels(pod: str, gpu: int, dcgm: bool, **extra: str) -> dict[str, str]:
    """One GPU's labels: the sidecar's, or (dcgm) dcgm-exporter's as the join rules record them."""
    labels = {**JOB, "pod": pod, "node": f"node-{pod}", "gpu": str(gpu), "UUID": f"GPU-{pod}-{gpu}",
              "modelName": "H100", "Hostname": f"node-{pod}", **extra}  # fmt: skip
    return labels | ({"job": "dcgm-exporter"} if dcgm else {})


def selector(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def gpu_series(
    name: str, pod: str, gpu: int, values: str, dcgm: bool = False, **extra: str
) -> dict[str, str]:
    """One GPU's series of the job, as the sidecar exports it or (dcgm) as the join rules record it."""
    prefix = "trainguard_dcgm:" if dcgm else ""
    return {"series": prefix + name + selector(gpu_labels(pod, gpu, dcgm, **extra)), "values": values}


def evaluate(promtool: str, tmp: Path, series: list[dict[str, str]], tests: list[dict[str, Any]]) -> None:
    """promtool test rules: each test's expression (a panel's, as Grafana sends it) at 1m."""
    (tmp / "rules.yml").write_text(yaml.safe_dump({"groups": []}))
    (tmp / "test.yml").write_text(
        yaml.safe_dump(
            {
                "rule_files": ["rules.yml"],
                "evaluation_interval": "1m",
                "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": tests}],
            }
        )
    )
    promtool_test_rules(promtool, tmp)


def sample(pod: str, gpu: int, dcgm: bool, value: float) -> dict[str, Any]:
    """An expected sample of a per-GPU query."""
    return {"labels": selector(gpu_labels(pod, gpu, dcgm)), "value": value}


def one(title: str, legend: str) -> str:
    return substituted(job_queries()[title][legend])


@pytest.mark.parametrize("dcgm", [False, True], ids=["sidecar", "dcgm"])
def test_the_link_share_halves_for_half_the_lanes_or_one_generation_down(
    promtool: str, tmp_path: Path, dcgm: bool
) -> None:
    links = {  # (gen, width) of GPUs 0..2 of llama-0: full, half its lanes, one generation down
        0: (5, 16),
        1: (5, 8),
        2: (4, 16),
    }
    series = []
    for gpu, (gen, width) in links.items():
        series += [
            gpu_series("DCGM_FI_DEV_PCIE_LINK_GEN", "llama-0", gpu, f"{gen}x3", dcgm),
            gpu_series("DCGM_FI_DEV_PCIE_LINK_WIDTH", "llama-0", gpu, f"{width}x3", dcgm),
            gpu_series("DCGM_FI_DEV_PCIE_MAX_LINK_GEN", "llama-0", gpu, "5x3", dcgm),
            gpu_series("DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH", "llama-0", gpu, "16x3", dcgm),
        ]
    expected = [sample("llama-0", gpu, dcgm, value) for gpu, value in ((0, 1), (1, 0.5), (2, 0.5))]
    evaluate(
        promtool,
        tmp_path,
        series,
        [
            {
                "expr": one("PCIe link bandwidth share", "{{pod}} GPU {{gpu}}"),
                "eval_time": "2m",
                "exp_samples": expected,
            }
        ],
    )


@pytest.mark.parametrize("dcgm", [False, True], ids=["sidecar", "dcgm"])
def test_a_gpu_clocked_below_its_peers_is_a_share_of_the_jobs_median(
    promtool: str, tmp_path: Path, dcgm: bool
) -> None:
    clocks = {("llama-0", 0): 1980, ("llama-0", 1): 1980, ("llama-1", 0): 1980, ("llama-1", 1): 1386}
    series = [
        gpu_series("DCGM_FI_DEV_SM_CLOCK", pod, gpu, f"{mhz}x3", dcgm) for (pod, gpu), mhz in clocks.items()
    ]
    series += [gpu_series("DCGM_FI_DEV_MAX_SM_CLOCK", pod, gpu, "1980x3", dcgm) for pod, gpu in clocks]

    evaluate(
        promtool,
        tmp_path,
        series,
        [
            {
                "expr": one("SM clock / job median", "{{pod}} GPU {{gpu}}"),
                "eval_time": "2m",
                "exp_samples": [
                    sample(p, g, dcgm, 0.7 if mhz < 1980 else 1) for (p, g), mhz in clocks.items()
                ],
            },
            {
                "expr": one("SM clock", "job median"),
                "eval_time": "2m",
                "exp_samples": [
                    {"labels": '{namespace="ml",training_job="llama-pretrain"}', "value": 1980e6}
                ],
            },
            {
                "expr": one("SM clock", "max {{modelName}}"),
                "eval_time": "2m",
                "exp_samples": [{"labels": '{modelName="H100"}', "value": 1980e6}],
            },
        ],
    )


def reasons_held(counts: dict[str, int]) -> list[dict[str, Any]]:
    return [{"labels": f'{{reason="{r}"}}', "value": counts.get(r, 0)} for r in THROTTLE_REASONS]


def test_throttle_reasons_are_counted_per_reason_from_the_sidecars_series(
    promtool: str, tmp_path: Path
) -> None:
    held = {
        ("llama-0", 0): {"hw_slowdown"},
        ("llama-1", 0): {"hw_slowdown", "sw_power_cap"},
        ("llama-1", 1): set(),
    }
    series = [
        gpu_series("trainguard_gpu_clock_throttle_reason", pod, gpu, f"{int(r in on)}x3", reason=r)
        for (pod, gpu), on in held.items()
        for r in THROTTLE_REASONS
    ]
    evaluate(
        promtool,
        tmp_path,
        series,
        [
            {
                "expr": one("Clock throttle reasons held", "{{reason}}"),
                "eval_time": "2m",
                "exp_samples": reasons_held({"hw_slowdown": 2, "sw_power_cap": 1}),
            }
        ],
    )


def test_throttle_reasons_are_decoded_from_dcgm_exporters_bitmask(promtool: str, tmp_path: Path) -> None:
    masks = {  # a power brake (with the hw_slowdown NVML sets with it), an idle GPU, a thermal slowdown
        ("llama-0", 0): THROTTLE_REASONS["hw_power_brake"] | THROTTLE_REASONS["hw_slowdown"],
        ("llama-0", 1): THROTTLE_REASONS["gpu_idle"],
        ("llama-1", 0): THROTTLE_REASONS["hw_thermal"]
        | THROTTLE_REASONS["sw_thermal"]
        | THROTTLE_REASONS["hw_slowdown"],
        ("llama-1", 1): 0,
    }
    series = [
        gpu_series("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", pod, gpu, f"{mask}x3", dcgm=True)
        for (pod, gpu), mask in masks.items()
    ]
    counts = {"hw_power_brake": 1, "hw_slowdown": 2, "gpu_idle": 1, "hw_thermal": 1, "sw_thermal": 1}
    evaluate(
        promtool,
        tmp_path,
        series,
        [
            {
                "expr": one("Clock throttle reasons held", "{{reason}}"),
                "eval_time": "2m",
                "exp_samples": reasons_held(counts),
            }
        ],
    )
