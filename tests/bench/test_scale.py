"""bench/scale.py's pure parts: the per-monitor groups it expands from the CLI's output, the series its
operator target serves for the shared group, the synthetic series, and how it counts requests around a P0."""

from __future__ import annotations

import json
import re
from pathlib import Path

import promql_parser
import pytest
from bench.scale import (
    findings,
    image_malloc_arena_max,
    per_monitor_growth,
    print_table,
    remediation_first_findings,
)
from bench.scenarios.scale_cluster import Counters
from bench.scenarios.scale_rules import (
    groups,
    identity,
    job_exposition,
    metric_names,
    published,
)
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from trainguard.render.shared import shared_group


@pytest.fixture(scope="module")
def twelve(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    return groups(12, tmp_path_factory.mktemp("scale"))


def test_each_expanded_group_selects_only_its_own_job(twelve: list[dict]) -> None:
    assert len({g["name"] for g in twelve}) == 12
    for i, group in enumerate(twelve):
        ns, job = identity(i)
        assert group["name"] == f"trainguard.{ns}.{job}"
        for rule in group["rules"]:
            assert set(re.findall(r'training_job="([^"]+)"', rule["expr"])) <= {job}
            assert set(re.findall(r'namespace="([^"]+)"', rule["expr"])) <= {ns}


def test_the_operator_target_serves_what_the_shared_group_reads() -> None:
    """The bench's shared variant is the real one: its operator target serves each monitor's series."""
    families = {f.name: f for f in text_string_to_metric_families(published(3))}
    assert families["trainguard_monitor_settings_published"].samples[0].value == 3
    own_group = [
        s.labels["training_job"]
        for s in families["trainguard_monitor_setting"].samples
        if s.labels["setting"] == "own_group" and s.value == 0
    ]
    assert own_group == ["job-0000", "job-0001", "job-0002"]
    # the quickstart's monitor keeps the defaults: only its mode's disabled alerts besides
    assert {s.labels["alertname"] for s in families["trainguard_monitor_alert_enabled"].samples} == {
        "InferenceLatencyHigh",
        "InferenceQueueDepthHigh",
    }
    for rule in shared_group()["rules"]:
        promql_parser.parse(rule["expr"])


def test_the_synthetic_job_series_cover_what_the_rules_read(twelve: list[dict]) -> None:
    names = metric_names(twelve[0])
    text = job_exposition(3, names, pods=8, gpus=2, nodes=500)
    samples: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    temp = samples["DCGM_FI_DEV_GPU_TEMP"]
    assert len(temp) == 16  # 8 pods x 2 GPUs
    assert {s.labels["training_job"] for s in temp} == {"job-0003"}
    assert len(samples["trainguard_train_step"]) == 8
    assert not [n for n in names if n.startswith("kube_") and n in samples]  # kube-state-metrics serves those


def test_a_window_can_leave_out_the_p0s_own_requests() -> None:
    c0 = Counters(
        reads=100,
        writes=50,
        lists=5,
        status_writes=1,
        reconciles=10,
        reconcile_s=1,
        webhook_calls=0,
        injection_failures=0,
        at=0,
    )
    c1 = Counters(
        reads=200,
        writes=80,
        lists=9,
        status_writes=2,
        reconciles=20,
        reconcile_s=2,
        webhook_calls=0,
        injection_failures=0,
        at=30,
    )
    c2 = Counters(
        reads=260,
        writes=130,
        lists=12,
        status_writes=4,
        reconciles=22,
        reconcile_s=3,
        webhook_calls=2,
        injection_failures=0,
        at=50,
    )
    c3 = Counters(
        reads=360,
        writes=160,
        lists=16,
        status_writes=6,
        reconciles=32,
        reconcile_s=4,
        webhook_calls=2,
        injection_failures=0,
        at=80,
    )
    window = c3.minus(c0.shifted(c2, c1))
    assert window["seconds"] == 60
    assert (window["reads"], window["writes"], window["reconciles"]) == (200, 60, 20)
    assert (window["lists"], window["status_writes"]) == (8, 3)
    assert window["requests_per_reconcile"] == 13.0
    assert window["webhook_calls"] == 0


def test_growth_per_monitor_is_one_when_linear() -> None:
    assert per_monitor_growth([100, 500], [10.0, 50.0]) == 1.0
    assert per_monitor_growth([100, 500], [10.0, 100.0]) == 2.0
    assert per_monitor_growth([100], [10.0]) is None


def test_rendered_groups_come_from_the_cli(tmp_path: Path) -> None:
    groups(1, tmp_path)
    assert (tmp_path / "rendered" / "rules.yml").exists()


def test_the_remediation_first_variants_are_compared_step_by_step() -> None:
    def cluster(first: float, p50: float, ready: float) -> dict:
        stage = {"monitors": 500, "ready": {"all_ready_s": ready},
                 "cordons_during_apply": {"p50_s": p50, "max_s": p50 * 2, "cordoned": 6, "samples": 6}}  # fmt: skip
        return {"remediation_first_s": first, "stages": [stage]}

    assert remediation_first_findings([cluster(0, 1.7, 130.0)]) == []
    [line] = remediation_first_findings([cluster(0, 1.7, 130.0), cluster(5, 0.6, 140.0)])
    assert line == (
        "operator at 500 monitors with --remediation-first-seconds 0 s: cordons during the apply 1.7 s median, "
        "3.4 s at most (6 of 6), all Ready in 130.0 s; 5 s: cordons during the apply 0.6 s median, 1.2 s at "
        "most (6 of 6), all Ready in 140.0 s"
    )


def test_the_operator_is_measured_with_the_images_malloc_arenas() -> None:
    assert image_malloc_arena_max() == "2", "the Dockerfile's ENV, which the bench gives the operator"


RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results"


def test_the_split_and_prometheus_3_findings_are_read_from_the_figures(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = json.loads((RESULTS / "scale-rules-split.json").read_text())
    said = findings(result)
    split = [f for f in said if "the shared group in 4 groups" in f]
    assert len(split) == 3 and "the slowest takes 7929 ms" in split[-1] and "against 13966 ms" in split[-1]
    assert any(
        f.startswith("rules on Prometheus 3 (one rule after the other)") and "x1.03" in f for f in said
    )
    point = result["rules"]["points"][-1]
    point["distributed"] = {"eval_sum_ms": 20000.0, "group_max_ms": 20000.0, "ruler_query_cpu_s_per_round": 9.0,
                            "receive_cpu_s_per_round": 15.0, "scraper_cpu_s_per_round": 1.0, "alert_series": 2000,
                            "rss_mib": {"ruler_query": 1, "receive": 1, "scraper": 1}}  # fmt: skip
    point["distributed-split"] = {**point["distributed"], "group_max_ms": 8000.0, "eval_sum_ms": 24000.0}
    [thanos] = [
        f for f in findings(result) if f.startswith("rules on Thanos at 2000 monitors, the shared group in")
    ]
    assert "the slowest takes 8000 ms against 20000 ms" in thanos
    print_table(result)
    assert "one group against the same rules in at most 4 groups" in capsys.readouterr().out
