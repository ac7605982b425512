"""A P2 in the full pipeline produces a diagnostic report, through the real apiserver, and the page shows
its plots, its probable cause and the pod's own log lines; the notification names its ConfigMap.

The stack of e2e/test_pipeline.py (a 2-pod Job whose exporters and trainers run as local processes,
a real Prometheus and Alertmanager, the webhook sink) with an operator that knows Prometheus, so its
leader writes the P2 reports. The pods' output is kept as a container runtime keeps it (CRI log files)
and served by the fake kubelet's container-logs endpoint, which the apiserver calls for `pods/log`:
kubectl and the operator read the trainer's lines as on a real cluster.

The fault: one GPU of rank 0 thermal-throttles (its SM clock drops: the straggler the report names),
then rank 0's host starts swapping: HostSwapPressure (P2; `for` 0s here) fires, the operator writes the
report ConfigMap (its first plots the swap and host memory series that fired, its first cause the
swapping host), and Alertmanager e-mails the alert with the ConfigMap's name in `report_configmap`.
Headless Chromium (Debian's `chromium`) opens the stored HTML and screenshots it."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from e2e.cluster import Cluster
from e2e.controlplane.cache import cache_dir
from e2e.pipeline import JOB, Monitoring, Sink, diagnostics, inject, operator_stack, start
from e2e.podprocesses import PodRun
from tests.diagnosis.chromium import Dom, find_chromium, png_pixels, run_headless
from tests.processes import wait_for
from trainguard.diagnosis.configmap import report_name

pytestmark = pytest.mark.e2e
OPERATOR = "reports"
STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z) (.*)$")
"""The kubelet's timestamps=true prefix: RFC3339 with nine fraction digits, UTC."""


@pytest.fixture(scope="module")
def report_stack(cluster: Cluster) -> Iterator[tuple[Cluster, Monitoring, Sink]]:
    """As e2e/conftest.py's stack, the operator with --prometheus-url as well."""
    with operator_stack(cluster, OPERATOR, prometheus=True) as stack:
        yield stack


@pytest.fixture(scope="module")
def chromium() -> str:
    return find_chromium()


