"""A report input built from a seeded trace, with log lines and a remediation record, shared by the
report tests (pure and in Chromium)."""

from __future__ import annotations

from tests.diagnosis.traces import AT, JOB, NS, trace
from trainguard.diagnosis import diagnose
from trainguard.diagnosis.logs import LogLine
from trainguard.diagnosis.report import AlertInfo, ReportInput

TRACE_ID = "run-7f3a9c"

LOG_LINES = (
    LogLine(AT - 80, "llm-worker-2", "step 1200 loss 2.31"),  # outside +-30 s: left out
    LogLine(AT - 20, "llm-worker-2", "step 1210 loss 2.29 tokens/s 2510"),
    LogLine(
        AT - 5,
        "llm-worker-2",
        "[rank2]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout",
    ),
    LogLine(AT - 4, "llm-worker-2", "Traceback (most recent call last):"),
    LogLine(AT - 4, "llm-worker-2", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
    LogLine(AT + 3, "llm-worker-5", "RuntimeError: CUDA error: an illegal memory access was encountered"),
    LogLine(AT + 10, "llm-worker-5", "<script>alert(1)</script> printed by the trainer"),
)

RECORD = {
    "id": "r-1",
    "alert": "TrainingThroughputDrop",
    "phase": "Succeeded",
    "created": "2025-10-09T08:53:20.000Z",
    "message": "diagnostic report written",
    "steps": [{"kind": "notify", "phase": "Succeeded", "detail": "email and ticket receivers"}],
}


def report_input(scenario: str = "throughput-data", seed: int = 0) -> ReportInput:
    snap = trace(scenario, seed).snapshot
    alert = AlertInfo(
        "TrainingThroughputDrop",
        "P2",
        AT,
        NS,
        JOB,
        node="gpu-node-0",
        summary="Throughput is 30% below its baseline",
        runbook_url="https://trainguard.example/runbook#trainingthroughputdrop",
        trace_id=TRACE_ID,
    )
    return ReportInput(alert, snap, diagnose(snap), LOG_LINES, (RECORD,))
