"""trainguard inside an existing monitoring stack: kube-prometheus-stack's default Alertmanager
configuration (its routes, its inhibit rules, the InfoInhibitor), a platform's own routes on
severity="critical" and severity="warning" (tests/render/kube_prometheus_stack.py), as an Alertmanager
object's base configuration, and trainguard's AlertmanagerConfig (with the operator's receiver and its
Secret) applied to the cluster: the configuration is the one the real prometheus-operator writes
(e2e/prometheus_operator.py), with and without the platform's routes. Routing is amtool's word,
inhibition a real Alertmanager's.

In both severity styles trainguard's own routes reach P0..P3's receivers (they match `priority`);
in the mapped style a trainguard P0 also reaches the platform's critical route and a P1 or P2 its
warning route; the platform's own alerts keep their routes; and the default inhibitions mute no
trainguard alert, but for one documented case (docs/severity.md).
"""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import time
import zoneinfo
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.cluster import Cluster
from e2e.pipeline import Monitoring
from tests.conftest import MONITOR, POLICY, monitor, policy, required_tool
from tests.kube.fakes import FakeKube
from tests.processes import alertmanager, http_json, wait_for
from tests.render.amconfig import routes_test
from tests.render.kube_prometheus_stack import CHAT, PAGER, default_config
from trainguard.catalog import ALERTS_BY_NAME, SEVERITIES
from trainguard.catalog.severity import GRADE, MAPPED, STYLES, grade_labels
from trainguard.clients.alertmanager import post_alerts
from trainguard.diagnosis.morning import Night, report_alert
from trainguard.remediation.escalation import Settings, escalated, format_time
from trainguard.remediation.passes import EscalationPass
from trainguard.render.alertmanager import OPERATOR_RECEIVER
from trainguard.render.kubernetes import alertmanager_config, fastpath_secret, operator_receiver
from trainguard.render.policy import effective_policy
from trainguard.render.prometheus import rule_group
from trainguard.render.receivers import RESOLVED_VARIANT

pytestmark = pytest.mark.e2e

NS, JOB = "ml", "llama-pretrain"
OURS = f"{NS}/trainguard-{JOB}/"
"""prometheus-operator's prefix of the receivers of the monitor's AlertmanagerConfig."""
SAMPLE = {
    "P0": "TrainingLossNonFinite",
    "P1": "GPUThermalThrottling",
    "P2": "DataLoaderSlow",
    "P3": "GPUMemoryHigh",
}
TRAINGUARD = {
    "P0": [OURS + OPERATOR_RECEIVER, OURS + "oncall-phone", OURS + "im" + RESOLVED_VARIANT],
    "P1": [OURS + OPERATOR_RECEIVER, OURS + "im"],
    "P2": [OURS + "email", OURS + "ticket"],
    "P3": [OURS + "dashboard"],
}
"""docs/architecture.md, "Routing defaults", with the operator's receiver first for P0 and P1; a P0 reaches
the IM channel through its variant that is told of resolutions (render/receivers.py)."""
PLATFORM = {
    GRADE: {"P0": [], "P1": [], "P2": [], "P3": []},
    MAPPED: {"P0": [PAGER], "P1": [CHAT], "P2": [CHAT], "P3": []},
}
"""The platform's own severity routes each grade also reaches, by style."""


def test_the_sample_has_one_alert_of_each_grade() -> None:
    assert [ALERTS_BY_NAME[SAMPLE[g]].severity for g in SEVERITIES] == list(SEVERITIES)


def ours() -> list[dict[str, Any]]:
    """The monitor's AlertmanagerConfig with the operator's receiver, and the Secret holding its token
    (no CA, which nothing here connects with); without owner references, since no monitor object owns
    them here."""
    m = monitor()
    receiver = operator_receiver(m, "https://trainguard-operator.trainguard-system.svc:8443", with_ca=False)
    objs = [fastpath_secret(m, "events-token", "alerts-token"),
            alertmanager_config(m, effective_policy(m, [policy()]), operator=receiver)]  # fmt: skip
    for obj in objs:
        obj["metadata"].pop("ownerReferences", None)
    return objs


