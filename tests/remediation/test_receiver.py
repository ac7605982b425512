"""The intake over real TLS on loopback: a certificate made with the openssl command line, real HTTPS
clients (urllib, http.client and the sidecar's own FastPathSender) trusting its CA."""

from __future__ import annotations

import http.client
import json
import logging
import shutil
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kube.fakes import refused
from tests.processes import alertmanager, http_json, wait_for
from tests.remediation.fakes import loop_rig
from tests.remediation.identities import FakeReads, FakeReviews, monitor_body
from tests.remediation.intake import (
    IDENTITY,
    KEY,
    NOW,
    SENDER_TOKEN,
    Intake,
    alerts_token,
    am_payload,
    events_token,
    monitors,
    post,
    senders,
    xid,
)
from trainguard.exporter.fastpath import FastPathSender, event
from trainguard.kube.errors import NotSynced, Stale
from trainguard.remediation import tokens
from trainguard.remediation.model import Signal, Source
from trainguard.remediation.pending import NotRecorded
from trainguard.remediation.receiver import Receiver, ReceiverConfig
from trainguard.remediation.senders import Senders

MAX_BODY = 1 << 20
"""The default limit: bodies this large are where a server that closes with unread data loses its answer."""


@pytest.fixture
def intake(certs: Path) -> Iterator[Intake]:
    config = ReceiverConfig("127.0.0.1", 0, str(certs / "tls.crt"), str(certs / "tls.key"), KEY)
    assert config.max_body == MAX_BODY
    holder: dict[str, Intake] = {}

    def on_signals(signals: list[Signal]) -> None:
        holder["i"].calls.append(signals)
        if holder["i"].fail:
            raise RuntimeError("the store is down")
        if holder["i"].unrecorded:
            raise NotRecorded("the apiserver answered 503")

    receiver = Receiver(
        config, on_signals, accepting=lambda: not holder["i"].standby, clock=lambda: NOW,
        monitors=monitors(), senders=senders(),
    )  # fmt: skip
    holder["i"] = it = Intake(receiver, str(certs / "ca.crt"))
    receiver.start()
    try:
        yield it
    finally:
        receiver.stop()


def raw_request(it: Intake, head: list[tuple[str, str]], body: bytes = b"") -> tuple[int, dict[str, Any]]:
    """http.client with headers exactly as given (no Content-Length added)."""
    conn = http.client.HTTPSConnection("127.0.0.1", it.receiver.port, context=it.context(), timeout=5)
    try:
        conn.putrequest("POST", "/v1/alerts", skip_accept_encoding=True)
        for name, value in head:
            conn.putheader(name, value)
        conn.endheaders(body or None)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


# ---- 200 ------------------------------------------------------------------------------------------


def test_alertmanager_alerts_with_the_monitors_alerts_token_are_handed_on(intake: Intake) -> None:
    status, body, _ = post(intake, "/v1/alerts", am_payload(xid("3"), xid("4")), alerts_token())
    assert status == 200
    (signals,) = intake.calls
    assert [s.labels["gpu"] for s in signals] == ["3", "4"]
    assert all(s.source is Source.ALERTMANAGER and s.firing for s in signals)
    assert signals[0].starts_at == 1_700_000_000.5
    assert body == {"accepted": 2, "fingerprints": [s.fingerprint for s in signals]}


def test_resolved_alerts_are_handed_on_as_not_firing(intake: Intake) -> None:
    status, body, _ = post(intake, "/v1/alerts", am_payload(xid(), status="resolved"), alerts_token())
    assert (status, body["accepted"]) == (200, 1)
    assert [s.firing for s in intake.calls[0]] == [False]


