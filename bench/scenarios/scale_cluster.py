"""The operator under many monitors on the local control plane (e2e/controlplane): time to Ready,
resident memory, API requests per reconcile, and the cordon latency of a P0 posted while it works.

The operator runs as e2e runs it (`Cluster.start_operator`: its own ServiceAccount, the receiver on
TLS) but with the production periods for the resync and the pod count unless told otherwise. Its API
requests are counted by the apiserver itself: two FlowSchemas match the operator's ServiceAccount (reads:
get, list, watch; writes: everything else) at the priority level it would get anyway (workload-low), so
`apiserver_flowcontrol_dispatched_requests_total{flow_schema=...}` counts exactly its requests.

The monitors' pods are bare Pods with spec.nodeName set (the scheduler is not what is measured) and no
GPU request, created through the operator's admission webhook; the fake kubelet marks them Running. A
P0 goes to a canary: a quickstart monitor with a 2-pod, 16-GPU Indexed Job (as in e2e/test_p0_loop.py),
one per injection, so every injection starts from a clean job; its alert is posted to the operator's
receiver with the monitor's token, and the cordon time is from the post to the node seen unschedulable
(polled every 50 ms). The canary's pods run no sidecar, so the GPU fault's second witness is a stand-in
Prometheus (`witness`, the operator's --prometheus-url) whose ALERTS show the job's rule fired.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import ssl
import statistics
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bench.scenarios.scale_rules import identity, log, monitor_documents
from kubernetes import client, config

from e2e.cluster import Cluster
from e2e.controlplane.local import LocalControlPlane
from e2e.monitors import indexed_job, quickstart, ready
from e2e.receiver import alert_payload, monitor_token, post, records
from tests.exposition import scrape
from tests.processes import free_port, wait_for
from trainguard.catalog.kubernetes import CORDON_REASON, CORDONED_AT, CORDONED_BY, FAULTY_TAINT
from trainguard.remediation import tokens

MON = ("trainguard.io", "v1alpha1", "trainingjobmonitors")
BENCH_LABEL = "trainguard.io/scale-bench"
FLOW_SCHEMAS = {"read": ["get", "list", "watch"], "write": ["*"]}


def flow_schemas() -> list[dict[str, Any]]:
    """Reads first (lower matchingPrecedence wins), then every other verb."""
    subject = {
        "kind": "ServiceAccount",
        "serviceAccount": {"name": "trainguard-operator", "namespace": "trainguard-system"},
    }
    return [
        {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
         "metadata": {"name": f"trainguard-bench-{kind}"},
         "spec": {"priorityLevelConfiguration": {"name": "workload-low"}, "matchingPrecedence": 500 + k,
                  "distinguisherMethod": {"type": "ByUser"},
                  "rules": [{"subjects": [subject],
                             "resourceRules": [{"verbs": verbs, "apiGroups": ["*"], "resources": ["*"],
                                                "clusterScope": True, "namespaces": ["*"]}],
                             "nonResourceRules": [{"verbs": verbs, "nonResourceURLs": ["*"]}]}]}}
        for k, (kind, verbs) in enumerate(FLOW_SCHEMAS.items())
    ]  # fmt: skip


@contextlib.contextmanager
def witness() -> Iterator[str]:
    """A stand-in Prometheus that answers the operator's ALERTS query (remediation/alert_history.py) with
    one series, and every other query with none: the second witness the canary's GPU fault needs."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = "ALERTS%7B" in self.path or "ALERTS{" in self.path
            result = [{"metric": {}, "value": [time.time(), "1"]}] if found else []
            body = json.dumps(
                {"status": "success", "data": {"resultType": "vector", "result": result}}
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def api_client(kubeconfig: Path, pool: int = 16) -> client.ApiClient:
    cfg = client.Configuration()
    config.load_kube_config(str(kubeconfig), client_configuration=cfg)
    cfg.connection_pool_maxsize = pool
    return client.ApiClient(cfg)


def rss_bytes(pid: int) -> int:
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmRSS:"):
            return int(row.split()[1]) * 1024
    return 0


def cpu_seconds(pid: int) -> float:
    """The process's user and system CPU time so far (/proc/PID/stat): what the operator itself costs,
    apart from the apiserver, etcd and the fake kubelets sharing this machine's cores."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Counters:
    """The operator's requests (by the apiserver's count) and reconciles (by its own metrics)."""

    reads: float
    writes: float
    reconciles: float
    reconcile_s: float
    webhook_calls: float
    injection_failures: float
    at: float = field(default_factory=time.monotonic)

    def shifted(self, later: Counters, earlier: Counters) -> Counters:
        """This reading moved on by (later - earlier): to leave a span out of a window."""
        return Counters(
            **{
                k: getattr(self, k) + getattr(later, k) - getattr(earlier, k)
                for k in self.__dataclass_fields__
            }
        )

    def minus(self, before: Counters) -> dict[str, Any]:
        n = self.reconciles - before.reconciles
        reads, writes = self.reads - before.reads, self.writes - before.writes
        return {
            "seconds": round(self.at - before.at, 1), "reconciles": int(n),
            "requests": int(reads + writes), "reads": int(reads), "writes": int(writes),
            "requests_per_reconcile": round((reads + writes) / n, 2) if n else None,
            "reads_per_reconcile": round(reads / n, 2) if n else None,
            "writes_per_reconcile": round(writes / n, 2) if n else None,
            "requests_per_s": round((reads + writes) / max(1e-9, self.at - before.at), 1),
            "reconcile_mean_ms": round(1000 * (self.reconcile_s - before.reconcile_s) / n, 1) if n else None,
            "webhook_calls": int(self.webhook_calls - before.webhook_calls),
            "injection_failures": int(self.injection_failures - before.injection_failures),
        }  # fmt: skip


@dataclass
class Bench:
    plane: LocalControlPlane
    cluster: Cluster
    operator_pid: int
    metrics_url: str
    nodes: int
    pods_per_monitor: int
    bulk: client.CoreV1Api = field(init=False)

    def __post_init__(self) -> None:
        self.bulk = client.CoreV1Api(api_client(self.plane.kubeconfig))
        d = self.plane.workdir
        self._tls = ssl.create_default_context(cafile=str(d / "ca.crt"))
        self._tls.load_cert_chain(str(d / "admin.crt"), str(d / "admin.key"))

    def counters(self) -> Counters:
        with urllib.request.urlopen(f"{self.plane.server}/metrics", context=self._tls, timeout=30) as resp:
            text = resp.read().decode()
        flows = dict.fromkeys(FLOW_SCHEMAS, 0.0)
        for row in text.splitlines():
            if row.startswith("apiserver_flowcontrol_dispatched_requests_total{"):
                for kind in FLOW_SCHEMAS:
                    if f'flow_schema="trainguard-bench-{kind}"' in row:
                        flows[kind] += float(row.rsplit(" ", 1)[1])
        op = scrape(self.metrics_url)
        return Counters(
            reads=flows["read"], writes=flows["write"],
            reconciles=sum(v for _, v in op.get("trainguard_operator_reconcile_total", [])),
            reconcile_s=sum(v for _, v in op.get("trainguard_operator_reconcile_duration_seconds_sum", [])),
            webhook_calls=sum(v for _, v in op.get("trainguard_operator_webhook_duration_seconds_count", [])),
            injection_failures=sum(v for _, v in op.get("trainguard_operator_injection_failures_total", [])),
        )  # fmt: skip

    # ---- bulk monitors and their pods ----

    def apply_monitors(self, indices: list[int]) -> float:
        docs = monitor_documents(indices)
        for ns in sorted({d["metadata"]["namespace"] for d in docs}):
            self.cluster.namespace(ns)
        t0 = time.monotonic()
        for d in docs:
            d["metadata"] = {**d["metadata"], "labels": {BENCH_LABEL: "true"}}
        self.cluster.apply(docs)
        return time.monotonic() - t0

    def ready_times(self, expected: int, since: float, timeout: float) -> list[float]:
        """Seconds from `since` until each bench monitor is first seen Ready at its generation (listed
        every 2 s, so 2 s resolution)."""
        first: dict[str, float] = {}
        custom = client.CustomObjectsApi(self.cluster.api)
        deadline = time.monotonic() + timeout
        while len(first) < expected and time.monotonic() < deadline:
            now = time.monotonic()
            for m in custom.list_cluster_custom_object(*MON, label_selector=BENCH_LABEL)["items"]:
                key = f"{m['metadata']['namespace']}/{m['metadata']['name']}"
                st = m.get("status") or {}
                ok = any(
                    c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or []
                )
                if ok and st.get("observedGeneration") == m["metadata"].get("generation"):
                    first.setdefault(key, now - since)
            time.sleep(2)
        return sorted(first.values())

    def create_pods(self, indices: list[int]) -> float:
        def one(i: int, p: int) -> None:
            ns, name = identity(i)
            body = {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"{name}-{p}", "namespace": ns, "labels": {"app": name}},
                    "spec": {"nodeName": f"gpu-node-{(i * self.pods_per_monitor + p) % self.nodes}",
                             "containers": [{"name": "trainer", "image": "registry.invalid/llama:1"}]}}  # fmt: skip
            self.bulk.create_namespaced_pod(ns, body)

        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(
                pool.map(lambda ip: one(*ip), [(i, p) for i in indices for p in range(self.pods_per_monitor)])
            )
        return time.monotonic() - t0

    # ---- the canary and its P0 ----

    @contextlib.contextmanager
    def canary(self) -> Iterator[tuple[str, list[Any]]]:
        ns = self.cluster.namespace(f"scale-canary-{uuid.uuid4().hex[:6]}")
        monitor, policy = quickstart(ns)
        monitor["spec"]["remediation"] = {"emergencyCheckpointTimeout": "2s", "maxCordonedNodes": 100}
        self.cluster.apply([monitor, policy])
        try:
            wait_for("canary monitor Ready", lambda: ready(self.cluster, ns), timeout=300)
            self.cluster.apply([indexed_job(ns)])
            pods = wait_for(
                "2 canary pods Running",
                lambda: (items := self.cluster.core.list_namespaced_pod(ns, label_selector="app=llama-pretrain").items)
                and len(items) == 2 and all(p.status.phase == "Running" for p in items) and items,
                timeout=300,
            )  # fmt: skip
            yield ns, pods
        finally:
            batch = client.BatchV1Api(self.cluster.api)
            with contextlib.suppress(Exception):
                batch.delete_namespaced_job("llama-pretrain", ns, propagation_policy="Background")
            with contextlib.suppress(Exception):
                self.cluster.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
                self.cluster.core.delete_namespace(ns, propagation_policy="Background")

    def cordon(self, ns: str, pods: list[Any]) -> dict[str, Any]:
        """Post a P0 for the canary's rank-0 node and time the node going unschedulable."""
        node = pods[0].spec.node_name
        token = monitor_token(self.cluster, tokens.ALERTS, ns, "llama-pretrain")
        before = self.counters()
        t0 = time.monotonic()
        status, answer = post(self.cluster, "/v1/alerts", alert_payload(ns, node), token)
        if status != 200:
            raise RuntimeError(f"the receiver answered {status}: {answer}")
        accepted = time.monotonic() - t0
        cordon = None
        while time.monotonic() - t0 < 180:
            if self.cluster.core.read_node(node).spec.unschedulable:
                cordon = time.monotonic() - t0
                break
            time.sleep(0.05)
        try:  # a remediation slow to finish on a loaded machine is a figure, not the end of the run
            record = wait_for("the remediation to finish", lambda: (r := records(self.cluster, ns))
                              and r[0]["phase"] in ("Succeeded", "Failed") and r[0], timeout=180)  # fmt: skip
        except AssertionError:
            record = {"phase": "unfinished after 180 s"}
        done = time.monotonic() - t0
        self.restore(node)
        return {"accepted_s": round(accepted, 3), "cordon_s": None if cordon is None else round(cordon, 3),
                "remediation_done_s": round(done, 1), "phase": record["phase"],
                "reconciles_meanwhile": int(self.counters().reconciles - before.reconciles)}  # fmt: skip

    def restore(self, node: str) -> None:
        """Uncordon and untaint the node as e2e/test_remediation_cluster._restore does for its three."""
        n = self.cluster.core.read_node(node)
        keep = [{k: v for k, v in t.to_dict().items() if v is not None} for t in n.spec.taints or []
                if t.key != FAULTY_TAINT]  # fmt: skip
        self.cluster.core.patch_node(
            node, {"metadata": {"annotations": {CORDONED_AT: None, CORDONED_BY: None, CORDON_REASON: None}},
                   "spec": {"unschedulable": None, "taints": keep or None}},
            _content_type="application/merge-patch+json",
        )  # fmt: skip

    def rss_during(self, seconds: float, stop: threading.Event | None = None) -> list[int]:
        samples: list[int] = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not (stop and stop.is_set()):
            samples.append(rss_bytes(self.operator_pid))
            time.sleep(1)
        return samples


