"""bench/admission.py's pure parts: its two layouts of monitors, the pods it admits (each selected by
its monitor alone), and the restart records of its restart rows, which must take the paths they name."""

from __future__ import annotations

import json
import time

from bench.admission import CHECKPOINT, layouts, monitor_body, pod, restart_record

from trainguard.api import parse_spec
from trainguard.controller.admission import Restart, parse_valid, restart_of, select


def test_the_layouts_hold_the_same_monitors_spread_and_in_one_namespace() -> None:
    where = layouts(500, 50)
    assert len(where["spread"]) == len(where["dense"]) == 500
    assert len({ns for ns, _ in where["spread"]}) == 50 and {ns for ns, _ in where["dense"]} == {
        "bench-dense"
    }
    assert [job for _, job in where["spread"]] == [job for _, job in where["dense"]]


def test_each_pod_is_selected_by_its_own_monitor() -> None:
    monitors = [monitor_body("bench-dense", f"job-{i:04d}") for i in range(20)]
    for m in monitors:
        parse_spec(m)  # valid: the apiserver takes them
    found = select(pod("bench-dense", "job-0007", 3), parse_valid(monitors))
    assert found is not None and found[0].name == "job-0007"


def test_the_restart_rows_read_the_pointer_from_the_status_or_ask_the_api() -> None:
    now = time.time()
    recorded = restart_of({"status": {"remediations": [restart_record(legacy=False)]}}, now)
    assert recorded == Restart(json.dumps(CHECKPOINT, sort_keys=True))
    legacy = restart_of({"status": {"remediations": [restart_record(legacy=True)]}}, now)
    assert legacy == Restart(None, recorded=False), (
        "an older operator's record: the webhook GETs the workload"
    )