def test_the_sidecars_own_sender_delivers_a_fast_path_event(intake: Intake, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(SENDER_TOKEN + "\n")
    sender = FastPathSender(intake.base + "/v1/events", str(token_file), ca_file=intake.ca, max_attempts=1)
    ev = event("GPULost", IDENTITY | {"gpu": "0"}, "GPU 0 is lost", NOW - 2)
    assert sender.post(ev) == "sent"
    ((signal,),) = intake.calls
    assert (signal.source, signal.alertname, signal.starts_at) == (Source.SIDECAR, "GPULost", NOW - 2)
    assert signal.fingerprint == ev["fingerprint"]


def test_a_fast_path_event_and_its_alert_answer_with_one_fingerprint(intake: Intake) -> None:
    ev = event("GPUCriticalXid", IDENTITY | {"gpu": "3", "xid": "79"}, "fatal XID 79", NOW)
    _, fast, _ = post(intake, "/v1/events", ev, SENDER_TOKEN)
    _, slow, _ = post(intake, "/v1/alerts", am_payload(xid("3", instance="10.0.0.7:9400")), alerts_token())
    assert fast["fingerprints"] == slow["fingerprints"] == [ev["fingerprint"]]


def test_a_body_exactly_at_the_limit_is_accepted(intake: Intake) -> None:
    data = json.dumps(am_payload(xid())).encode()
    data += b" " * (MAX_BODY - len(data))
    assert len(data) == MAX_BODY
    status, body, _ = post(intake, "/v1/alerts", data, alerts_token())
    assert (status, body["accepted"]) == (200, 1)


# ---- 401 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer ", "Basic dXNlcjpwdw=="])
def test_no_bearer_token_is_401(intake: Intake, header: str | None) -> None:
    headers = [("Content-Type", "application/json")]
    data = json.dumps(am_payload(xid())).encode()
    headers.append(("Content-Length", str(len(data))))
    if header is not None:
        headers.append(("Authorization", header))
    status, body = raw_request(intake, headers, data)
    assert status == 401 and "token" in body["error"]
    assert intake.calls == []


@pytest.mark.parametrize(
    ("path", "token"),
    [
        ("/v1/alerts", "not-a-token"),
        ("/v1/alerts", alerts_token("ml", "other-job")),
        ("/v1/alerts", alerts_token("other-ns", "llama")),
        ("/v1/alerts", events_token()),
        ("/v1/alerts", tokens.derive(b"x" * 32, tokens.ALERTS, "ml", "llama", "uid-llama")),
        ("/v1/events", alerts_token()),
        ("/v1/events", events_token()),
    ],
    ids=[
        "garbage",
        "another-monitors-token",
        "same-name-other-namespace",
        "events-token-on-alerts",
        "another-operators-key",
        "alerts-token-on-events",
        "the-monitors-own-events-token-is-no-sender-identity",
    ],
)
def test_a_token_for_another_monitor_or_purpose_is_401(intake: Intake, path: str, token: str) -> None:
    body: Any = am_payload(xid())
    if path == "/v1/events":
        body = event("GPULost", IDENTITY | {"gpu": "0"}, "lost", NOW)
    status, answer, headers = post(intake, path, body, token)
    assert status == 401 and answer["error"]
    assert headers["WWW-Authenticate"] == "Bearer"
    assert intake.calls == []


def test_a_fast_path_event_claiming_another_node_is_taken_as_the_senders_node(intake: Intake) -> None:
    claimed = event("GPULost", IDENTITY | {"gpu": "0", "node": "gpu-b", "pod": "llama-9"}, "lost", NOW)
    status, body, _ = post(intake, "/v1/events", claimed, SENDER_TOKEN)
    ((signal,),) = intake.calls
    assert (signal.labels["node"], signal.labels["pod"]) == ("gpu-a", "llama-0")
    assert status == 200 and body["fingerprints"] == [signal.fingerprint] != [claimed["fingerprint"]]


def test_a_fast_path_sender_that_is_not_a_pod_of_the_job_is_403_naming_why(intake: Intake) -> None:
    other_job = event("GPULost", IDENTITY | {"gpu": "0", "training_job": "bert"}, "lost", NOW)
    status, body, headers = post(intake, "/v1/events", other_job, SENDER_TOKEN)
    assert (status, body) == (403, {"error": "no TrainingJobMonitor ml/bert"})
    assert SENDER_TOKEN not in json.dumps(body) and "WWW-Authenticate" not in headers
    assert intake.calls == []


def test_a_token_review_that_cannot_be_made_is_503_with_retry_after(intake: Intake) -> None:
    check = intake.receiver.senders
    assert isinstance(check, Senders) and isinstance(check.reviews, FakeReviews)
    reviews = check.reviews
    reviews.fail = True
    status, body, headers = post(intake, "/v1/events", event("GPULost", IDENTITY, "lost", NOW), SENDER_TOKEN)
    assert (status, headers["Retry-After"]) == (503, "5") and "retry" in body["error"]
    assert intake.calls == []


def test_a_receiver_without_a_sender_check_refuses_every_event(certs: Path) -> None:
    config = ReceiverConfig("127.0.0.1", 0, str(certs / "tls.crt"), str(certs / "tls.key"), KEY)
    calls: list[list[Signal]] = []
    it = Intake(Receiver(config, calls.append, clock=lambda: NOW, monitors=monitors()), str(certs / "ca.crt"))
    it.receiver.start()
    try:
        ev = event("GPULost", IDENTITY, "lost", NOW)
        assert post(it, "/v1/events", ev, SENDER_TOKEN)[0] == 401
        assert post(it, "/v1/events", ev, events_token())[0] == 401
    finally:
        it.receiver.stop()
    assert calls == []


def test_the_token_must_hold_for_every_monitor_in_the_body(intake: Intake) -> None:
    payload = am_payload(xid(), xid(training_job="someone-else"))
    status, _, _ = post(intake, "/v1/alerts", payload, alerts_token())
    assert status == 401
    assert intake.calls == []


def cache(it: Intake) -> FakeReads:
    reads = it.receiver.monitors
    assert isinstance(reads, FakeReads)
    return reads


def test_a_monitor_created_again_under_its_name_refuses_the_old_token_and_takes_the_new(
    intake: Intake,
) -> None:
    """The token is bound to the monitor's uid: whoever kept the deleted monitor's Secret holds nothing
    for the monitor created in its place, and the new Secret's token is taken at once."""
    old = alerts_token()
    assert post(intake, "/v1/alerts", am_payload(xid("1")), old)[0] == 200
    cache(intake).monitors[("ml", "llama")] = monitor_body("llama") | {
        "metadata": {"name": "llama", "namespace": "ml", "uid": "uid-llama-recreated", "generation": 1}
    }
    status, answer, headers = post(intake, "/v1/alerts", am_payload(xid("2")), old)
    assert (status, headers["WWW-Authenticate"]) == (401, "Bearer")
    assert answer == {"error": "the token is not valid for this endpoint and monitor"}
    assert len(intake.calls) == 1
    new = alerts_token(uid="uid-llama-recreated")
    assert post(intake, "/v1/alerts", am_payload(xid("2")), new)[0] == 200
    assert [s.labels["gpu"] for call in intake.calls for s in call] == ["1", "2"]


def test_a_token_of_a_monitor_that_does_not_exist_now_is_the_same_401_as_a_wrong_one(intake: Intake) -> None:
    wrong = post(intake, "/v1/alerts", am_payload(xid()), "not-a-token")
    del cache(intake).monitors[("ml", "llama")]
    deleted = post(intake, "/v1/alerts", am_payload(xid()), alerts_token())
    assert (deleted[0], deleted[1], deleted[2]["WWW-Authenticate"]) == (wrong[0], wrong[1], "Bearer")
    assert deleted[0] == 401 and intake.calls == []


def test_every_monitor_named_is_checked_present_or_not(
    intake: Intake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No early exit and no short cut for an absent monitor: the time taken says nothing about which
    monitor failed or whether it exists."""
    checked: list[tuple[str, str, str]] = []
    real = tokens.verify

    def spy(key: bytes, purpose: str, ns: str, name: str, uid: str, *, presented: str) -> bool:
        checked.append((ns, name, uid))
        return real(key, purpose, ns, name, uid, presented=presented)

    monkeypatch.setattr(tokens, "verify", spy)
    payload = am_payload(xid(training_job="a-ghost"), xid(), xid(training_job="b-ghost"))
    assert post(intake, "/v1/alerts", payload, "not-a-token")[0] == 401
    assert [(ns, name) for ns, name, _ in checked] == [("ml", "a-ghost"), ("ml", "b-ghost"), ("ml", "llama")]
    assert checked[2][2] == "uid-llama"


@pytest.mark.parametrize(
    "error",
    [NotSynced("the cache of trainingjobmonitors has not listed yet"),
     Stale("the monitor cache has heard nothing from the API for 200s")],
    ids=["not-synced", "stale"],
)  # fmt: skip
def test_a_monitor_cache_that_cannot_say_is_503_with_retry_after(intake: Intake, error: Exception) -> None:
    """The token is checked against the monitor as it is now; a cache that cannot say is no ground for a
    401, which Alertmanager would not retry."""
    cache(intake).error = error
    status, answer, headers = post(intake, "/v1/alerts", am_payload(xid()), alerts_token())
    assert (status, headers["Retry-After"]) == (503, "5") and "retry" in answer["error"]
    assert intake.calls == []
    cache(intake).error = None
    assert post(intake, "/v1/alerts", am_payload(xid()), alerts_token())[0] == 200


# ---- 400 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"{not json", "body: not JSON"),
        (b"\xff\xfe{}", "body: not JSON"),
        (b"[" * 2000 + b"]" * 2000, "body: not JSON"),
        (b"", "body: not JSON"),
        (b'{"version": "4", "alerts": "x"}', "alerts: expected a list"),
        (
            json.dumps(am_payload(xid(), {"alertname": "X", "severity": "P0", "training_job": "j"})).encode(),
            "alerts[1].labels.namespace: missing",
        ),
    ],
)
def test_a_malformed_body_is_400_with_the_reason(intake: Intake, data: bytes, reason: str) -> None:
    status, body, _ = post(intake, "/v1/alerts", data, alerts_token())
    assert status == 400 and body["error"].startswith(reason)
    assert intake.calls == []


def test_a_malformed_event_is_400_naming_the_field(intake: Intake) -> None:
    ev = event("GPULost", {"namespace": "ml", "node": "a"}, "lost", NOW)
    status, body, _ = post(intake, "/v1/events", ev, SENDER_TOKEN)
    assert (status, body) == (400, {"error": "labels.training_job: missing"})


def test_a_body_one_byte_over_the_limit_is_400(intake: Intake) -> None:
    data = json.dumps(am_payload(xid())).encode()
    data += b" " * (MAX_BODY + 1 - len(data))
    # the client is still sending when the answer goes out; it must get the answer, not a reset
    for _ in range(3):
        status, body, _ = post(intake, "/v1/alerts", data, alerts_token())
        assert (
            status == 400 and body["error"] == f"body: {MAX_BODY + 1} bytes is over the limit of {MAX_BODY}"
        )
    assert intake.calls == []


def test_an_oversized_body_is_refused_before_a_byte_of_it_is_read(intake: Intake) -> None:
    # the headers promise a gigabyte and nothing follows: a server that tried to read it would hang
    head = [("Authorization", f"Bearer {alerts_token()}"), ("Content-Length", str(1 << 30))]
    started = time.monotonic()
    status, body = raw_request(intake, head)
    assert status == 400 and "over the limit" in body["error"]
    assert time.monotonic() - started < 3


@pytest.mark.parametrize(
    ("head", "reason"),
    [
        ([("Content-Length", "-1")], "Content-Length: not a non-negative integer"),
        ([("Content-Length", "ten")], "Content-Length: not a non-negative integer"),
        ([("Content-Length", "+2")], "Content-Length: not a non-negative integer"),
        ([], "Content-Length: missing"),
        ([("Transfer-Encoding", "chunked")], "Transfer-Encoding: not accepted"),
        ([("Content-Length", "2"), ("Content-Length", "2")], "Content-Length: given more than once"),
    ],
)
def test_a_bad_content_length_is_400(intake: Intake, head: list[tuple[str, str]], reason: str) -> None:
    status, body = raw_request(intake, [("Authorization", f"Bearer {alerts_token()}"), *head])
    assert status == 400 and body["error"].startswith(reason)
    assert intake.calls == []


# ---- 404, 405, 503, 500 ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/v1/alert", "/v1/alerts/x", "/v1/control"])
def test_an_unknown_path_is_404(intake: Intake, path: str) -> None:
    status, body, _ = post(intake, path, am_payload(xid()), alerts_token())
    assert status == 404 and body["error"]
    assert intake.calls == []


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
def test_a_method_other_than_post_is_405(intake: Intake, method: str) -> None:
    status, _, headers = post(intake, "/v1/events", b"", SENDER_TOKEN, method=method)
    assert status == 405 and headers["Allow"] == "POST"
    assert intake.calls == []


def test_a_standby_replica_answers_503_with_retry_after(intake: Intake) -> None:
    intake.standby = True
    status, body, headers = post(intake, "/v1/alerts", am_payload(xid()), alerts_token())
    assert status == 503 and int(headers["Retry-After"]) > 0 and body["error"]
    assert intake.calls == []
    intake.standby = False
    assert post(intake, "/v1/alerts", am_payload(xid()), alerts_token())[0] == 200


def test_signals_that_could_not_be_recorded_are_503_with_retry_after(intake: Intake) -> None:
    intake.unrecorded = True
    for path, body, token in (("/v1/alerts", am_payload(xid()), alerts_token()),
                              ("/v1/events", event("GPULost", IDENTITY | {"gpu": "0"}, "lost", NOW), SENDER_TOKEN)):  # fmt: skip
        status, answer, headers = post(intake, path, body, token)
        assert status == 503 and int(headers["Retry-After"]) > 0 and "retry" in answer["error"], answer
    intake.unrecorded = False
    assert post(intake, "/v1/alerts", am_payload(xid()), alerts_token())[0] == 200


def test_a_200_means_the_signal_is_in_the_monitors_status(certs: Path) -> None:
    """The receiver wired to the P0 loop as the operator wires it (its planner not started): the answer
    comes after the write, and a failed write is a 503 the sender retries."""
    loop, kube, _ = loop_rig()
    config = ReceiverConfig("127.0.0.1", 0, str(certs / "tls.crt"), str(certs / "tls.key"), KEY)
    results: list[tuple[str, str]] = []
    receiver = Receiver(config, loop.receive, clock=lambda: NOW, observe=lambda s, r: results.append((s, r)),
                        monitors=kube)  # fmt: skip
    it = Intake(receiver, str(certs / "ca.crt"))
    receiver.start()
    try:
        labels = xid("3", training_job="llama-pretrain")
        token = alerts_token(name="llama-pretrain", uid="u-1")
        status, _, _ = post(it, "/v1/alerts", am_payload(labels), token)
        assert status == 200
        [entry] = kube.get_monitor("ml", "llama-pretrain")["status"]["pendingSignals"]
        assert (entry["alertname"], entry["labels"]["gpu"], entry["source"]) == (
            "GPUCriticalXid",
            "3",
            "alertmanager",
        )

        def down(*args: Any, **kw: Any) -> None:
            raise refused(503, "etcdserver: leader changed")

        kube.patch_status = down  # type: ignore[method-assign]
        status, _, headers = post(it, "/v1/alerts", am_payload(labels | {"gpu": "4"}), token)
        assert status == 503 and int(headers["Retry-After"]) > 0
        assert results == [("alertmanager", "accepted"), ("alertmanager", "failed")]
    finally:
        receiver.stop()
        loop.stop()


def test_a_failure_to_take_the_signals_in_is_500_and_logged(
    intake: Intake, caplog: pytest.LogCaptureFixture
) -> None:
    intake.fail = True
    with caplog.at_level(logging.ERROR, logger="trainguard.remediation.receiver"):
        status, body, _ = post(intake, "/v1/alerts", am_payload(xid()), alerts_token())
    assert status == 500 and "retry" in body["error"]
    assert any(r.exc_info and "store is down" in str(r.exc_info[1]) for r in caplog.records)


# ---- the server itself ----------------------------------------------------------------------------


def test_no_token_reaches_the_log(intake: Intake, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="trainguard.remediation"):
        post(intake, "/v1/alerts", am_payload(xid()), alerts_token())
        post(intake, "/v1/alerts", am_payload(xid()), events_token())
        post(intake, "/v1/alerts", am_payload(xid()), "a-secret-wrong-token")
        post(intake, "/v1/events", b"{", events_token())
        post(intake, "/v1/events", event("GPULost", IDENTITY | {"gpu": "0"}, "lost", NOW), SENDER_TOKEN)
        post(
            intake, "/v1/events", event("GPULost", IDENTITY | {"gpu": "0"}, "lost", NOW), "a-forged-pod-token"
        )
        intake.fail = True
        post(intake, "/v1/alerts", am_payload(xid()), alerts_token())
    text = caplog.text
    assert "refused a token" in text  # the refusal is logged, the token is not
    for secret in (
        alerts_token(),
        events_token(),
        "a-secret-wrong-token",
        SENDER_TOKEN,
        "a-forged-pod-token",
    ):
        assert secret not in text


def test_a_client_that_never_finishes_its_handshake_does_not_block_others(intake: Intake) -> None:
    stuck = socket.create_connection(("127.0.0.1", intake.receiver.port))
    try:
        stuck.sendall(b"\x16\x03\x01")  # the start of a ClientHello, and then nothing
        result: list[int] = []
        t = threading.Thread(
            target=lambda: result.append(post(intake, "/v1/alerts", am_payload(xid()), alerts_token())[0])
        )
        t.start()
        t.join(timeout=5)
        assert result == [200]
    finally:
        stuck.close()


def test_tls_1_2_is_the_floor(intake: Intake) -> None:
    assert intake.receiver.tls_context().minimum_version == ssl.TLSVersion.TLSv1_2
    ctx = intake.context()
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2  # an older client still gets in
    with (
        socket.create_connection(("127.0.0.1", intake.receiver.port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.version() == "TLSv1.2"


def test_port_zero_picks_a_free_port_and_stop_closes_it(certs: Path) -> None:
    config = ReceiverConfig("127.0.0.1", 0, str(certs / "tls.crt"), str(certs / "tls.key"), KEY)
    receiver = Receiver(config, lambda signals: None, monitors=monitors())
    receiver.start()
    port = receiver.port
    assert port != 0
    receiver.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_a_receiver_without_a_proper_key_does_not_start(certs: Path) -> None:
    config = ReceiverConfig("127.0.0.1", 0, str(certs / "tls.crt"), str(certs / "tls.key"), b"short")
    with pytest.raises(ValueError, match="at least 32 bytes"):
        Receiver(config, lambda signals: None, monitors=monitors())


# ---- a real Alertmanager --------------------------------------------------------------------------


def _am_config(path: Path, url: str, token: str, ca: str) -> Path:
    config = {
        "route": {
            "receiver": "trainguard",
            "group_by": ["alertname", "namespace", "training_job", "node", "gpu"],
            "group_wait": "100ms",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [
            {
                "name": "trainguard",
                "webhook_configs": [
                    {
                        "url": url,
                        "send_resolved": True,
                        "http_config": {
                            "authorization": {"type": "Bearer", "credentials": token},
                            "tls_config": {"ca_file": ca},
                        },
                    }
                ],
            }
        ],
    }
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


@pytest.mark.tools
@pytest.mark.parametrize("right_token", [True, False], ids=["alerts-token", "events-token"])
def test_a_real_alertmanager_webhook_is_taken_in_with_the_alerts_token_only(
    intake: Intake, tmp_path: Path, right_token: bool
) -> None:
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.skip("Alertmanager is not installed (.ci/run installs prometheus-alertmanager)")
    token = alerts_token() if right_token else events_token()
    config = _am_config(tmp_path / "am.yml", intake.base + "/v1/alerts", token, intake.ca)
    labels = xid("3") | {"UUID": "GPU-abc"}
    with alertmanager(binary, config, tmp_path) as url:
        http_json(f"{url}/api/v2/alerts", [{"labels": labels, "annotations": {"summary": "fatal XID"}}])
        if not right_token:
            # Alertmanager does not retry a 4xx; give it time to have tried, then nothing was taken in
            wait_for(
                "Alertmanager's 401", lambda: "401" in (tmp_path / "alertmanager.log").read_text(), 10, 0.05
            )
            assert intake.calls == []
            return
        wait_for("the intake's call", lambda: intake.calls, 10, 0.05)
    ((signal,),) = intake.calls[:1]
    fast = event("GPUCriticalXid", IDENTITY | {"gpu": "3", "UUID": "GPU-abc", "xid": "79"}, "x", NOW)
    assert (signal.source, signal.firing, signal.labels) == (Source.ALERTMANAGER, True, labels)
    assert signal.fingerprint == fast["fingerprint"]


@pytest.mark.tools
def test_a_real_alertmanager_posts_again_after_the_503_of_a_monitor_cache_that_cannot_say(
    intake: Intake, tmp_path: Path
) -> None:
    """An operator whose monitor cache has not listed yet answers 503, not 401: Alertmanager keeps the
    alert and delivers it once the cache can say which monitor the token belongs to."""
    binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if binary is None:
        pytest.skip("Alertmanager is not installed (.ci/run installs prometheus-alertmanager)")
    reads = cache(intake)
    reads.error = NotSynced("the cache of trainingjobmonitors has not listed yet")
    config = _am_config(tmp_path / "am.yml", intake.base + "/v1/alerts", alerts_token(), intake.ca)
    with alertmanager(binary, config, tmp_path) as url:
        http_json(f"{url}/api/v2/alerts", [{"labels": xid("3"), "annotations": {"summary": "fatal XID"}}])
        wait_for("Alertmanager's first post, answered 503", lambda: reads.uid_reads >= 1, 10, 0.05)
        assert intake.calls == []
        reads.error = None
        wait_for("the alert, posted again", lambda: intake.calls, 20, 0.05)
    assert intake.calls[0][0].labels["gpu"] == "3"
    assert reads.uid_reads >= 2


def test_connections_beyond_the_bound_are_closed_and_the_slots_come_back(certs: Path) -> None:
    """A flood of clients that connect and say nothing holds at most max_connections threads; one more is
    closed unanswered (the sender retries), and once the flood is gone a post is served again."""
    config = ReceiverConfig("127.0.0.1", 0, str(certs / "tls.crt"), str(certs / "tls.key"), KEY,
                            max_connections=2)  # fmt: skip
    receiver = Receiver(
        config, lambda signals: None, clock=lambda: NOW, monitors=monitors(), senders=senders()
    )
    receiver.start()
    it = Intake(receiver, str(certs / "ca.crt"))
    stuck = [socket.create_connection(("127.0.0.1", receiver.port)) for _ in range(2)]
    try:
        time.sleep(0.3)  # both accepted and holding their slots
        with pytest.raises(OSError):  # closed before the handshake: the TLS client sees EOF or a reset
            post(it, "/v1/alerts", am_payload(xid()), alerts_token())
        for s in stuck:
            s.close()
        assert wait_for("a slot back", lambda: post(it, "/v1/alerts", am_payload(xid()), alerts_token())[0] == 200,
                        timeout=15)  # fmt: skip
    finally:
        for s in stuck:
            s.close()
        receiver.stop()
