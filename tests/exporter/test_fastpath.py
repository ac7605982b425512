"""The fast path: P0 signals leave the sidecar within a second, with the pod's projected ServiceAccount
token (read again for every post, as the kubelet rotates it), and a refused token is not retried
forever."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.exporter.fastpath_receiver import receiver
from tests.exporter.running import running_exporter
from trainguard.catalog.events import fingerprint
from trainguard.exporter.fastpath import FastPathSender, detect_gpu_faults
from trainguard.exporter.readings import GPUReading


def test_nan_loss_reaches_the_receiver_within_a_second_with_the_pods_identity_token(tmp_path: Path) -> None:
    control, identity = tmp_path / "token", tmp_path / "identity"
    control.write_text("the-monitors-control-token\n")
    identity.write_text("s3cret-token\n")
    with (
        receiver("s3cret-token") as rcv,
        running_exporter(
            "--backend",
            "simulated",
            "--gpus",
            "1",
            "--fastpath-url",
            rcv.url,
            "--fastpath-token-file",
            str(control),
            "--fastpath-identity-file",
            str(identity),
        ) as exp,
    ):
        exp.post("/v1/report", {"events": [{"type": "step", "step": 1, "loss": 2.0}]})
        sent = time.monotonic()
        exp.post("/v1/report", {"events": [{"type": "step", "step": 2, "loss": "nan"}]})
        deadline = sent + 1.0
        while not rcv.got and time.monotonic() < deadline:
            time.sleep(0.01)
        assert rcv.got, "no fast-path event within one second"
        at, auth, body = rcv.got[0]
        assert at - sent < 1.0
        assert auth == "Bearer s3cret-token"
        labels = body["labels"]
        assert labels["alertname"] == "TrainingLossNonFinite" and labels["severity"] == "P0"
        assert (labels["namespace"], labels["training_job"], labels["node"]) == (
            "ml",
            "llama-pretrain",
            "gpu-node-1",
        )
        # the same fingerprint the operator computes from the Alertmanager alert's labels
        assert body["fingerprint"] == fingerprint(labels)


def test_a_wrong_token_is_not_retried_forever(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("wrong")
    with receiver("right") as rcv:
        sender = FastPathSender(rcv.url, str(token_file), sleep=lambda s: None)
        ev = {"labels": {"alertname": "X"}, "fingerprint": "f"}
        assert sender.post(ev) == "unauthorized"
        assert rcv.attempts == 1
        assert sender.results == {"unauthorized": 1}


def test_the_token_is_read_again_for_every_post_as_the_kubelet_rotates_it(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("first\n")
    with receiver("first") as rcv:
        sender = FastPathSender(rcv.url, str(token_file), sleep=lambda s: None)
        assert sender.post({"labels": {}, "fingerprint": "a"}) == "sent"
        token_file.write_text("rotated\n")
        rcv.token = "rotated"
        assert sender.post({"labels": {}, "fingerprint": "b"}) == "sent"
    assert [auth for _, auth, _ in rcv.got] == ["Bearer first", "Bearer rotated"]


def test_without_a_projected_token_the_event_is_posted_bare_refused_and_not_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "no-such-dir" / "token"
    with receiver("right") as rcv, caplog.at_level("ERROR", logger="trainguard.exporter.fastpath"):
        sender = FastPathSender(rcv.url, str(missing), sleep=lambda s: None)
        assert sender.post({"labels": {}, "fingerprint": "f"}) == "unauthorized"
    assert rcv.attempts == 1 and rcv.got == []
    assert f"no identity token at {missing}" in caplog.text


def test_transient_failures_are_retried_with_backoff(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("t")
    delays: list[float] = []
    with receiver("t", reject_first=3) as rcv:
        sender = FastPathSender(rcv.url, str(token_file), sleep=delays.append)
        assert sender.post({"labels": {}, "fingerprint": "f"}) == "sent"
    assert rcv.attempts == 4
    assert delays == [0.1, 0.2, 0.4]


def test_gpu_fault_detection() -> None:
    base = {"namespace": "ml", "training_job": "j", "node": "n"}
    before = [
        GPUReading(0, "U0", "H100", ecc_dbe_total=0, last_xid=0),
        GPUReading(1, "U1", "H100", ecc_dbe_total=0, last_xid=13),
    ]
    after = [
        GPUReading(0, "U0", "H100", ecc_dbe_total=1, last_xid=48),
        GPUReading(1, "U1", "H100", ecc_dbe_total=0, last_xid=13),
    ]
    events = detect_gpu_faults(before, after, base, 0.0)
    assert sorted(e["labels"]["alertname"] for e in events) == ["GPUCriticalXid", "GPUDoubleBitECCError"]
    assert all(e["labels"]["gpu"] == "0" for e in events)
    assert detect_gpu_faults(after, after, base, 0.0) == [], "a fault already reported is not news"
    assert detect_gpu_faults(None, before, base, 0.0) == [], (
        "XID 13 is not fatal; no history, no DBE increase"
    )


def test_the_same_fault_is_posted_once_a_minute_not_every_step() -> None:
    now = [0.0]
    sender = FastPathSender("http://127.0.0.1:9/", None, clock=lambda: now[0])
    ev = {"labels": {"alertname": "TrainingLossNonFinite"}, "fingerprint": "abc"}
    assert sender.send(ev) is True
    now[0] = 30.0
    assert sender.send(ev) is False, "a NaN on the next step is the same event"
    now[0] = 61.0
    assert sender.send(ev) is True, "still failing a minute later: say so again"
    assert sender.send({**ev, "fingerprint": "other"}) is True


def test_a_gpu_that_falls_off_the_bus_is_posted_once() -> None:
    base = {"namespace": "ml", "training_job": "j", "node": "n"}
    healthy = [GPUReading(0, "U0", "H100", last_xid=0), GPUReading(1, "U1", "H100", last_xid=0)]
    lost = [GPUReading(0, "U0", "H100", last_xid=0), GPUReading(1, "U1", "H100", lost=True)]
    events = detect_gpu_faults(healthy, lost, base, 0.0)
    assert [(e["labels"]["alertname"], e["labels"]["gpu"], e["labels"]["UUID"]) for e in events] == [
        ("GPULost", "1", "U1")
    ]
    assert events[0]["labels"]["severity"] == "P0"
    assert detect_gpu_faults(lost, lost, base, 0.0) == [], "still lost is not news"
    assert [e["labels"]["alertname"] for e in detect_gpu_faults(None, lost, base, 0.0)] == ["GPULost"]


def test_a_ca_file_that_is_not_there_yet_does_not_stop_the_sender(tmp_path: Path) -> None:
    """The sidecar mounts the receiver's CA from a Secret that may not carry one (yet)."""
    sender = FastPathSender("https://127.0.0.1:1/v1/events", None, max_attempts=1, ca_file=str(tmp_path / "ca.crt"),
                    sleep=lambda s: None)  # fmt: skip
    assert sender.post({"fingerprint": "f", "labels": {}}) == "failed"  # refused connection, no exception
    (tmp_path / "ca.crt").write_text("not a certificate")
    assert sender.post({"fingerprint": "f", "labels": {}}) == "failed"


