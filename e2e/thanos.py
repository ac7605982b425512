"""Thanos as the distributed rule and storage engine (docs/distributed.md), as local processes: Receive
nodes in one hashring with replication, a Query over them and the Ruler, and a Ruler that evaluates rule
files through that Query and sends to an Alertmanager. One `thanos` binary, built by build.sh."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from e2e.controlplane.cache import cache_dir
from e2e.remote_write import Sample, post
from tests.processes import free_port, http_json, start, stop, wait_for, wait_http

BUILD = Path(__file__).resolve().parent / "controlplane" / "build.sh"
RECEIVE_REPLICA = "receive_replica"
"""Each receiver's external label naming it: Query deduplicates the copies of a series on it."""
RULER_REPLICA = "thanos_ruler_replica"
"""The Ruler's, as prometheus-operator's ThanosRuler sets it (the pod's name): Query deduplicates on it
too (the Ruler's ALERTS and recorded series come back without it) and the Ruler drops it from the
alerts it sends, so that Alertmanager gets the labels a single Prometheus would send."""
TENANT_LABEL = "tenant_id"
"""Receive's tenant label (--receive.tenant-label-name), on every series it stores: `default-tenant`
without a THANOS-TENANT header. The rules keep it on what they record and on ALERTS; the Ruler drops it
from the alerts it sends, as a ThanosRuler's alertDropLabels must (docs/distributed.md)."""


def thanos_binary() -> str:
    """build.sh's thanos (built or reused: it waits for a build in progress), or the cached one without
    Go; skips without either, or fails where CI requires the tools (TRAINGUARD_REQUIRE_TOOLS)."""
    if shutil.which("go"):
        subprocess.run([str(BUILD), "thanos"], check=True)
    built = cache_dir() / "bin" / "current" / "thanos"
    if built.exists():
        return str(built)
    if os.environ.get("TRAINGUARD_REQUIRE_TOOLS"):
        pytest.fail("thanos is required (TRAINGUARD_REQUIRE_TOOLS is set) but not built")
    pytest.skip(
        "thanos is not built: `e2e/controlplane/build.sh thanos` builds it from its Go module (needs Go)"
    )


@dataclass
class Receiver:
    name: str
    proc: subprocess.Popen[bytes]
    grpc: str
    http: str
    write_url: str


@dataclass
class Thanos:
    receivers: list[Receiver]
    query: str
    """Query's base URL (the Prometheus HTTP API)."""
    rule: str
    """The Ruler's base URL (/api/v1/alerts, /api/v1/rules, /metrics)."""
    procs: list[subprocess.Popen[bytes]]


WARMUP_RULES = """groups:
  - name: e2e-warmup
    interval: 5s
    rules:
      - record: e2e:ruler_up
        expr: vector(1)
"""
"""The harness's own rule, not the catalogue's: the Ruler records from its first round, so Query learns its
store's time range (refreshed every 5 s) before the test's rules record anything."""


def settle(receivers: list[Receiver], query: str) -> None:
    """Wait for the steady state that a running Thanos is in: every receiver has opened its tenant's TSDB
    (Receive opens it on the first write, and answers `TSDB not ready` until then: a write that reaches
    one replica of two is acknowledged, with one copy) and Query reads the Ruler's TSDB."""
    now = int(time.time() * 1000)
    batch = [Sample((("__name__", "e2e_warmup"), ("i", str(i))), now, 1.0) for i in range(12)]

    def every_receiver_stores() -> bool:
        for r in receivers:
            with contextlib.suppress(OSError):
                post(r.write_url, batch)
        q = urllib.parse.quote("count by (receive_replica) (e2e_warmup)")
        got = http_json(f"{query}/api/v1/query?dedup=false&query={q}")["data"]["result"]
        return len(got) == len(receivers)

    wait_for("every receiver to store the warm-up series", every_receiver_stores, timeout=60, interval=1)

    def ruler_store_has_data() -> bool:
        stores = http_json(f"{query}/api/v1/stores")["data"]["rule"]
        return all(int(s["minTime"]) < 2**63 - 1 for s in stores)

    wait_for("Query to know the Ruler's data", ruler_store_has_data, timeout=60)


