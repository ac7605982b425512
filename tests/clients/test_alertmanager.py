"""remediation.alertmanager against a real Alertmanager: alerts posted read back active; a silence
reads back as silenced by its id; an inhibition rule's target reads back inhibited. Those are what
escalation looks at: a silenced (acknowledged) or inhibited P1 is not escalated. Failures name the URL
and the status."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from tests.conftest import required_tool
from tests.processes import alertmanager, free_port
from trainguard.catalog.alerts import TRAINING_INTERRUPTED
from trainguard.catalog.severity import MAPPED
from trainguard.clients.alertmanager import (
    AlertmanagerError,
    AlertStatus,
    active_alerts,
    alert_body,
    create_silence,
    matcher,
    post_alerts,
)
from trainguard.remediation.model import Signal, Source
from trainguard.remediation.signals import signal_fingerprint
from trainguard.times import parse_rfc3339

CONFIG = {
    "route": {"receiver": "null", "group_by": ["alertname", "training_job"]},
    "receivers": [{"name": "null"}],
    "inhibit_rules": [
        {
            "source_matchers": ['alertname="GPUNodeDown"'],
            "target_matchers": ['severity="P1"'],
            "equal": ["node"],
        }
    ],
}


@pytest.fixture(scope="module")
def am(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = required_tool("prometheus-alertmanager")
    workdir = tmp_path_factory.mktemp("am")
    config = workdir / "alertmanager.yml"
    config.write_text(json.dumps(CONFIG))  # YAML is a superset of JSON
    with alertmanager(binary, config, workdir) as url:
        yield url


def labels(job: str, alertname: str, severity: str, **extra: str) -> dict[str, str]:
    return {"alertname": alertname, "severity": severity, "namespace": "ml", "training_job": job, **extra}


def signal(job: str, alertname: str = TRAINING_INTERRUPTED, starts_at: float = 0.0, **extra: str) -> Signal:
    lab = labels(job, alertname, "P0", **extra)
    return Signal(
        alertname=alertname,
        severity="P0",
        labels=lab,
        fingerprint=signal_fingerprint(lab),
        source=Source.OPERATOR,
        starts_at=starts_at or time.time() - 60,
        annotations={"summary": "A training pod of the job was interrupted"},
    )


def eventually(
    read: Callable[[], list[AlertStatus]], ok: Callable[[list[AlertStatus]], bool]
) -> list[AlertStatus]:
    """Alertmanager's inhibitor learns of a source alert on its own goroutine: poll a little."""
    deadline = time.monotonic() + 10
    got = read()
    while not ok(got) and time.monotonic() < deadline:
        time.sleep(0.1)
        got = read()
    return got


def by_name(got: list[AlertStatus]) -> dict[str, AlertStatus]:
    return {a.labels["alertname"] + a.labels.get("node", ""): a for a in got}


tools = pytest.mark.tools


@tools
def test_posted_alerts_read_back_active_with_their_labels_and_start(am: str) -> None:
    started = time.time() - 120.25
    sig = signal("post-job", starts_at=started, pod="llama-0", node="gpu-a", reason="OOMKilled")
    notice = {
        "labels": labels("post-job", "TrainguardRemediationWithheld", "P1"),
        "annotations": {"description": "cordon cap reached: gpu-b is not cordoned"},
        "generatorURL": "https://operator.example/ml/post-job",
    }
    assert post_alerts(am, [sig, notice], generator_url="https://operator.example/ml/post-job") == 2
    got = by_name(active_alerts(am, {"namespace": "ml", "training_job": "post-job"}))
    assert sorted(got) == ["TrainguardRemediationWithheld", f"{TRAINING_INTERRUPTED}gpu-a"]
    ours = got[f"{TRAINING_INTERRUPTED}gpu-a"]
    assert ours.labels == sig.labels
    assert ours.annotations == sig.annotations
    assert ours.state == "active" and not ours.muted
    assert ours.starts_at == pytest.approx(started, abs=0.001)
    assert got["TrainguardRemediationWithheld"].state == "active"
    # the filter is exact: another job's alerts are not returned
    assert active_alerts(am, {"training_job": "post-job-other"}) == []