@pytest.fixture(scope="module")
def configs(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[bool, Path]]:
    """The configuration prometheus-operator writes for an Alertmanager configured as kube-prometheus-stack
    configures it (every AlertmanagerConfig of every namespace, OnNamespace), by whether the base carries
    the platform's own routes."""
    out: dict[bool, Path] = {}
    tmp = tmp_path_factory.mktemp("kps-alertmanager")
    cluster.namespace(NS)
    objs = ours()
    cluster.apply(objs)
    try:
        for user_routes in (True, False):
            base = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "alertmanager-sev", "namespace": "monitoring"},
                    "stringData": {"alertmanager.yaml": yaml.safe_dump(default_config(user_routes))}}  # fmt: skip
            with Monitoring(cluster, "sev", objects=(base,)) as mon:

                def written(mon: Monitoring = mon, user_routes: bool = user_routes) -> str | None:
                    text = mon.am_files.config.read_text()
                    return text if OURS in text and (PAGER in text) == user_routes else None

                text = wait_for("the monitor's routes in the configuration", written, timeout=60)
            out[user_routes] = tmp / f"alertmanager-{user_routes}.yml"
            out[user_routes].write_text(text)
        yield out
    finally:
        for obj in objs:
            cluster.delete(obj)


def fired(alertname: str, style: str, **labels: str) -> dict[str, str]:
    """The labels the monitor's rendered rule `alertname` fires with in `style`, plus `labels`."""
    m = monitor()
    group = rule_group(m, effective_policy(m, [policy()]), style)
    (rule,) = [r for r in group["rules"] if r.get("alert") == alertname]
    return {"alertname": alertname, "namespace": NS, "training_job": JOB, **labels, **rule["labels"]}


def test_the_merged_configuration_is_valid(amtool: str, configs: dict[bool, Path], tmp_path: Path) -> None:
    for user_routes in (True, False):
        path = configs[user_routes]
        check = subprocess.run(
            [amtool, "check-config", str(path)], capture_output=True, text=True, check=False
        )
        assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("grade", SEVERITIES)
def test_a_trainguard_alert_reaches_its_receivers_in_both_styles_and_the_platforms_in_mapped(
    amtool: str, configs: dict[bool, Path], tmp_path: Path, style: str, grade: str
) -> None:
    labels = fired(SAMPLE[grade], style, pod="llama-0", node="gpu-node-1")
    assert labels["priority"] == grade
    routes_test(amtool, configs[True], labels, TRAINGUARD[grade] + PLATFORM[style][grade])


def test_kube_prometheus_stacks_default_routes_alone_leave_trainguards_to_it(
    amtool: str, configs: dict[bool, Path], tmp_path: Path
) -> None:
    """Without routes of the platform's own, a mapped P0 reaches trainguard's receivers and nothing else."""
    routes_test(amtool, configs[False], fired(SAMPLE["P0"], MAPPED), TRAINGUARD["P0"])


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"alertname": "KubeNodeNotReady", "severity": "critical", "namespace": "kube-system"}, [PAGER]),
        ({"alertname": "KubeDeploymentReplicasMismatch", "severity": "warning", "namespace": "web"}, [CHAT]),
        # in a training namespace, but not one of the job's alerts: the job's route does not take it
        ({"alertname": "KubePodCrashLooping", "severity": "warning", "namespace": NS, "pod": "x-0"}, [CHAT]),
        ({"alertname": "KubePodNotReady", "severity": "critical", "namespace": NS}, [PAGER]),
        ({"alertname": "CPUThrottlingHigh", "severity": "info", "namespace": NS}, ["null"]),
        ({"alertname": "Watchdog", "severity": "none"}, ["null"]),
    ],
)
def test_the_platforms_own_alerts_keep_their_routes(
    amtool: str, configs: dict[bool, Path], tmp_path: Path, labels: dict[str, str], expected: list[str]
) -> None:
    routes_test(amtool, configs[True], labels, expected)


