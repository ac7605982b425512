"""bench/slow_gpu.py's pure parts: the `for` it applies to Prometheus' range results as Prometheus does,
the traces it generates (a slow GPU is slow from the onset only, by its level), the rules it takes from
the renderer, and how it scores detections and false alarms."""

from __future__ import annotations

from typing import Any

from bench.slow_gpu import ONSET, STEP_S, firings, score, shipped_rules, trace

from bench import slow_gpu


def result(labels: dict[str, str], times: list[int]) -> list[dict[str, Any]]:
    return [{"metric": labels, "values": [[t, "1"] for t in times]}]


def test_for_fires_once_held_and_restarts_after_a_gap() -> None:
    held = list(range(0, 121, STEP_S))  # true at 0..120 s
    assert firings(result({"a": "1"}, held), 120) == [({"a": "1"}, 120)]
    assert firings(result({"a": "1"}, held), 135) == [], "held 120 s is not 135"
    gap = [0, 15, 30, 60, 75, 90, 105, 120, 135, 150, 165, 180]  # absent at 45: pending again from 60
    assert firings(result({"a": "1"}, gap), 120) == [({"a": "1"}, 180)]
    assert firings(result({"a": "1"}, [0, 15]), 0) == [({"a": "1"}, 0)], "no `for`: the first evaluation"


def test_a_slow_gpu_is_slow_from_the_onset_by_its_level_only() -> None:
    for level in slow_gpu.LEVELS:
        t = trace("clock", level, 1)
        assert t.slow is not None
        clock = t.series[t.slow]["clock"]
        assert all(c <= slow_gpu.MAX_MHZ * (1 - level / 100) + 8 for c in clock[ONSET:])
        assert all(c >= slow_gpu.MAX_MHZ * 0.93 for c in clock[:ONSET] if t.series[t.slow]["reasons"][0] == 0)
    brake = trace("brake", 10, 2)
    assert brake.slow is not None
    assert set(brake.series[brake.slow]["reasons"][ONSET:]) == {0x88}
    pcie = trace("pcie", 20, 3)
    assert pcie.slow is not None
    assert pcie.series[pcie.slow]["width"][ONSET:] == [8.0] * (slow_gpu.SAMPLES - ONSET)


def test_normal_events_have_no_slow_gpu() -> None:
    for kind in slow_gpu.NORMAL_KINDS:
        assert trace(kind, 0, 0).slow is None
    idle = trace("idle-downtrain", 0, 0)
    assert any(s["gen"][0] == 1.0 and s["util"][0] <= 2 for s in idle.series.values()), (
        "one GPU idle all along"
    )


def test_the_rules_are_the_renderers_with_the_job_selector_widened() -> None:
    rules = shipped_rules()
    assert set(rules) == set(slow_gpu.ALERTS)
    expr, hold = rules["GPUClocksThrottled"]
    assert 'namespace="bench"' in expr and "training_job=" not in expr and hold == 120


def test_score_counts_the_slow_gpu_after_onset_and_every_other_firing_as_a_false_alarm() -> None:
    slow, normal = trace("brake", 10, 0), trace("healthy", 0, 0)
    assert slow.slow is not None
    pod, gpu = slow.slow
    onset = ONSET * STEP_S

    def on(t: slow_gpu.Trace, p: int, g: int) -> dict[str, str]:
        return {"training_job": t.name, "pod": f"{t.name}-{p}", "gpu": str(g)}

    fired = {"GPUClocksThrottled": [(on(slow, pod, gpu), onset + 120), (on(normal, 0, 1), 300)]}
    r = score([slow, normal], fired, 0)["levels"]["10"]
    assert r["recall"] == 1.0 and r["false_alarms"] == 1 and r["precision"] == 0.5
    assert r["delay_s"]["median"] == 120
    early = {"GPUClocksThrottled": [(on(slow, pod, gpu), onset - 15)]}
    assert score([slow, normal], early, 0)["levels"]["10"]["recall"] == 0.0, (
        "before the onset is not a detection"
    )
