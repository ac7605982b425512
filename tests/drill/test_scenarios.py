"""The drill's scenario table and the decisions made from it: where faults go, what synthetic alerts
say, which action and stages to expect."""

from __future__ import annotations

import pytest

from trainguard.api.monitor import Remediation
from trainguard.catalog import ALERTS_BY_NAME
from trainguard.drill import SCENARIO_NAMES
from trainguard.drill.scenarios import (
    DRILL_LABEL,
    SCENARIOS,
    DrillError,
    Fault,
    PodView,
    Stage,
    applicable,
    choose_targets,
    expected_action,
    scenario,
    synthetic_alerts,
)
from trainguard.exporter.faults import KINDS
from trainguard.remediation.plan import response_class

PODS = [
    PodView("job-0", "node-a", "10.0.0.1", 9400, injectable=True),
    PodView("job-1", "node-b", "10.0.0.2", 9400, injectable=True),
    PodView("job-2", "node-b", "10.0.0.3", 9400, injectable=True),
]


def test_the_cli_names_are_the_table() -> None:
    assert tuple(SCENARIOS) == SCENARIO_NAMES


@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_every_scenario_injects_exporter_faults_and_expects_catalogue_alerts(name: str) -> None:
    s = SCENARIOS[name]
    assert {f.kind for f in s.faults} <= set(KINDS)
    assert s.alerts and set(s.alerts) <= set(ALERTS_BY_NAME)
    assert bool(s.faults) != bool(s.synthetic_why), "synthetic by nature exactly when it injects nothing"


def test_an_unknown_scenario_names_the_known_ones() -> None:
    with pytest.raises(DrillError, match="one of: oom, nan"):
        scenario("meteor")


def test_one_pod_scenarios_inject_into_the_first_sidecar_that_allows_it() -> None:
    pods = [PodView("job-0", "node-a", port=9400), *PODS[1:]]
    t = choose_targets(SCENARIOS["nan"], pods)
    assert not t.synthetic and [p.name for p in t.pods] == ["job-1"]


def test_without_injection_a_scenario_falls_back_to_synthetic_alerts() -> None:
    pods = [PodView(p.name, p.node, p.ip, p.port) for p in PODS]
    t = choose_targets(SCENARIOS["oom"], pods)
    assert t.synthetic and [p.name for p in t.pods] == ["job-0"]
    assert "no sidecar" in t.why


def test_a_job_wide_fault_needs_every_sidecar_or_goes_synthetic() -> None:
    assert not choose_targets(SCENARIOS["stall"], PODS).synthetic
    partial = [PODS[0], PodView("job-1", "node-b", port=9400), PODS[2]]
    t = choose_targets(SCENARIOS["stall"], partial)
    assert t.synthetic and "only 2 of 3" in t.why


def test_node_scenarios_are_synthetic_even_where_injection_is_on() -> None:
    for name in ("node-down", "partition"):
        t = choose_targets(SCENARIOS[name], PODS)
        assert t.synthetic and {p.node for p in t.pods} == {"node-a"}


def test_multi_node_takes_one_sidecar_on_each_of_two_nodes() -> None:
    t = choose_targets(SCENARIOS["multi-node"], PODS)
    assert not t.synthetic and [(p.name, p.node) for p in t.pods] == [
        ("job-0", "node-a"),
        ("job-1", "node-b"),
    ]
    with pytest.raises(DrillError, match="two nodes"):
        choose_targets(SCENARIOS["multi-node"], PODS[1:])
    only_b = [PodView("job-0", "node-a", port=9400), *PODS[1:]]
    assert choose_targets(SCENARIOS["multi-node"], only_b).synthetic


def test_no_running_pod_is_refused() -> None:
    with pytest.raises(DrillError, match="no running pod"):
        choose_targets(SCENARIOS["nan"], [PodView("job-0", "")])


def test_synthetic_alerts_carry_the_labels_a_real_one_would_and_the_drill_label() -> None:
    t = choose_targets(SCENARIOS["partition"], PODS[1:])
    alerts = synthetic_alerts(SCENARIOS["partition"], t, namespace="ml", job="llama", drill_id="d1",
                              starts="2026-01-01T00:00:00.000Z", ends="2026-01-01T00:10:00.000Z")  # fmt: skip
    node_down = [a for a in alerts if a["labels"]["alertname"] == "GPUNodeDown"]
    assert len(node_down) == 1, "one per node, not per pod"
    assert node_down[0]["labels"] == {"alertname": "GPUNodeDown", "priority": "P0", "severity": "P0", "namespace": "ml",
                                      "training_job": "llama", "node": "node-b", DRILL_LABEL: "d1"}  # fmt: skip
    exporter_down = sorted(
        a["labels"]["pod"] for a in alerts if a["labels"]["alertname"] == "TrainguardExporterDown"
    )
    assert exporter_down == ["job-1", "job-2"]
    assert all(a["endsAt"] == "2026-01-01T00:10:00.000Z" for a in alerts), "bounded if the drill dies"
    assert all(a["annotations"]["summary"].startswith("[drill]") for a in alerts)


def test_a_job_wide_synthetic_alert_is_posted_once() -> None:
    pods = [PodView(p.name, p.node) for p in PODS]
    t = choose_targets(SCENARIOS["throughput-drop"], pods)
    alerts = synthetic_alerts(SCENARIOS["throughput-drop"], t, namespace="ml", job="llama", drill_id="d",
                              starts="s", ends="e")  # fmt: skip
    assert [a["labels"].get("pod") for a in alerts] == [None]