# ---- inhibition, on a real Alertmanager ------------------------------------------------------------


@pytest.fixture(scope="module")
def amtool() -> str:
    return required_tool("amtool")


@pytest.fixture(scope="module")
def am_binary() -> str:
    return shutil.which("prometheus-alertmanager") or required_tool("alertmanager")


def settle(url: str, ok: Callable[[list[dict[str, Any]]], bool]) -> list[dict[str, Any]]:
    """Alertmanager's inhibitor learns of a source on its own goroutine: read until `ok` or 15 s."""
    deadline = time.monotonic() + 15
    got = http_json(f"{url}/api/v2/alerts")
    while not ok(got) and time.monotonic() < deadline:
        time.sleep(0.2)
        got = http_json(f"{url}/api/v2/alerts")
    return got


def key(a: dict[str, Any]) -> tuple[str, str]:
    return a["labels"]["alertname"], a["labels"].get("training_job", "")


def morning_report(now: float) -> dict[str, Any]:
    zone = zoneinfo.ZoneInfo("UTC")
    end = dt.datetime.fromtimestamp(now, zone).replace(second=0, microsecond=0)
    night = Night(end - dt.timedelta(hours=8), end)
    return report_alert(NS, JOB, night, summary="3 alerts", description="...", now=now, until=now + 3600)


@pytest.mark.parametrize("style", STYLES)
def test_the_default_inhibitions_mute_no_trainguard_alert(
    am_binary: str, configs: dict[bool, Path], tmp_path: Path, style: str
) -> None:
    """kube-prometheus-stack's rules, with the InfoInhibitor firing in the training namespace: a P2 and
    a P3 (warning and none when mapped) are not info, the morning report is not info, no P0 shares a
    name with a P1 of the namespace, and an escalated copy stays a warning (its P1's word) in the
    mapped style. The platform's own info alert there is muted, as kube-prometheus-stack means it to be."""
    now = time.time()
    p1 = fired("GPUThermalThrottling", GRADE, pod="llama-0", node="gpu-node-1", gpu="3")
    p1_alert = {"labels": p1, "annotations": {"summary": "hot"}, "startsAt": format_time(now - 1200)}
    copy = escalated(p1_alert, Settings(), now, severity_style=style)
    bert = {"training_job": "bert-finetune", "pod": "bert-0", "node": "gpu-node-2"}
    ours = [
        {"labels": fired("TrainingLossNonFinite", GRADE) | {"training_job": "gpt-sft"}},
        p1_alert,
        copy,
        {"labels": fired("GPUThermalThrottling", GRADE, **bert, gpu="0")},
        {"labels": fired("DataLoaderSlow", GRADE, **bert)},
        {"labels": fired("GPUMemoryHigh", GRADE, **bert, gpu="1")},
        morning_report(now),
    ]
    platform = [
        {"labels": {"alertname": "InfoInhibitor", "severity": "none", "namespace": NS}},
        {"labels": {"alertname": "CPUThrottlingHigh", "severity": "info", "namespace": NS, "pod": "x-0"}},
    ]
    expected_muted = {("CPUThrottlingHigh", ""), ("InfoInhibitor", "")}
    with alertmanager(am_binary, configs[True], tmp_path) as url:
        # as the operator posts: the grade style built, the severity written in the platform's style
        post_alerts(url, ours, severity_style=style)
        http_json(f"{url}/api/v2/alerts", platform)
        total = len(ours) + len(platform)

        def muted(got: list[dict[str, Any]]) -> set[tuple[str, str]]:
            return {key(a) for a in got if a["status"]["inhibitedBy"]}

        got = settle(url, lambda got: len(got) == total and muted(got) == expected_muted)
    assert len(got) == total
    assert muted(got) == expected_muted
    severities = {(*key(a), a["labels"].get("escalated_from", "")): a["labels"]["severity"] for a in got}
    if style == MAPPED:
        assert severities[("TrainingLossNonFinite", "gpt-sft", "")] == "critical"
        assert severities[("GPUThermalThrottling", JOB, "P1")] == "warning", "the copy keeps its P1's word"
        assert severities[("GPUMemoryHigh", "bert-finetune", "")] == "none"