def hashring(endpoints: list[str]) -> list[dict[str, object]]:
    """Receive's hashring file: one ring of every receiver's gRPC address."""
    return [{"hashring": "default", "endpoints": endpoints}]


@contextlib.contextmanager
def thanos_stack(
    binary: str,
    workdir: Path,
    rule_file: Path,
    alertmanager_url: str,
    *,
    receivers: int = 3,
    replication_factor: int = 2,
    eval_interval: str = "15s",
) -> Iterator[Thanos]:
    """`receivers` Receive nodes (one hashring, `replication_factor` copies of each series), a Ruler over
    `rule_file` and a Query over all of them, up and connected; stopped on exit."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        grpc = [f"127.0.0.1:{free_port()}" for _ in range(receivers)]
        (workdir / "hashring.json").write_text(json.dumps(hashring(grpc)))
        recv: list[Receiver] = []
        for i, addr in enumerate(grpc):
            name, http, write = f"receive-{i}", free_port(), free_port()
            proc = start(
                [
                    binary, "receive",
                    f"--tsdb.path={workdir / name}",
                    f"--grpc-address={addr}",
                    f"--http-address=127.0.0.1:{http}",
                    f"--remote-write.address=127.0.0.1:{write}",
                    # unused (replication is over gRPC by default), but it listens, on 0.0.0.0:19391
                    f"--receive.capnproto-address=127.0.0.1:{free_port()}",
                    f"--receive.hashrings-file={workdir / 'hashring.json'}",
                    f"--receive.local-endpoint={addr}",
                    f"--receive.replication-factor={replication_factor}",
                    f'--label={RECEIVE_REPLICA}="{name}"',
                ],
                workdir / f"{name}.log",
            )  # fmt: skip
            procs.append(proc)
            recv.append(
                Receiver(
                    name, proc, addr, f"http://127.0.0.1:{http}", f"http://127.0.0.1:{write}/api/v1/receive"
                )
            )
        (workdir / "warmup.yml").write_text(WARMUP_RULES)
        rule_http, rule_grpc, query_http = free_port(), f"127.0.0.1:{free_port()}", free_port()
        rule = start(
            [
                binary, "rule",
                f"--data-dir={workdir / 'rule'}",
                f"--rule-file={rule_file}",
                f"--rule-file={workdir / 'warmup.yml'}",
                f"--eval-interval={eval_interval}",
                f"--alertmanagers.url={alertmanager_url}",
                f"--query=127.0.0.1:{query_http}",
                f'--label={RULER_REPLICA}="rule-0"',
                f"--alert.label-drop={RULER_REPLICA}",
                f"--alert.label-drop={TENANT_LABEL}",
                f"--http-address=127.0.0.1:{rule_http}",
                f"--grpc-address={rule_grpc}",
            ],
            workdir / "rule.log",
        )  # fmt: skip
        procs.append(rule)
        query = start(
            [
                binary, "query",
                f"--http-address=127.0.0.1:{query_http}",
                f"--grpc-address=127.0.0.1:{free_port()}",
                f"--query.replica-label={RECEIVE_REPLICA}",
                f"--query.replica-label={RULER_REPLICA}",
                *[f"--endpoint={r.grpc}" for r in recv],
                f"--endpoint={rule_grpc}",
            ],
            workdir / "query.log",
        )  # fmt: skip
        procs.append(query)
        for r in recv:  # ready: the hashring is loaded and its TSDB open
            wait_http(f"{r.http}/-/ready", timeout=60, proc=r.proc)
        base = f"http://127.0.0.1:{query_http}"
        wait_http(f"{base}/-/ready", timeout=60, proc=query)
        wait_http(f"http://127.0.0.1:{rule_http}/-/ready", timeout=60, proc=rule)

        def connected() -> bool:
            stores = http_json(f"{base}/api/v1/stores")["data"]
            return len(stores.get("receive", [])) == receivers and len(stores.get("rule", [])) == 1

        wait_for("Query to connect to every receiver and the Ruler", connected, timeout=60)
        settle(recv, base)
        yield Thanos(recv, base, f"http://127.0.0.1:{rule_http}", procs)
    finally:
        stop(procs)
