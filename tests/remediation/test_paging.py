"""A sidecar's P0 is paged through Alertmanager at once (remediation/paging.py), and the rule's later
copy of the same fault is muted while it fires, so the fault pages once; checked on a real Alertmanager
with the rendered configuration."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.kube.fakes import FakeKube
from tests.processes import alertmanager, http_json
from tests.render.amconfig import write_config
from trainguard.catalog.alerts import NODE_CORDONED
from trainguard.catalog.severity import STYLES, grade_labels, severity_label
from trainguard.remediation.escalation import parse_time
from trainguard.remediation.loop import RemediationLoop
from trainguard.remediation.model import Signal, Source
from trainguard.remediation.paging import HOLD_S, page_alert
from trainguard.remediation.signals import signal_fingerprint

NOW = 1_700_000_000.0
GPU = {
    "namespace": "ml",
    "training_job": "llama-pretrain",
    "pod": "llama-0",
    "node": "gpu-node-1",
    "gpu": "1",
}


def signal(alertname: str = "GPUDoubleBitECCError", severity: str = "P0", source: Source = Source.SIDECAR,
           at: float = NOW, **extra: str) -> Signal:  # fmt: skip
    labels = {"alertname": alertname, "severity": severity, **GPU, **extra}
    return Signal(alertname, severity, labels, signal_fingerprint(labels), source, at - 2,
                  annotations={"summary": "double-bit ECC error on GPU 1"})  # fmt: skip


def settled(read: Any, expected: Any, timeout: float = 10.0) -> Any:
    """What `read` returns once it equals `expected`, or at the timeout: Alertmanager's inhibitor learns
    of a source alert on its own goroutine, so right after a post its targets can read active for a
    moment (the operator reads alerts seconds old, never in that moment)."""
    deadline = time.monotonic() + timeout
    got = read()
    while got != expected and time.monotonic() < deadline:
        time.sleep(0.1)
        got = read()
    return got


def test_a_sidecar_p0_becomes_a_paging_alert_marked_as_the_fast_path() -> None:
    alert = page_alert(signal(UUID="GPU-1"), NOW)
    assert alert is not None
    assert alert["labels"] == {"alertname": "GPUDoubleBitECCError", **grade_labels("P0"), **GPU, "UUID": "GPU-1",
                               "trainguard_path": "fastpath"}  # fmt: skip
    assert alert["annotations"]["description"] == "double-bit ECC error on GPU 1"
    assert parse_time(alert["startsAt"]) == pytest.approx(NOW - 2, abs=0.001)
    assert parse_time(alert["endsAt"]) == pytest.approx(NOW - 2 + HOLD_S, abs=0.001)


@pytest.mark.parametrize(
    "why,s",
    [
        ("Alertmanager's own alert is already routed", signal(source=Source.ALERTMANAGER)),
        ("not a P0", signal("GPUThermalThrottling", "P1")),
        ("not a catalogue alert", signal("SomethingElse")),
    ],
)
def test_nothing_else_is_paged_twice(why: str, s: Signal) -> None:
    assert page_alert(s, NOW) is None, why


@pytest.mark.tools
def test_the_rules_later_copy_is_muted_while_the_fast_path_alert_fires(tmp_path: Path) -> None:
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.skip("Alertmanager is not installed (.ci/run installs it)")
    with alertmanager(binary, write_config(tmp_path), tmp_path) as url:
        now = time.time()
        fast = page_alert(signal(at=now, UUID="GPU-1"), now)
        assert fast is not None
        # what Prometheus sends for the same fault: the series' labels, the scrape's, no path label
        rule_labels = {"alertname": "GPUDoubleBitECCError", **grade_labels("P0"), **GPU, "UUID": "GPU-1",
                       "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "gpu-node-1", "instance": "10.0.0.7:9400",
                       "job": "ml/llama-pretrain"}  # fmt: skip
        other_gpu = rule_labels | {"gpu": "2"}
        http_json(f"{url}/api/v2/alerts", [fast, {"labels": rule_labels}, {"labels": other_gpu}])

        def states() -> dict[tuple[str, str], str]:
            alerts = http_json(f"{url}/api/v2/alerts?filter=alertname%3D%22GPUDoubleBitECCError%22")
            return {(a["labels"]["gpu"], a["labels"].get("trainguard_path", "rule")): a["status"]["state"]
                    for a in alerts}  # fmt: skip

        expected = {("1", "fastpath"): "active", ("1", "rule"): "suppressed", ("2", "rule"): "active"}
        assert settled(states, expected) == expected
        http_json(f"{url}/api/v2/alerts", [fast | {"endsAt": fast["startsAt"]}])  # the fast-path alert ends
        deadline = time.monotonic() + 10
        while states().get(("1", "rule")) != "active" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert states().get(("1", "rule")) == "active", "once it ends, the rule's copy pages as usual"


@pytest.mark.tools
@pytest.mark.parametrize("style", STYLES)
def test_the_operator_pages_a_sidecar_p0_as_soon_as_the_receiver_takes_it(tmp_path: Path, style: str) -> None:
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.skip("Alertmanager is not installed (.ci/run installs it)")
    with alertmanager(binary, write_config(tmp_path), tmp_path) as url:
        # the planner thread is not started: paging must not wait for planning or leadership
        responder = RemediationLoop(None, FakeKube(), None, key=lambda: None, leader=lambda: False, lock=lambda ns, name: None,  # type: ignore[arg-type]
                              alertmanager_url=url, severity_style=style)  # fmt: skip
        try:
            responder.submit([signal(at=time.time()), signal("GPUThermalThrottling", "P1", at=time.time())])
            deadline = time.monotonic() + 10
            paged: list[dict[str, Any]] = []
            while not paged and time.monotonic() < deadline:
                paged = http_json(f"{url}/api/v2/alerts?filter=trainguard_path%3D%22fastpath%22")
                time.sleep(0.1)
        finally:
            responder.stop()
        assert [a["labels"]["alertname"] for a in paged] == ["GPUDoubleBitECCError"]
        assert (paged[0]["labels"]["priority"], paged[0]["labels"]["severity"]) == (
            "P0",
            severity_label("P0", style),
        )
        assert http_json(f"{url}/api/v2/alerts?filter=alertname%3D%22GPUThermalThrottling%22") == []


@pytest.mark.tools
def test_the_cordon_notice_is_not_muted_by_the_p0_that_made_it(tmp_path: Path) -> None:
    """A job's P0 mutes its P1-P3, but not the operator's notice that it cordoned a node: that notice
    follows the P0 by design, and the fast path's page holds five minutes."""
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.skip("Alertmanager is not installed (.ci/run installs it)")
    with alertmanager(binary, write_config(tmp_path), tmp_path) as url:
        now = time.time()
        fast = page_alert(signal(at=now, UUID="GPU-1"), now)
        assert fast is not None
        job = {"namespace": "ml", "training_job": "llama-pretrain"}
        notice = {"labels": {"alertname": NODE_CORDONED, **grade_labels("P2"), **job, "node": "gpu-node-1",
                             "remediation": "r1"}}  # fmt: skip
        other = {
            "labels": {
                "alertname": "DataLoaderSlow",
                **grade_labels("P2"),
                **job,
                "pod": "llama-0",
                "node": "gpu-node-1",
            }
        }
        http_json(f"{url}/api/v2/alerts", [fast, notice, other])

        def states() -> dict[str, str]:
            return {a["labels"]["alertname"]: a["status"]["state"] for a in http_json(f"{url}/api/v2/alerts")}

        # DataLoaderSlow suppressed: the inhibitor knows the P0, so the notice's state is its judgement
        expected = {"GPUDoubleBitECCError": "active", NODE_CORDONED: "active", "DataLoaderSlow": "suppressed"}
        assert settled(states, expected) == expected