@pytest.mark.parametrize("style", STYLES)
def test_what_the_default_inhibitions_do_mute_one_alert_at_two_grades_in_a_namespace(
    am_binary: str, configs: dict[bool, Path], tmp_path: Path, style: str
) -> None:
    """The documented case: in the mapped style, one alert raised to P0 by one job's policy (critical)
    mutes the same alert at P1 (warning) of another job of its namespace, by kube-prometheus-stack's
    critical-mutes-warning rule (equal namespace and alertname); other namespaces are not touched. In the
    grade style no default rule matches P0..P3."""
    heat = {"alertname": "GPUThermalThrottling", "namespace": NS}
    raised = heat | {"training_job": "gpt-sft"} | grade_labels("P0")
    same_ns = heat | {"training_job": "bert-finetune"} | grade_labels("P1")
    other_ns = same_ns | {"namespace": "research"}
    expected = {("bert-finetune", NS)} if style == MAPPED else set()

    def muted(got: list[dict[str, Any]]) -> set[tuple[str, str]]:
        return {
            (a["labels"]["training_job"], a["labels"]["namespace"]) for a in got if a["status"]["inhibitedBy"]
        }

    with alertmanager(am_binary, configs[True], tmp_path) as url:
        post_alerts(url, [{"labels": raw} for raw in (raised, same_ns, other_ns)], severity_style=style)
        got = settle(url, lambda got: len(got) == 3 and muted(got) == expected)
    assert len(got) == 3
    assert muted(got) == expected


def test_a_mapped_p1_escalates_once_and_stays_escalated_next_to_the_default_rules(
    am_binary: str, configs: dict[bool, Path], tmp_path: Path
) -> None:
    """The operator's escalation pass in the mapped style, on the merged configuration: the P1 (warning)
    gets one copy, which keeps its P1 unmuted, and the next pass neither resolves nor reposts it."""
    labels = fired("GPUThermalThrottling", MAPPED, pod="llama-0", node="gpu-node-1", gpu="3")
    started = format_time(time.time() - 1200)
    with alertmanager(am_binary, configs[True], tmp_path) as url:
        http_json(f"{url}/api/v2/alerts", [{"labels": labels, "startsAt": started}])
        escalation = EscalationPass(FakeKube(MONITOR, POLICY), leader=lambda: True, alertmanager_url=url,
                                    severity_style=MAPPED)  # fmt: skip
        assert escalation.run() == 1, "20 minutes unacknowledged: escalated"

        def copies(got: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [
                a for a in got if a["labels"].get("escalated_from") and a["status"]["state"] != "resolved"
            ]

        got = settle(url, lambda got: len(copies(got)) == 1)
        (copy,) = copies(got)
        assert (copy["labels"]["priority"], copy["labels"]["severity"]) == ("P0", "warning")
        # trainguard's P0 receivers page it; the platform's warning route sees it, its critical one not
        assert {r["name"] for r in copy["receivers"]} == {*TRAINGUARD["P0"], CHAT}
        assert not [a for a in got if a["status"]["inhibitedBy"]], "the copy mutes nothing, not even its P1"
        assert escalation.run() == 0, "one copy, kept: not resolved and posted again"
        assert len(copies(http_json(f"{url}/api/v2/alerts"))) == 1