@tools
def test_posted_alerts_carry_their_severity_in_the_platforms_style(am: str) -> None:
    """What the operator builds carries the grade in priority and severity; the post writes severity
    in the style. A word already in it (a copy read back) and an alert without a grade are kept."""
    sig = signal("styled-job", pod="llama-0", node="gpu-a")
    sig = replace(sig, labels=sig.labels | {"priority": "P0"})
    copy = {
        "labels": labels("styled-job", "GPUThermalThrottling", "warning", priority="P0", escalated_from="P1")
    }
    report = {"labels": labels("styled-job", "TrainguardMorningReport", "none")}
    assert post_alerts(am, [sig, copy, report], severity_style=MAPPED) == 3
    got = {a.labels["alertname"]: a.labels for a in active_alerts(am, {"training_job": "styled-job"})}
    assert (got[TRAINING_INTERRUPTED]["priority"], got[TRAINING_INTERRUPTED]["severity"]) == (
        "P0",
        "critical",
    )
    assert got["GPUThermalThrottling"] == copy["labels"]
    assert got["TrainguardMorningReport"] == report["labels"]
    assert sig.labels["severity"] == "P0", "the signal itself is not changed"


@tools
def test_a_silence_reads_back_as_silenced_by_its_id(am: str) -> None:
    """`trainguard ack` is a silence: the acknowledged P1 is muted, its neighbour is not."""
    now = time.time()
    post_alerts(
        am,
        [
            {"labels": labels("ack-job", "GPUThermalThrottling", "P1", node="gpu-a")},
            {"labels": labels("ack-job", "GPUThermalThrottling", "P1", node="gpu-b")},
        ],
    )
    sid = create_silence(
        am,
        {"alertname": "GPUThermalThrottling", "training_job": "ack-job", "node": "gpu-a"},
        now - 1,
        now + 3600,
        created_by="alice@example.com",
        comment="looking at the fans",
    )
    assert sid
    got = by_name(
        eventually(
            lambda: active_alerts(am, {"training_job": "ack-job"}),
            lambda got: any(a.silenced_by for a in got),
        )
    )
    silenced, other = got["GPUThermalThrottlinggpu-a"], got["GPUThermalThrottlinggpu-b"]
    assert silenced.silenced_by == (sid,) and silenced.state == "suppressed" and silenced.muted
    assert other.silenced_by == () and other.state == "active" and not other.muted


@tools
def test_an_inhibited_alert_reads_back_inhibited_by_its_source(am: str) -> None:
    post_alerts(
        am,
        [
            signal("inhibit-job", "GPUNodeDown", node="gpu-a"),
            {"labels": labels("inhibit-job", "GPUThermalThrottling", "P1", node="gpu-a")},
            {"labels": labels("inhibit-job", "GPUThermalThrottling", "P1", node="gpu-b")},
        ],
    )
    got = by_name(
        eventually(
            lambda: active_alerts(am, {"training_job": "inhibit-job"}),
            lambda got: any(a.inhibited_by for a in got),
        )
    )
    source, target, other = (
        got["GPUNodeDowngpu-a"],
        got["GPUThermalThrottlinggpu-a"],
        got["GPUThermalThrottlinggpu-b"],
    )
    assert target.inhibited_by == (source.fingerprint,)
    assert target.state == "suppressed" and target.muted and target.silenced_by == ()
    assert not other.muted and other.state == "active"
    assert not source.muted


@tools
def test_a_resolved_signal_leaves_the_active_alerts(am: str) -> None:
    sig = signal("resolve-job", "GPUNodeDown", node="gpu-c")
    post_alerts(am, [sig])
    assert len(active_alerts(am, {"training_job": "resolve-job"})) == 1
    post_alerts(am, [replace(sig, firing=False)])
    assert active_alerts(am, {"training_job": "resolve-job"}) == []


