"""`trainguard drill` against the full pipeline on the local control plane (e2e/test_pipeline.py's stack:
real Prometheus and Alertmanager, the operator, sidecars with fault injection on running as processes).

On one running job, through the CLI as an operator would run it: the plan of `multi-node` (--dry-run,
which touches nothing); the drills `slow-gpu` (a hardware slowdown injected on one GPU, GPUClocksThrottled's
`for` and the P1 group_wait lowered), `nan` (injected through a sidecar), `node-down` (posted to
Alertmanager as synthetic alerts) and `multi-node` (XID 79 injected on two nodes at once), each of
which must pass at the default 30 s target with remediation in dry run and leave no node cordoned, no
fault active, no synthetic alert and spec.remediation.dryRun as it was; `stall`, interrupted by Ctrl-C,
which cleans up all the same; and last `node-down --allow-actions`, where the operator really cordons
the (fake) node and restarts the job, and the drill times its resumed training. The sidecars' pod IPs
are loopback addresses, which the apiserver refuses to proxy to, so the drill falls back to the pod
IPs (its `auto` access); a real cluster takes the pod proxy.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster import REPO, Cluster
from e2e.monitors import MON, ready
from e2e.pipeline import JOB, SELECTOR, Monitoring, Sink, diagnostics, exporter_step, http_text, job, objects
from e2e.podprocesses import PodProcesses
from e2e.receiver import records
from tests.processes import free_port, wait_for
from trainguard.drill.scenarios import DRILL_LABEL

pytestmark = pytest.mark.e2e
TARGET_S = 30.0


@pytest.fixture
def running(stack: tuple[Cluster, Monitoring, Sink], ns: str, tmp_path: Path) -> Iterator[PodProcesses]:
    cluster, mon, sink = stack
    monitor, policy = objects(ns, sink)  # remediation acting (dryRun unset): the drill must make it dry
    # slow-gpu's GPUClocksThrottled (a P1) at once, and its P1 group sent after 1s instead of 30s: the
    # drill's 30s target holds only so
    policy["spec"]["alerts"].append({"name": "GPUClocksThrottled", "for": "0s"})
    policy["spec"]["routes"] = [{"severity": "P1", "receivers": ["im"], "groupWait": "1s"}]
    # a port of its own: the fake pod IPs (127.N.0.x) repeat in every harness run with the same pod network
    monitor["spec"]["exporter"]["port"] = free_port()
    cluster.apply([monitor, policy])
    wait_for("monitor Ready", lambda: ready(cluster, ns), timeout=60)
    cluster.apply([job(ns, 2, 8)])
    with PodProcesses(cluster.api, ns, SELECTOR, tmp_path) as pods:
        try:
            wait_for("2 trainers past their first checkpoint", lambda: len(r := pods.running()) == 2
                     and all(exporter_step(x) >= 120 for x in r), timeout=120)  # fmt: skip
            wait_for("Prometheus scraping both exporters", lambda: len(mon.query(
                f'up{{namespace="{ns}", container="trainguard-exporter"}} == 1')) == 2, timeout=30)  # fmt: skip
            wait_for("Prometheus settled after its last reload", mon.settled, timeout=30)
        except AssertionError:
            raise AssertionError(diagnostics(cluster, mon, pods, ns)) from None
        yield pods


def drill(
    cluster: Cluster, mon: Monitoring, ns: str, scenario: str, *extra: str
) -> tuple[int, dict[str, Any], str]:
    """Run the CLI; its exit status, its JSON report and its progress lines (stderr)."""
    proc = subprocess.run(
        [sys.executable, "-m", "trainguard.cli", "drill", "--monitor", f"{ns}/{JOB}", "--scenario", scenario,
         "--alertmanager", mon.alertmanager, "--kubeconfig", str(cluster.kubeconfig), "-o", "json",
         "--timeout", "60s", "--settle", "15s", *extra],
        check=False, capture_output=True, text=True, cwd=REPO, timeout=150, env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(
            f"no JSON report (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        ) from None
    return proc.returncode, report, proc.stderr


def stage(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for s in report["stages"] if s["stage"] == name)


def dry_run(cluster: Cluster, ns: str) -> Any:
    return ((cluster.get(*MON, ns, JOB) or {}).get("spec") or {}).get("remediation", {}).get("dryRun")


def assert_clean(cluster: Cluster, mon: Monitoring, pods: PodProcesses, ns: str, before: Any) -> None:
    assert not [n.metadata.name for n in cluster.core.list_node().items if n.spec.unschedulable], (
        "a node cordoned"
    )
    for r in pods.running():
        assert json.loads(http_text(f"{r.url}/v1/faults")) == {}, f"a fault left on {r.name}"
    assert dry_run(cluster, ns) == before, "spec.remediation.dryRun restored"
    assert not [a for a in mon.alerts(namespace=ns) if DRILL_LABEL in a["labels"]], "a synthetic alert left"


def test_a_sidecar_drill_and_a_synthetic_drill_pass_and_leave_nothing_behind(
    stack: tuple[Cluster, Monitoring, Sink],
    ns: str,
    clean_nodes: None,
    running: PodProcesses,
) -> None:
    cluster, mon, sink = stack
    before = dry_run(cluster, ns)
    assert before is False, "the CRD's default: remediation acts"
    plan = subprocess.run(
        [sys.executable, "-m", "trainguard.cli", "drill", "--monitor", f"{ns}/{JOB}", "--scenario", "multi-node",
         "--kubeconfig", str(cluster.kubeconfig), "--dry-run"],
        check=False, capture_output=True, text=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert plan.returncode == 0, plan.stderr
    assert "inject xid-79 (GPU 0) through sidecars" in plan.stdout, plan.stdout
    assert "set spec.remediation.dryRun: true for the drill, then restore it (false)" in plan.stdout
    assert_clean(cluster, mon, running, ns, before)
    assert not records(cluster, ns)

    # first: a P0 of the job inhibits its P1s in Alertmanager, for the operator's receiver too, and nan's alert
    # outlives its fault by the rule's 1m window; and a dry-run GPUNodeDown record (node-down, multi-node) on
    # the same node would make the slow node a duplicate for 10 minutes, so that slow-gpu would record nothing
    started = time.monotonic()
    rc, slow, progress = drill(cluster, mon, ns, "slow-gpu")
    slow_s = time.monotonic() - started  # what the scenario adds to this test, settle included
    assert rc == 0, json.dumps(slow, indent=1) + progress + diagnostics(cluster, mon, running, ns, sink)
    assert slow["mode"] == "sidecar injection" and slow["cordoned"] == []
    for name in ("alert", "notification", "action"):
        s = stage(slow, name)
        assert s["verdict"] == "pass" and 0 < s["seconds"] <= TARGET_S, s
    assert "injected hw-slowdown" in progress, progress
    assert "AwaitCheckpoint" in stage(slow, "action")["note"], "slowNode.gpu's default: ReplaceAtCheckpoint"
    slowed = [r for r in records(cluster, ns) if r["alert"] in ("GPUClocksThrottled", "GPUClockBelowPeers")]
    assert slowed and all(r["dryRun"] for r in slowed), slowed
    assert_clean(cluster, mon, running, ns, before)

    t0 = time.time()
    rc, nan, progress = drill(cluster, mon, ns, "nan")
    assert rc == 0, json.dumps(nan, indent=1) + progress + diagnostics(cluster, mon, running, ns, sink)
    assert nan["mode"] == "sidecar injection" and nan["dry_run"] is True
    for name in ("alert", "notification", "action"):
        s = stage(nan, name)
        assert s["verdict"] == "pass" and 0 < s["seconds"] <= TARGET_S, s
    assert stage(nan, "resumed")["verdict"] == "n/a"
    assert "drill +" in progress and "injected nan-loss" in progress, progress
    paged = [n.at for n in sink.got if n.receiver == "phone" and n.at >= t0 and any(
        a["labels"].get("alertname") == "TrainingLossNonFinite" and a["labels"].get("namespace") == ns
        for a in n.alerts)]  # fmt: skip
    assert paged, "the phone got the page the drill timed"
    acted = [r for r in records(cluster, ns) if r["alert"] == "TrainingLossNonFinite"]
    assert acted and all(r["dryRun"] for r in acted), acted
    # the NaN alert outlives the fault by the rule's 1m window: it was silenced before dry run went off
    silences = json.loads(http_text(f"{mon.alertmanager}/api/v2/silences"))
    guards = [s for s in silences if s["id"] in nan["cleanup"]["guard_silences"]]
    assert guards and all(s["status"]["state"] == "active" for s in guards), nan["cleanup"]
    assert_clean(cluster, mon, running, ns, before)

    rc, down, progress = drill(cluster, mon, ns, "node-down")
    assert rc == 0, json.dumps(down, indent=1) + progress + diagnostics(cluster, mon, running, ns, sink)
    assert down["mode"] == "synthetic alerts" and down["cordoned"] == []
    for name in ("alert", "notification", "action"):
        s = stage(down, name)
        assert s["verdict"] == "pass" and 0 < s["seconds"] <= TARGET_S, s
    assert down["cleanup"]["expired"] == 1 and not down["cleanup"]["guard_silences"]
    node_down = [r for r in records(cluster, ns) if r["alert"] == "GPUNodeDown"]
    assert node_down and all(r["dryRun"] for r in node_down), node_down
    assert_clean(cluster, mon, running, ns, before)

    rc, multi, progress = drill(cluster, mon, ns, "multi-node")
    assert rc == 0, json.dumps(multi, indent=1) + progress + diagnostics(cluster, mon, running, ns, sink)
    assert multi["mode"] == "sidecar injection" and multi["cordoned"] == []
    assert sorted(multi["cleanup"]["cleared"]) == sorted(r.name for r in running.running()), (
        "a pod on each node"
    )
    for name in ("alert", "notification", "action"):
        s = stage(multi, name)
        assert s["verdict"] == "pass" and 0 < s["seconds"] <= TARGET_S, s
    lost = [r for r in records(cluster, ns) if r["alert"] in ("GPULost", "GPUCriticalXid")]
    assert lost and all(r["dryRun"] for r in lost), lost
    assert_clean(cluster, mon, running, ns, before)

    # Ctrl-C halfway: the drill cleans up all the same and says it was interrupted. A stall (five minutes
    # without a step at defaults) keeps the drill waiting: an oom drill can pass before the signal lands
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainguard.cli", "drill", "--monitor", f"{ns}/{JOB}", "--scenario", "stall",
         "--alertmanager", mon.alertmanager, "--kubeconfig", str(cluster.kubeconfig), "--timeout", "60s",
         "--settle", "20s"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
        # a terminal's foreground drill: a shell's background job (CI's, say) starts with SIGINT ignored,
        # which Python keeps, and the Ctrl-C below would then be lost
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )  # fmt: skip
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "injected stall" in line:
            proc.send_signal(signal.SIGINT)
            break
    try:  # clean-up waits up to --settle for what the drill raised to resolve, then silences the rest
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError("the interrupted drill did not end:\n" + "".join(lines) + err + out) from None
    assert proc.returncode == 130, "".join(lines) + err + out
    assert "problem: interrupted" in out and "dryRun restored (false)" in out, out
    assert_clean(cluster, mon, running, ns, before)

    # --allow-actions on a synthetic alert is refused up front: the operator would not act on a GPUNodeDown for
    # a node its cache shows Ready (a label in an alert is a claim), and the drill says what to run instead
    refused = subprocess.run(
        [sys.executable, "-m", "trainguard.cli", "drill", "--monitor", f"{ns}/{JOB}", "--scenario", "node-down",
         "--alertmanager", mon.alertmanager, "--kubeconfig", str(cluster.kubeconfig), "--allow-actions"],
        check=False, capture_output=True, text=True, cwd=REPO, timeout=60,
    )  # fmt: skip
    assert refused.returncode != 0 and "--scenario multi-node --allow-actions" in refused.stderr, (
        refused.stderr
    )
    assert dry_run(cluster, ns) is False
    for name, report in (
        ("slow-gpu", slow),
        ("nan", nan),
        ("node-down", down),
        ("multi-node", multi),
    ):
        print(f"\ndrill {name}: " + ", ".join(f"{s['stage']} {s['seconds']}" for s in report["stages"]))
    print(f"\ndrill slow-gpu: the CLI ran {slow_s:.1f}s, start to exit")
