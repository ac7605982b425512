"""Cost attribution (render/longterm.py): GPU-hours and peak GPU memory per job, run through
`promtool test rules`, and the costLabels that stamp them for charge-back.

The series play out on a 1-minute grid and end with a stale marker, as when Prometheus loses a pod's
target. promtool evaluates every group at the test's evaluation_interval, set to 5 minutes as the
group's own interval is in production, so sum_over_time of the GPU-hours record over the job's life
is its GPU-hours (exact on Prometheus 2 and 3 alike)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import monitor, policy
from tests.toolchains import promtool_test_rules
from trainguard.api.load import InvalidInput
from trainguard.api.monitor import COST_LABELS_MAX
from trainguard.render import dump_yaml
from trainguard.render.longterm import GPU_HOURS, PEAK_MEMORY, aggregate_group, aggregate_names, keep_regex
from trainguard.render.policy import effective_policy
from trainguard.render.prometheus import rule_group

LABELS = {"team": "ml-infra", "model": "llama-70b"}


def gpu_series(job: str, pod: str, gpus: int, minutes: int, mib: str = "1000+0x{n}") -> list[dict[str, str]]:
    """`gpus` GPUs of `pod`, scraped every minute from 0 for `minutes` minutes, then gone (stale)."""
    values = mib.format(n=minutes - 1) + " stale"
    return [
        {
            "series": f'DCGM_FI_DEV_FB_USED{{namespace="ml",training_job="{job}",pod="{pod}",node="n1",'
            f'gpu="{g}",UUID="GPU-{pod}-{g}",modelName="H100",Hostname="n1"}}',
            "values": values,
        }
        for g in range(gpus)
    ]


def run_promtool(
    promtool: str,
    tmp: Path,
    monitors: list[Any],
    series: list[dict[str, str]],
    tests: list[dict[str, Any]],
    *,
    groups: list[dict[str, Any]] | None = None,
) -> None:
    """`groups` (default: the monitors' aggregate groups) run every 5 minutes on 1-minute series."""
    groups = groups if groups is not None else [aggregate_group(m) for m in monitors]
    (tmp / "rules.yml").write_text(dump_yaml({"groups": groups}))
    (tmp / "test.yml").write_text(
        dump_yaml(
            {
                "rule_files": ["rules.yml"],
                "evaluation_interval": "5m",
                # promtool evaluates groups in map order unless told: the aggregate group reads what the
                # alerting group records at the same step (one run in 4 or 5 lost a step on Prometheus 3)
                "group_eval_order": [g["name"] for g in groups],
                "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": tests}],
            }
        )
    )
    promtool_test_rules(promtool, tmp)


def total(expr: str) -> str:
    """GPU-hours summed over the whole test (every record from t=0 on), to 3 decimals."""
    return f"round(sum_over_time({expr}[2h]), 0.001)"


def job_labels(job: str = "llama-pretrain", **extra: str) -> str:
    pairs = {"namespace": "ml", "training_job": job, **extra}
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(pairs.items())) + "}"


def test_eight_gpus_for_an_hour_are_eight_gpu_hours(promtool: str, tmp_path: Path) -> None:
    m = monitor(**{"spec.costLabels": LABELS})
    run_promtool(
        promtool,
        tmp_path,
        [m],
        gpu_series("llama-pretrain", "llama-0", 8, 60),
        [
            {
                "expr": total(GPU_HOURS),
                "eval_time": "90m",
                "exp_samples": [{"labels": job_labels(**LABELS), "value": 8}],
            },
            # while the job runs, each 5-minute record is 8 GPUs x 5/60 h
            {
                "expr": f"round({GPU_HOURS}, 0.001)",
                "eval_time": "30m",
                "exp_samples": [{"labels": job_labels(**LABELS), "value": 0.667}],
            },
            # gone: no record after the stale marker, so a finished job accrues nothing
            {"expr": GPU_HOURS, "eval_time": "70m", "exp_samples": []},
        ],
    )


def test_pods_add_up_by_the_gpus_each_holds_and_for_how_long(promtool: str, tmp_path: Path) -> None:
    """An 8-GPU pod for the hour and a 4-GPU pod for its first half: 8 + 2 GPU-hours."""
    m = monitor()
    run_promtool(
        promtool,
        tmp_path,
        [m],
        gpu_series("llama-pretrain", "llama-0", 8, 60) + gpu_series("llama-pretrain", "llama-1", 4, 30),
        [
            {
                "expr": total(GPU_HOURS),
                "eval_time": "90m",
                "exp_samples": [{"labels": job_labels(), "value": 10}],
            },
            {
                "expr": f"round({GPU_HOURS}, 0.001)",
                "eval_time": "20m",
                "exp_samples": [{"labels": job_labels(), "value": 1}],
            },
        ],
    )