def wait_nodes_clean(core: client.CoreV1Api, timeout: float) -> float:
    """The node lifecycle controller takes the not-ready taint off registered nodes at a few per second."""
    t0 = time.monotonic()
    wait_for("no node taints left", lambda: not any(n.spec.taints for n in core.list_node().items),
             timeout=timeout, interval=3)  # fmt: skip
    return time.monotonic() - t0


def stage(bench: Bench, indices: list[int], total: int, steady_s: float) -> dict[str, Any]:
    """Apply `indices` on top of what runs, time them to Ready (with a P0 posted meanwhile), create their
    pods, then hold a steady window of `steady_s` (with another P0 half way)."""
    out: dict[str, Any] = {"applied": len(indices), "monitors": total}
    with bench.canary() as (ns, pods):
        before = bench.counters()
        cpu0 = cpu_seconds(bench.operator_pid)
        t0 = time.monotonic()
        times: list[float] = []
        watcher = threading.Thread(
            target=lambda: times.extend(bench.ready_times(total, t0, timeout=900)), daemon=True
        )
        watcher.start()
        out["apply_s"] = round(bench.apply_monitors(indices), 1)
        log(
            f"cluster: {len(indices)} monitors applied in {out['apply_s']}s; P0 on the canary while they reconcile"
        )
        out["cordon_during_apply"] = bench.cordon(ns, pods)
        log(f"cluster: cordon during apply {out['cordon_during_apply']}")
        watcher.join()
        after = bench.counters()
        cpu = cpu_seconds(bench.operator_pid) - cpu0
    if len(times) < total:
        raise RuntimeError(f"only {len(times)} of {total} monitors Ready after 900 s")
    new = times[-len(indices) :]
    out["ready"] = {"all_ready_s": round(times[-1], 1), "p50_s": round(statistics.median(new), 1),
                    "monitors_per_s": round(len(indices) / times[-1], 2)}  # fmt: skip
    # the operator's own CPU from the apply to the last Ready: at one dedicated core, how many monitors a
    # second it could make Ready (the apiserver elsewhere), which this shared machine cannot show by wall time
    out["operator_cpu"] = {"seconds": round(cpu, 1), "ms_per_monitor": round(1000 * cpu / len(indices), 1),
                           "monitors_per_core_s": round(len(indices) / cpu, 1) if cpu else None}  # fmt: skip
    out["apply_window"] = after.minus(before)
    out["rss_after_ready_mib"] = round(rss_bytes(bench.operator_pid) / 2**20, 1)
    log(f"cluster: all {total} Ready {out['ready']}; {out['apply_window']}")
    before = bench.counters()
    out["pods_create_s"] = round(bench.create_pods(indices), 1)
    out["pods_window"] = bench.counters().minus(before)
    log(
        f"cluster: {len(indices) * bench.pods_per_monitor} pods created in {out['pods_create_s']}s through the webhook"
    )
    with bench.canary() as (ns, pods):
        rss: list[int] = []
        stop = threading.Event()
        sampler = threading.Thread(target=lambda: rss.extend(bench.rss_during(3600, stop)), daemon=True)
        sampler.start()
        c0 = bench.counters()
        steady_cpu0 = cpu_seconds(bench.operator_pid)
        time.sleep(steady_s / 2)
        c1 = bench.counters()
        out["cordon_steady"] = bench.cordon(ns, pods)
        log(f"cluster: cordon in the steady window {out['cordon_steady']}")
        c2 = bench.counters()
        time.sleep(steady_s / 2)
        c3 = bench.counters()
        steady_cpu = cpu_seconds(bench.operator_pid) - steady_cpu0
        stop.set()
        sampler.join()
        # the window without the P0's own remediation: [c0, c1] and [c2, c3]
        out["steady_window"] = c3.minus(c0.shifted(c2, c1))
    # a core's share the operator takes with nothing to do but its resync and passes (the P0 included)
    out["steady_cpu_cores"] = round(steady_cpu / steady_s, 3)
    out["rss_steady_mib"] = {
        "mean": round(statistics.mean(rss) / 2**20, 1),
        "max": round(max(rss) / 2**20, 1),
    }
    log(f"cluster: steady {out['steady_window']}; RSS {out['rss_steady_mib']}")
    return out