@pytest.mark.parametrize("how", ["the SDK's oom report", "the oom fault"])
def test_an_oom_reaches_the_receiver_within_a_second(tmp_path: Path, how: str) -> None:
    """The trainer may die right after its OOM: GPUOutOfMemory leaves by the fast path, not the next scrape."""
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token\n")
    with (
        receiver("s3cret-token") as rcv,
        running_exporter("--backend", "simulated", "--gpus", "2", "--enable-fault-injection",
                         "--fastpath-url", rcv.url, "--fastpath-identity-file", str(token_file)) as exp,
    ):  # fmt: skip
        sent = time.monotonic()
        if how == "the oom fault":
            exp.post("/v1/faults", {"fault": "oom", "gpu": 1})
        else:
            exp.post(
                "/v1/report", {"events": [{"type": "oom", "device": 1, "message": "CUDA out of memory"}]}
            )
        while not rcv.got and time.monotonic() < sent + 1.0:
            time.sleep(0.01)
        assert rcv.got, "no fast-path event within one second"
        _, _, body = rcv.got[0]
        assert body["labels"]["alertname"] == "GPUOutOfMemory" and body["labels"]["severity"] == "P0"
        assert body["annotations"]["summary"] == "the trainer ran out of GPU memory on GPU 1"
        assert exp.value("trainguard_train_oom_total") == 1.0