def test_gpu_alerts_name_a_gpu() -> None:
    t = choose_targets(SCENARIOS["multi-node"], [PodView(p.name, p.node) for p in PODS])
    alerts = synthetic_alerts(SCENARIOS["multi-node"], t, namespace="ml", job="llama", drill_id="d",
                              starts="s", ends="e")  # fmt: skip
    assert len(alerts) == 4 and all(a["labels"]["gpu"] == "0" for a in alerts)


def test_expected_action_follows_the_monitors_remediation() -> None:
    defaults = Remediation()
    assert expected_action(SCENARIOS["nan"].alerts, defaults) == "PauseAndPinCheckpoint"
    assert expected_action(SCENARIOS["node-down"].alerts, defaults) == "CheckpointCordonReschedule"
    assert expected_action(SCENARIOS["multi-node"].alerts, defaults) == "CheckpointCordonReschedule"
    assert expected_action(SCENARIOS["stall"].alerts, defaults) is None, "stall notifies by default"
    assert expected_action(SCENARIOS["oom"].alerts, defaults) is None, "GPUOutOfMemory has no response"
    assert expected_action(SCENARIOS["net-jitter"].alerts, defaults) is None
    restart = Remediation.model_validate({"actions": {"stall": "RestartFromCheckpoint"}})
    assert expected_action(SCENARIOS["stall"].alerts, restart) == "RestartFromCheckpoint"
    assert expected_action(SCENARIOS["nan"].alerts, Remediation(enabled=False)) is None


@pytest.mark.parametrize("name", SCENARIO_NAMES)
def test_an_expected_action_comes_from_the_operators_own_response_classes(name: str) -> None:
    if expected_action(SCENARIOS[name].alerts, Remediation()) is not None:
        assert any(response_class(a) for a in SCENARIOS[name].alerts)


def test_resumed_training_is_measured_only_where_training_stops() -> None:
    assert Stage.RESUMED in applicable(SCENARIOS["stall"], None, allow_actions=False)
    node = SCENARIOS["node-down"]
    assert Stage.RESUMED not in applicable(node, "CheckpointCordonReschedule", allow_actions=False)
    assert Stage.RESUMED in applicable(node, "CheckpointCordonReschedule", allow_actions=True)
    assert Stage.RESUMED not in applicable(SCENARIOS["nan"], "PauseAndPinCheckpoint", allow_actions=True)
    stages = applicable(SCENARIOS["oom"], None, allow_actions=False)
    assert set(stages) == {Stage.ALERT, Stage.NOTIFICATION}
    assert "dry-run" in applicable(SCENARIOS["nan"], "PauseAndPinCheckpoint", False)[Stage.ACTION]


def test_a_fault_body_is_what_the_exporter_takes() -> None:
    assert Fault("nan-loss").body() == {"fault": "nan-loss"}
    assert Fault("xid-79", gpu=0).body() == {"fault": "xid-79", "gpu": 0}


def test_slow_gpu_slows_gpu_0_of_one_sidecar_and_expects_the_throttle_alert() -> None:
    s = SCENARIOS["slow-gpu"]
    assert s.faults == (Fault("hw-slowdown", gpu=0),) and s.alerts == ("GPUClocksThrottled",)
    assert s.acted_on == ("GPUClocksThrottled", "GPUClockBelowPeers")
    assert {response_class(a) for a in s.acted_on} == {"slowNode"}, "one record per slow node"
    t = choose_targets(s, PODS)
    assert not t.synthetic and [p.name for p in t.pods] == ["job-0"]
    assert Fault("hw-slowdown", gpu=0).body() == {"fault": "hw-slowdown", "gpu": 0}


def test_slow_gpu_without_injection_posts_a_gpu_alert_about_gpu_0() -> None:
    s = SCENARIOS["slow-gpu"]
    t = choose_targets(s, [PodView(p.name, p.node) for p in PODS])
    (posted,) = synthetic_alerts(s, t, namespace="ml", job="llama", drill_id="d", starts="s", ends="e")
    assert posted["labels"]["alertname"] == "GPUClocksThrottled"
    assert posted["labels"]["gpu"] == "0" and posted["labels"]["node"] == "node-a"
    assert posted["labels"]["priority"] == "P1", "a slow GPU is a P1: the operator acts on it at P1"


@pytest.mark.parametrize(
    ("gpu", "action", "stages"),
    [
        ("ReplaceAtCheckpoint", "ReplaceAtCheckpoint", {Stage.ALERT, Stage.NOTIFICATION, Stage.ACTION}),
        ("ReplaceNow", "ReplaceNow", {Stage.ALERT, Stage.NOTIFICATION, Stage.ACTION}),
        ("Notify", None, {Stage.ALERT, Stage.NOTIFICATION}),
    ],
)
def test_slow_gpu_expects_the_monitors_slow_node_level(
    gpu: str, action: str | None, stages: set[Stage]
) -> None:
    """The GPU level decides, not the straggler's: Notify records nothing, so no action is timed."""
    rem = Remediation.model_validate({"actions": {"slowNode": {"gpu": gpu, "straggler": "ReplaceNow"}}})
    s = SCENARIOS["slow-gpu"]
    assert expected_action(s.alerts, rem) == action
    assert set(applicable(s, action, allow_actions=False)) == stages
    if action is not None:
        assert Stage.RESUMED in applicable(s, action, allow_actions=True), "the job runs on in a new pod"
    assert expected_action(s.alerts, Remediation()) == "ReplaceAtCheckpoint", "the GPU level's default"