def run(plane: LocalControlPlane, workdir: Path, steps: list[int], *, nodes: int, pods_per_monitor: int,
        resync_s: float, pods_s: float, steady_s: float) -> dict[str, Any]:  # fmt: skip
    with witness() as prometheus:
        return _run(plane, workdir, steps, nodes=nodes, pods_per_monitor=pods_per_monitor, resync_s=resync_s,
                    pods_s=pods_s, steady_s=steady_s, prometheus=prometheus)  # fmt: skip


def _run(plane: LocalControlPlane, workdir: Path, steps: list[int], *, nodes: int, pods_per_monitor: int,
         resync_s: float, pods_s: float, steady_s: float, prometheus: str) -> dict[str, Any]:  # fmt: skip
    from e2e.controlplane.local import prometheus_operator_crds  # noqa: PLC0415 - beside the plane it serves

    cluster = Cluster(plane.kubeconfig, workdir)
    t0 = time.monotonic()
    cluster.install(prometheus_operator_crds())
    cluster.apply(flow_schemas())
    port = free_port()
    # node down judged only after 10 minutes: on a loaded machine 500 fake kubelets renew their Leases late,
    # and the operator's own node-down detection would cordon and record faults that are the bench's
    # (the cordons measured here are posted alerts)
    proc = cluster.start_operator(priority=100, extra=(
        "--metrics-addr", f"127.0.0.1:{port}", "--resync-seconds", str(resync_s), "--pods-seconds", str(pods_s),
        "--node-lease-grace-seconds", "600", "--node-not-ready-seconds", "600", "--prometheus-url", prometheus))  # fmt: skip
    out: dict[str, Any] = {"setup_s": 0.0, "stages": []}
    try:
        bench = Bench(plane, cluster, proc.pid, f"http://127.0.0.1:{port}", nodes, pods_per_monitor)
        out["node_taints_cleared_s"] = round(wait_nodes_clean(cluster.core, timeout=600), 1)
        out["setup_s"] = round(time.monotonic() - t0, 1)
        out["rss_idle_mib"] = round(rss_bytes(proc.pid) / 2**20, 1)
        log(
            f"cluster: operator up, {nodes} nodes clean after {out['setup_s']}s; RSS {out['rss_idle_mib']} MiB"
        )
        with bench.canary() as (ns, pods):
            out["cordon_idle"] = bench.cordon(ns, pods)
        log(f"cluster: cordon with no monitors {out['cordon_idle']}")
        done = 0
        for total in steps:
            out["stages"].append(stage(bench, list(range(done, total)), total, steady_s))
            done = total
    finally:
        cluster.stop_all_operators()
    return out