def kubectl(cluster: Cluster, *args: str) -> str:
    binary = cache_dir() / "bin" / "current" / "kubectl"
    exe = str(binary) if binary.exists() else shutil.which("kubectl") or "kubectl"
    done = subprocess.run([exe, "--kubeconfig", str(cluster.kubeconfig), *args], capture_output=True,
                          text=True, timeout=30, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def _unix(stamp: str) -> float:
    return datetime.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp() + float(
        "0." + stamp[20:29]
    )


def check_container_logs(cluster: Cluster, ns: str, run: PodRun) -> None:
    """The kubelet's semantics, read through the apiserver: every line the trainer wrote, in order,
    each with its time; sinceTime, tailLines and limitBytes as the kubelet applies them."""
    core = cluster.core
    text = wait_for("three lines of the trainer's", lambda: (t := core.read_namespaced_pod_log(
        run.name, ns, container="trainer", timestamps=True)).count("\n") >= 3 and t, timeout=60)  # fmt: skip
    lines = text.splitlines()
    stamped = [STAMP.match(ln) for ln in lines]
    assert all(stamped), [ln for ln, m in zip(lines, stamped, strict=True) if not m][:3]
    bodies = [m[2] for m in stamped if m]
    written = run.trainer_log().splitlines()
    assert bodies == written[: len(bodies)], (bodies[:3], written[:3])
    times = [_unix(m[1]) for m in stamped if m]
    assert times == sorted(times) and time.time() - 300 < times[0] <= time.time()
    plain = core.read_namespaced_pod_log(run.name, ns, container="trainer")
    assert plain.splitlines()[: len(bodies)] == bodies  # no timestamps unless asked
    # sinceTime (whole seconds, RFC3339) as kubectl sends it: the lines from that second on
    second = lines[-1][:19]
    since = kubectl(
        cluster, "logs", "-n", ns, run.name, "-c", "trainer", "--timestamps", f"--since-time={second}Z"
    )
    expected = [ln for ln in lines if ln[:19] >= second]
    assert since.splitlines()[: len(expected)] == expected and len(since.splitlines()) < len(lines) + 50
    assert (
        len(core.read_namespaced_pod_log(run.name, ns, container="trainer", tail_lines=2).splitlines()) == 2
    )
    cut_short = core.read_namespaced_pod_log(
        run.name, ns, container="trainer", timestamps=True, limit_bytes=50
    )
    assert cut_short == text[:50], (cut_short, text[:50])
    exporter = core.read_namespaced_pod_log(run.name, ns, container="trainguard-exporter", limit_bytes=4096)
    assert exporter.strip(), "the sidecar's stderr is served too"


def test_a_p2_report_shows_plots_cause_and_the_trainers_logs_and_the_page_names_it(
    report_stack: tuple[Cluster, Monitoring, Sink],
    ns: str,
    clean_nodes: None,
    tmp_path: Path,
    chromium: str,
) -> None:
    cluster, mon, sink = report_stack
    t0 = time.monotonic()
    policy = {"alerts": [{"name": "HostSwapPressure", "for": "0s"}]}
    with start(report_stack, ns, tmp_path, policy=policy) as pods:
        a = min(pods.running(), key=lambda r: r.rank)
        check_container_logs(cluster, ns, a)
        inject(a, "thermal", gpu=1)
        wait_for("the throttled SM clock in Prometheus", lambda: mon.query(
            f'DCGM_FI_DEV_SM_CLOCK{{namespace="{ns}",pod="{a.name}",gpu="1"}} < 1500'), timeout=30)  # fmt: skip
        time.sleep(35)  # most of the report's recent span throttled: a straggler, not a blip
        inject(a, "swap-pressure", gpu=None)
        (alert,) = wait_for("HostSwapPressure firing", lambda: mon.firing("HostSwapPressure", namespace=ns),
                            timeout=60)  # fmt: skip
        labels = alert["labels"]
        name = report_name(JOB, labels)
        assert alert["annotations"]["report_configmap"] == name, alert["annotations"]
        try:
            cm = wait_for(f"ConfigMap {name}", lambda: cluster.core.read_namespaced_config_map(name, ns),
                          timeout=100)  # fmt: skip
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{diagnostics(cluster, mon, pods, ns, sink)}") from None
        written = time.monotonic() - t0
        html, md = cm.data["report.html"], cm.data["report.md"]
        assert "# P2 HostSwapPressure" in md, md[:400]
        causes = md.split("## Probable causes", 1)[1].split("## Series", 1)[0]
        assert "### straggler" in causes and a.name in causes and a.node in causes, causes
        # the alert's own cause comes first, with its own signal (kswapd) as evidence: the catalogue's
        # words, or a finding that reads the same series
        first_cause = causes.split("### ", 2)[1]
        assert "trainguard_host_kswapd_cpu_ratio" in first_cause, causes
        trainer_lines = {
            ln.strip() for r in pods.running() for ln in r.trainer_log().splitlines() if ln.strip()
        }

        # the excerpt holds the trainers' own lines, read through the apiserver and the fake kubelet
        logs = md.split("## Pod logs", 1)[1]
        assert any(t in logs for t in trainer_lines if t.startswith("step")), logs[:1500]

        # the notification (P2: e-mail, after its group_wait of 1m) names the ConfigMap that exists
        got = wait_for("HostSwapPressure e-mailed", lambda: sink.received("email", "HostSwapPressure", namespace=ns),
                       timeout=120)  # fmt: skip
        assert got[0]["annotations"]["report_configmap"] == name
        assert f"kubectl get configmap -n {ns} {name} " in got[0]["annotations"]["report_command"]
        assert cluster.core.read_namespaced_config_map(name, ns).metadata.labels["trainguard.io/alert"] == (
            "HostSwapPressure"
        )
        # the Event naming it is posted after the ConfigMap is created, and the e-mail may have come first
        wait_for("the DiagnosticReport Event naming it", lambda: any(
            name in (e.message or "") for e in cluster.events(ns, JOB, "DiagnosticReport")), timeout=30)  # fmt: skip

    # the page in headless Chromium: plots, the cause and the log excerpt are on it
    page = tmp_path / "report.html"
    page.write_text(html, encoding="utf-8")
    dom = run_headless(chromium, tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    parsed = Dom()
    parsed.feed(dom.stdout)
    drawn = {k for k, n in parsed.figures.items() if n}
    assert {"throughput", "loss", "temperature", "utilisation"} <= drawn and len(drawn) >= 6, parsed.figures
    # what fired is drawn first: the swap and host memory series of the alert's pod
    own = ["fired:trainguard_host_kswapd_cpu_ratio", "fired:trainguard_host_memory_used_ratio"]
    assert list(parsed.figures)[:2] == own and set(own) <= drawn, parsed.figures
    assert parsed.causes, "no probable cause on the page"
    assert any(t in parsed.log_text for t in trainer_lines if t.startswith("step")), parsed.log_text[:1000]
    shot = tmp_path / "report.png"
    run = run_headless(chromium, tmp_path, f"--screenshot={shot}", "--window-size=1200,2400", "--hide-scrollbars",
               page.as_uri())  # fmt: skip
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    width, height, channels, rows = png_pixels(shot.read_bytes())
    colours = {row[i : i + 3] for row in rows[::7] for i in range(0, len(row), channels * 11)}
    assert (width, height) == (1200, 2400) and len(colours) > 20, "the screenshot is blank or nearly"
    print(
        f"\nreport {name} written {written:.0f}s into the test; causes {parsed.causes}; plots {sorted(drawn)}"
    )