@tools
def test_filter_values_with_quotes_and_backslashes_match_exactly(am: str) -> None:
    odd = 'say "hi" \\ \\n\nbye'
    post_alerts(
        am,
        [
            {"labels": labels("odd-job", "Odd", "P3", note=odd)},
            {"labels": labels("odd-job", "Odd", "P3", note="say")},
        ],
    )
    got = active_alerts(am, {"training_job": "odd-job", "note": odd})
    assert [a.labels["note"] for a in got] == [odd]


@tools
def test_an_alert_alertmanager_refuses_is_an_error_naming_url_and_status(am: str) -> None:
    with pytest.raises(AlertmanagerError) as info:
        post_alerts(am, [{"labels": {}, "annotations": {}}])
    assert info.value.status == 400
    assert info.value.url == f"{am}/api/v2/alerts"
    assert f"POST {am}/api/v2/alerts: HTTP 400" in str(info.value)


@tools
def test_a_silence_alertmanager_refuses_is_an_error(am: str) -> None:
    now = time.time()
    with pytest.raises(
        AlertmanagerError, match=r"/api/v2/silences: HTTP 400.*start time must be before"
    ) as info:
        create_silence(am, {"training_job": "x"}, now, now - 60, created_by="alice", comment="ack")
    assert info.value.status == 400
    with pytest.raises(AlertmanagerError, match=r"HTTP 422"):
        create_silence(am, {}, now, now + 60, created_by="alice", comment="ack")


@pytest.mark.parametrize(("who", "why"), [("", "ack"), ("alice", " ")])
def test_a_silence_without_author_or_comment_is_refused_before_the_call(who: str, why: str) -> None:
    """Alertmanager 0.25 would take it: an ack must say who and why."""
    with pytest.raises(ValueError, match="created_by and comment"):
        create_silence("http://127.0.0.1:1", {"training_job": "x"}, 0, 60, created_by=who, comment=why)


@tools
def test_a_wrong_base_url_is_a_404(am: str) -> None:
    with pytest.raises(AlertmanagerError, match=r"HTTP 404"):
        active_alerts(f"{am}/no-such-prefix", {"training_job": "x"})


def test_no_alertmanager_is_an_error_without_a_status() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(AlertmanagerError, match=rf"GET {url}/api/v2/alerts\?.*: no answer") as info:
        active_alerts(url, {"training_job": "x"})
    assert info.value.status is None


def test_a_hung_alertmanager_times_out() -> None:
    """Connected (the kernel accepts into the backlog) but never answered."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(AlertmanagerError, match="no answer") as info:
            post_alerts(url, [signal("hung-job")], timeout=0.5)
        assert time.monotonic() - started < 5
        assert info.value.url == f"{url}/api/v2/alerts"


def test_nothing_to_post_makes_no_call() -> None:
    assert post_alerts("http://127.0.0.1:1", []) == 0


def test_a_signal_body_has_no_end_while_firing_and_ends_now_when_resolved() -> None:
    sig = signal("body-job", starts_at=parse_rfc3339("2023-11-14T22:14:07Z"), node="gpu-a", gpu="")
    now = parse_rfc3339("2023-11-14T22:20:00Z")
    body = alert_body(sig, now, "https://operator.example/x")
    assert body == {
        "labels": labels("body-job", TRAINING_INTERRUPTED, "P0", node="gpu-a"),  # the empty gpu left out
        "annotations": sig.annotations,
        "startsAt": "2023-11-14T22:14:07.000Z",
        "generatorURL": "https://operator.example/x",
    }
    resolved = alert_body(replace(sig, firing=False), now)
    assert resolved["endsAt"] == "2023-11-14T22:20:00.000Z" and "generatorURL" not in resolved


def test_matcher_escapes_as_alertmanagers_parser_reads() -> None:
    assert matcher("node", "gpu-a") == 'node="gpu-a"'
    assert matcher("note", 'a"b\\c\nd') == 'note="a\\"b\\\\c\\nd"'