def test_cost_labels_let_usage_be_summed_by_team_across_monitors(promtool: str, tmp_path: Path) -> None:
    a = monitor(**{"spec.costLabels": LABELS})
    b = monitor(
        **{
            "metadata.name": "llama-finetune",
            "spec.costLabels": {"team": "ml-infra", "model": "llama-8b"},
        }
    )
    other = monitor(**{"metadata.name": "vision", "spec.costLabels": {"team": "vision"}})
    series = (
        gpu_series("llama-pretrain", "llama-0", 8, 60)
        + gpu_series("llama-finetune", "tune-0", 4, 60)
        + gpu_series("vision", "vis-0", 2, 60)
    )
    run_promtool(
        promtool,
        tmp_path,
        [a, b, other],
        series,
        [
            {
                "expr": f"sum by (team) ({total(GPU_HOURS)})",
                "eval_time": "90m",
                "exp_samples": [
                    {"labels": '{team="ml-infra"}', "value": 12},
                    {"labels": '{team="vision"}', "value": 2},
                ],
            },
            {
                "expr": f"sum by (model) ({total(GPU_HOURS)})",
                "eval_time": "90m",
                "exp_samples": [
                    {"labels": '{model="llama-70b"}', "value": 8},
                    {"labels": '{model="llama-8b"}', "value": 4},
                    # a monitor without a model label sums under none, not under another's
                    {"labels": "{}", "value": 2},
                ],
            },
            {
                "expr": PEAK_MEMORY.record,
                "eval_time": "30m",
                "exp_samples": [
                    {
                        "labels": f"{PEAK_MEMORY.record}{job_labels('vision', team='vision')}",
                        "value": 1000,
                    },
                    {
                        "labels": f"{PEAK_MEMORY.record}{job_labels('llama-finetune', team='ml-infra', model='llama-8b')}",
                        "value": 1000,
                    },
                    {"labels": f"{PEAK_MEMORY.record}{job_labels(**LABELS)}", "value": 1000},
                ],
            },
        ],
    )


def test_peak_memory_is_the_most_any_one_gpu_used_in_the_window(promtool: str, tmp_path: Path) -> None:
    m = monitor(**{"spec.costLabels": LABELS})
    # GPU memory climbs by 100 MiB a minute on every GPU of llama-0; llama-1's GPUs stay at 1000
    series = gpu_series("llama-pretrain", "llama-0", 2, 60, mib="20000+100x{n}") + gpu_series(
        "llama-pretrain", "llama-1", 2, 60
    )
    run_promtool(
        promtool,
        tmp_path,
        [m],
        series,
        [
            {
                "expr": PEAK_MEMORY.record,
                "eval_time": "30m",
                "exp_samples": [{"labels": f"{PEAK_MEMORY.record}{job_labels(**LABELS)}", "value": 23000}],
            },
            # the month's peak is max_over_time of the record, as the Cost dashboard reads it
            {
                "expr": f"max_over_time({PEAK_MEMORY.record}[2h])",
                "eval_time": "90m",
                "exp_samples": [{"labels": job_labels(**LABELS), "value": 25900}],
            },
        ],
    )


def test_with_dcgm_exporter_only_the_jobs_pods_gpus_are_charged(promtool: str, tmp_path: Path) -> None:
    """gpuBackend dcgm: dcgm-exporter's series carry namespace and pod, the alerting group joins them to
    the job through the sidecars' info series, and GPU-hours count the joined series: the 4 GPUs of
    llama-0 for an hour, not the 4 of an unrelated pod on the same node."""
    m = monitor(**{"spec.exporter.gpuBackend": "dcgm", "spec.costLabels": LABELS})
    info = (
        'trainguard_exporter_info{namespace="ml",training_job="llama-pretrain",pod="llama-0",node="n1",'
        'driver_version="550.54"}'
    )

    def dcgm(pod: str, gpu: int) -> dict[str, str]:
        labels = f'namespace="ml",pod="{pod}",gpu="{gpu}",UUID="GPU-{pod}-{gpu}",Hostname="n1"'
        return {"series": f"DCGM_FI_DEV_FB_USED{{{labels}}}", "values": "1000+0x59 stale"}

    series = [dcgm(pod, g) for pod in ("llama-0", "unrelated-0") for g in range(4)]
    series.append({"series": info, "values": "1+0x59 stale"})
    run_promtool(
        promtool,
        tmp_path,
        [m],
        series,
        [
            {
                "expr": total(GPU_HOURS),
                "eval_time": "90m",
                "exp_samples": [{"labels": job_labels(**LABELS), "value": 4}],
            }
        ],
        groups=[rule_group(m, effective_policy(m, [policy()])), aggregate_group(m)],
    )


def test_cost_records_are_shipped_by_remote_write() -> None:
    for name in (GPU_HOURS, PEAK_MEMORY.record):
        assert name in aggregate_names()
        assert re.fullmatch(keep_regex(), name), name


def test_only_cost_records_carry_the_cost_labels() -> None:
    rules = aggregate_group(monitor(**{"spec.costLabels": LABELS}))["rules"]
    stamped = {r["record"] for r in rules if '"team", "ml-infra"' in r["expr"]}
    assert stamped == {GPU_HOURS, PEAK_MEMORY.record}
    assert all('"model", "llama-70b"' in r["expr"] for r in rules if r["record"] in stamped)
    plain = aggregate_group(monitor())["rules"]
    assert not any("label_replace" in r["expr"] for r in plain if r["record"] in stamped)


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ({"node": "n1"}, "'node' is reserved"),
        ({"training_job": "x"}, "'training_job' is reserved"),
        ({"1team": "x"}, "not a Prometheus label name"),
        ({"te-am": "x"}, "not a Prometheus label name"),
        ({"__name__": "x"}, "not a Prometheus label name"),
        ({"team": "ml infra"}, "not a valid label value"),
        ({"team": 'a"b'}, "not a valid label value"),
        ({"team": "x" * 64}, "not a valid label value"),
        ({f"l{i}": "x" for i in range(COST_LABELS_MAX + 1)}, "at most 8"),
    ],
)
def test_bad_cost_labels_are_refused_naming_the_field(labels: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        monitor(**{"spec.costLabels": labels})
    assert "costLabels" in str(exc.value) and message in str(exc.value), str(exc.value)
