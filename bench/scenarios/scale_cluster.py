"""The operator under many monitors on the local control plane (e2e/controlplane): time to Ready,
resident memory, API requests per reconcile, and the cordon latency of a P0 posted while it works.

The operator runs as e2e runs it (`Cluster.start_operator`: its own ServiceAccount, the receiver on
TLS) but with the production periods for the resync and the pod count unless told otherwise. Its API
requests are counted by the apiserver itself: FlowSchemas of the bench's match the operator's
ServiceAccount (lists, other reads, status writes, the remediation requests, other writes) at the
priority level it would get anyway (deploy/api-priority.yaml's for status and remediation,
workload-low for the rest), so `apiserver_flowcontrol_dispatched_requests_total{flow_schema=...}`
counts exactly its requests.

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
import shutil
import signal
import ssl
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from bench.scenarios.scale_rules import identity, log, monitor_documents
from kubernetes import client, config, watch

from e2e.cluster import REPO, Cluster
from e2e.controlplane.local import LocalControlPlane
from e2e.monitors import indexed_job, quickstart, ready
from e2e.receiver import alert_payload, monitor_token, post, records
from tests.exposition import scrape
from tests.processes import free_port, wait_for
from trainguard.catalog.kubernetes import CORDON_REASON, CORDONED_AT, CORDONED_BY, FAULTY_TAINT
from trainguard.kube.client import SECRET_REWRITE_S
from trainguard.remediation import tokens
from trainguard.render.shared import PER_MONITOR
from trainguard.render.sidecar import EXPORTER

MON = ("trainguard.io", "v1alpha1", "trainingjobmonitors")
BENCH_LABEL = "trainguard.io/scale-bench"
# LISTs apart from the other reads (a steady resync from the watch caches should make none), and the
# monitors' status writes apart from the other writes (a pod count that changed writes one)
FLOW_SCHEMAS = {
    "list": ["list"],
    "read": ["get", "watch"],
    "status": ["*"],
    "remediation": [],
    "write": ["*"],
}
RESOURCES = {"status": ["trainingjobmonitors/status"]}
REMEDIATION = yaml.safe_load((REPO / "deploy" / "api-priority.yaml").read_text())
"""deploy/api-priority.yaml, which the cluster installs: the bench's own schemas match first, so they
give each request the level it would get under it (the monitors' status writes and the remediation
requests at its level, the rest at workload-low)."""


def flow_schemas() -> list[dict[str, Any]]:
    """LISTs, then the other reads (lower matchingPrecedence wins), then the monitors' status writes, then
    the other requests deploy/api-priority.yaml matches, then every other write."""
    subject = {
        "kind": "ServiceAccount",
        "serviceAccount": {"name": "trainguard-operator", "namespace": "trainguard-system"},
    }
    high = REMEDIATION["spec"]["priorityLevelConfiguration"]["name"]
    level = {"status": high, "remediation": high}

    def rules(kind: str, verbs: list[str]) -> list[dict[str, Any]]:
        if kind == "remediation":
            return [{**r, "subjects": [subject]} for r in REMEDIATION["spec"]["rules"]]
        return [{"subjects": [subject],
                 "resourceRules": [{"verbs": verbs, "apiGroups": ["*"], "resources": RESOURCES.get(kind, ["*"]),
                                    "clusterScope": True, "namespaces": ["*"]}],
                 **({} if kind in RESOURCES else {"nonResourceRules": [{"verbs": verbs, "nonResourceURLs": ["*"]}]})}]  # fmt: skip

    return [
        {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
         "metadata": {"name": f"trainguard-bench-{kind}"},
         "spec": {"priorityLevelConfiguration": {"name": level.get(kind, "workload-low")}, "matchingPrecedence": 500 + k,
                  "distinguisherMethod": {"type": "ByUser"}, "rules": rules(kind, verbs)}}
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
    lists: float
    status_writes: float
    reconciles: float
    reconcile_s: float
    webhook_calls: float
    injection_failures: float
    resyncs: float = 0.0
    """Monitors the periodic resync passed over (most found in place, no request): not reconciles."""
    resync_writes: float = 0.0
    """Of those, the ones it found something to write for: each is also one of `reconciles`."""
    repeated: float = 0.0
    """Creations kopf handed over again for a monitor already Ready at that generation: nothing done, so
    not in `reconciles`."""
    fail_open: float = 0.0
    """Pods the apiserver admitted without the webhook's answer (failurePolicy Ignore): they run without
    the exporter and their monitor counts them under podsUnmonitored, not podsMonitored."""
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
            "lists": int(self.lists - before.lists), "status_writes": int(self.status_writes - before.status_writes),
            "requests_per_reconcile": round((reads + writes) / n, 2) if n else None,
            "reads_per_reconcile": round(reads / n, 2) if n else None,
            "writes_per_reconcile": round(writes / n, 2) if n else None,
            "requests_per_s": round((reads + writes) / max(1e-9, self.at - before.at), 1),
            "reconcile_mean_ms": round(1000 * (self.reconcile_s - before.reconcile_s) / n, 1) if n else None,
            "webhook_calls": int(self.webhook_calls - before.webhook_calls),
            "injection_failures": int(self.injection_failures - before.injection_failures),
            "resyncs": int(self.resyncs - before.resyncs),
            "resync_writes": int(self.resync_writes - before.resync_writes),
            "repeated_creations": int(self.repeated - before.repeated),
            "webhook_fail_open": int(self.fail_open - before.fail_open),
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

    def process_cpu(self) -> dict[str, float]:
        """CPU seconds so far of each process on the machine's shared cores: the control plane's, the
        operator's and this bench's own (its apply, its watches and its posts)."""
        out = {name: cpu_seconds(proc.pid) for name, proc in self.plane.procs if proc.poll() is None}
        out["operator"] = cpu_seconds(self.operator_pid)
        out["bench"] = cpu_seconds(os.getpid())
        return out

    def counters(self) -> Counters:
        with urllib.request.urlopen(f"{self.plane.server}/metrics", context=self._tls, timeout=30) as resp:
            text = resp.read().decode()
        flows = dict.fromkeys(FLOW_SCHEMAS, 0.0)
        fail_open = 0.0
        for row in text.splitlines():
            if row.startswith("apiserver_admission_webhook_fail_open_count{") and "trainguard" in row:
                fail_open += float(row.rsplit(" ", 1)[1])
            if row.startswith("apiserver_flowcontrol_dispatched_requests_total{"):
                for kind in FLOW_SCHEMAS:
                    if f'flow_schema="trainguard-bench-{kind}"' in row:
                        flows[kind] += float(row.rsplit(" ", 1)[1])
        op = operator_metrics(self.metrics_url)
        return Counters(
            reads=flows["read"] + flows["list"], writes=flows["write"] + flows["status"] + flows["remediation"],
            lists=flows["list"],
            status_writes=flows["status"],
            reconciles=sum(
                v for labels, v in op.get("trainguard_operator_reconcile_total", []) if labels.get("result") != "repeated"
            ),
            repeated=sum(
                v for labels, v in op.get("trainguard_operator_reconcile_total", []) if labels.get("result") == "repeated"
            ),
            reconcile_s=sum(v for _, v in op.get("trainguard_operator_reconcile_duration_seconds_sum", [])),
            webhook_calls=sum(v for _, v in op.get("trainguard_operator_webhook_duration_seconds_count", [])),
            injection_failures=sum(v for _, v in op.get("trainguard_operator_injection_failures_total", [])),
            resyncs=sum(v for _, v in op.get("trainguard_operator_resyncs_total", [])),
            resync_writes=sum(
                v for labels, v in op.get("trainguard_operator_resyncs_total", []) if labels.get("outcome") == "written"
            ),
            fail_open=fail_open,
        )  # fmt: skip

    # ---- bulk monitors and their pods ----

    def namespaces(self, indices: list[int]) -> float:
        """The monitors' namespaces, each with its default ServiceAccount (for the pods later): made before
        the apply is timed, as a job's namespace is there before its monitor. Returns the seconds taken."""
        t0 = time.monotonic()
        for ns in sorted({d["metadata"]["namespace"] for d in monitor_documents(indices)}):
            self.cluster.namespace(ns)
        return time.monotonic() - t0

    def apply_monitors(self, indices: list[int]) -> float:
        docs = monitor_documents(indices)
        t0 = time.monotonic()
        for d in docs:
            d["metadata"] = {**d["metadata"], "labels": {BENCH_LABEL: "true"}}
        self.cluster.apply(docs)
        return time.monotonic() - t0

    def ready_times(self, expected: int, since: float, timeout: float) -> list[float]:
        """Seconds from `since` until each bench monitor is first seen Ready at its generation, from a watch
        (listed once, then each change as it comes: the time of each is its event's, and the bench takes no
        cores from the cluster it measures by listing every monitor again and again)."""
        first: dict[str, float] = {}
        custom = client.CustomObjectsApi(self.cluster.api)
        deadline = time.monotonic() + timeout

        def seen(m: dict[str, Any], now: float) -> None:
            st = m.get("status") or {}
            ok = any(
                c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or []
            )
            if ok and st.get("observedGeneration") == m["metadata"].get("generation"):
                first.setdefault(f"{m['metadata']['namespace']}/{m['metadata']['name']}", now - since)

        version = None
        while len(first) < expected and time.monotonic() < deadline:
            if version is None:
                listed = custom.list_cluster_custom_object(*MON, label_selector=BENCH_LABEL)
                for m in listed["items"]:
                    seen(m, time.monotonic())
                version = listed["metadata"]["resourceVersion"]
            w = watch.Watch()
            try:
                for event in w.stream(custom.list_cluster_custom_object, *MON, label_selector=BENCH_LABEL,
                                      resource_version=version, allow_watch_bookmarks=True,
                                      timeout_seconds=max(1, min(60, int(deadline - time.monotonic())))):  # fmt: skip
                    if event["type"] in ("ADDED", "MODIFIED"):
                        seen(event["object"], time.monotonic())
                    if len(first) >= expected:
                        w.stop()
                version = w.resource_version or version
            except client.ApiException as exc:  # 410: the version is gone, list again
                log(f"cluster: the Ready watch restarts from a list ({exc.status})")
                version = None
        return sorted(first.values())

    def pods_counted(self, expected: int, timeout: float) -> float:
        """Seconds until every bench monitor's status counts all its pods (the pod-count pass has seen them
        Running through the webhook): what a steady window starts from."""
        custom = client.CustomObjectsApi(self.cluster.api)
        t0 = time.monotonic()

        def counted() -> bool:
            items = custom.list_cluster_custom_object(*MON, label_selector=BENCH_LABEL)["items"]
            done = sum((m.get("status") or {}).get("podsMonitored") == self.pods_per_monitor for m in items)
            return done >= expected

        try:
            wait_for(f"{expected} monitors counting their {self.pods_per_monitor} pods", counted,
                     timeout=timeout, interval=5)  # fmt: skip
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.short_of_pods()}") from None
        return time.monotonic() - t0

    def short_of_pods(self, at_most: int = 5) -> str:
        """Why monitors do not count all their pods, read from the apiserver: each one's status, and of its
        pods which carry the exporter (a pod without it was let through by the webhook's fail-open)."""
        custom = client.CustomObjectsApi(self.cluster.api)
        items = custom.list_cluster_custom_object(*MON, label_selector=BENCH_LABEL)["items"]
        short = [m for m in items if (m.get("status") or {}).get("podsMonitored") != self.pods_per_monitor]
        lines = [f"{len(short)} of {len(items)} monitors short of {self.pods_per_monitor} pods"]
        for m in short[:at_most]:
            ns, name, st = m["metadata"]["namespace"], m["metadata"]["name"], m.get("status") or {}
            pods = self.bulk.list_namespaced_pod(ns, label_selector=f"app={name}").items
            with_exporter = sum(
                any(c.name == EXPORTER for c in [*(p.spec.init_containers or []), *p.spec.containers])
                for p in pods
            )
            lines.append(
                f"  {ns}/{name}: podsMonitored {st.get('podsMonitored')}, podsUnmonitored "
                f"{st.get('podsUnmonitored')}; {len(pods)} pods, {with_exporter} with the exporter"
            )
        return "\n".join(lines)

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
            try:
                pods = wait_for(
                    "2 canary pods Running",
                    lambda: (items := self.cluster.core.list_namespaced_pod(ns, label_selector="app=llama-pretrain").items)
                    and len(items) == 2 and all(p.status.phase == "Running" for p in items) and items,
                    timeout=300,
                )  # fmt: skip
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{self.why_not_running(ns)}") from None
            yield ns, pods
        finally:
            batch = client.BatchV1Api(self.cluster.api)
            with contextlib.suppress(Exception):
                batch.delete_namespaced_job("llama-pretrain", ns, propagation_policy="Background")
            with contextlib.suppress(Exception):
                self.cluster.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
                self.cluster.core.delete_namespace(ns, propagation_policy="Background")

    def why_not_running(self, ns: str) -> str:
        """The canary's pods (phase, node, conditions not True), its Job's status and the namespace's
        last Events: what a pod that never ran was waiting on."""
        rows = []
        for p in self.cluster.core.list_namespaced_pod(ns).items:
            waiting = [f"{c.type}={c.status} {c.reason or ''} {c.message or ''}".strip()
                       for c in p.status.conditions or [] if c.status != "True"]  # fmt: skip
            rows.append(f"pod {p.metadata.name}: {p.status.phase} on {p.spec.node_name or '-'}; {waiting}")
        with contextlib.suppress(Exception):
            job = client.BatchV1Api(self.cluster.api).read_namespaced_job("llama-pretrain", ns)
            rows.append(f"job: active {job.status.active} failed {job.status.failed} "
                        f"conditions {[(c.type, c.reason) for c in job.status.conditions or []]}")  # fmt: skip
        events = sorted(self.cluster.core.list_namespaced_event(ns).items,
                        key=lambda e: str(e.last_timestamp or e.event_time or ""))  # fmt: skip
        rows += [f"event {e.involved_object.kind}/{e.involved_object.name}: {e.reason}: {e.message}"
                 for e in events[-10:]]  # fmt: skip
        return "\n".join(rows) or "no pod, no Job status, no Event"

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


def burst(
    bench: Bench, canaries: list[tuple[str, list[Any]]], watcher: threading.Thread
) -> list[dict[str, Any]]:
    """One P0 per canary, one after the other (each cordon restored before the next), while `watcher`
    waits for the monitors to be Ready: at least one, and none once they all are."""
    out: list[dict[str, Any]] = []
    for ns, pods in canaries:
        if out and not watcher.is_alive():
            break
        out.append(bench.cordon(ns, pods))
        log(f"cluster: cordon during apply {out[-1]}")
    return out


def cordon_summary(cordons: list[dict[str, Any]]) -> dict[str, Any]:
    """The cordon latencies of a burst: too few samples for a p99, so their median and maximum."""
    seconds = sorted(c["cordon_s"] for c in cordons if c["cordon_s"] is not None)
    return {"samples": len(cordons), "cordoned": len(seconds),
            "p50_s": round(statistics.median(seconds), 3) if seconds else None,
            "max_s": seconds[-1] if seconds else None, "cordon_s": seconds}  # fmt: skip


def stage(
    bench: Bench, indices: list[int], total: int, steady_s: float, burst_cordons: int
) -> dict[str, Any]:
    """Apply `indices` on top of what runs, time them to Ready (with a P0 posted to one of
    `burst_cordons` canaries after the other meanwhile), create their pods, then hold a steady window of
    `steady_s` (with another P0 half way)."""
    out: dict[str, Any] = {"applied": len(indices), "monitors": total}
    with contextlib.ExitStack() as stack:
        canaries = [stack.enter_context(bench.canary()) for _ in range(max(1, burst_cordons))]
        out["namespaces_s"] = round(bench.namespaces(indices), 1)
        log(f"cluster: the monitors' namespaces made in {out['namespaces_s']}s (not timed as the apply)")
        before = bench.counters()
        procs0 = bench.process_cpu()
        t0 = time.monotonic()
        times: list[float] = []
        watcher = threading.Thread(
            target=lambda: times.extend(bench.ready_times(total, t0, timeout=900)), daemon=True
        )
        watcher.start()
        cordons: list[dict[str, Any]] = []
        poster = threading.Thread(target=lambda: cordons.extend(burst(bench, canaries, watcher)), daemon=True)
        poster.start()  # from the apply on: kubectl's own minutes at 1,500 monitors are part of the burst
        out["apply_s"] = round(bench.apply_monitors(indices), 1)
        log(
            f"cluster: {len(indices)} monitors applied in {out['apply_s']}s; P0s on the canaries while they reconcile"
        )
        watcher.join()
        poster.join()
        after = bench.counters()
        procs1 = bench.process_cpu()
        cpu = procs1["operator"] - procs0["operator"]
        window_s = time.monotonic() - t0
    out["cordon_during_apply"] = cordons[0]
    out["cordons_during_apply"] = cordon_summary(cordons)
    log(f"cluster: cordons during apply {out['cordons_during_apply']}")
    if len(times) < total:
        raise RuntimeError(f"only {len(times)} of {total} monitors Ready after 900 s")
    new = times[-len(indices) :]
    # from the apply's start (the namespaces were made before it); and from its end
    out["ready"] = {"all_ready_s": round(times[-1], 1), "p50_s": round(statistics.median(new), 1),
                    "after_apply_end_s": round(times[-1] - out["apply_s"], 1),
                    "monitors_per_s": round(len(indices) / times[-1], 2)}  # fmt: skip
    # the operator's own CPU from the apply to the last Ready: at one dedicated core, how many monitors a
    # second it could make Ready (the apiserver elsewhere), which this shared machine cannot show by wall time
    out["operator_cpu"] = {"seconds": round(cpu, 1), "ms_per_monitor": round(1000 * cpu / len(indices), 1),
                           "monitors_per_core_s": round(len(indices) / cpu, 1) if cpu else None}  # fmt: skip
    out["apply_window"] = after.minus(before)
    # where the machine's cores went from the apply's start to the last Ready: a share of one core each
    out["apply_window_cores"] = {
        k: round((procs1[k] - procs0[k]) / window_s, 2) for k in sorted(procs1) if k in procs0
    }
    log(f"cluster: cores used from the apply to the last Ready {out['apply_window_cores']}")
    out["rss_after_ready_mib"] = round(rss_bytes(bench.operator_pid) / 2**20, 1)
    log(f"cluster: all {total} Ready {out['ready']}; {out['apply_window']}")
    before = bench.counters()
    out["pods_create_s"] = round(bench.create_pods(indices), 1)
    out["pods_window"] = bench.counters().minus(before)
    log(
        f"cluster: {len(indices) * bench.pods_per_monitor} pods created in {out['pods_create_s']}s through the webhook; "
        f"{out['pods_window']['webhook_fail_open']} let through without its answer"
    )
    out["pods_counted_s"] = round(bench.pods_counted(total, timeout=900), 1)
    log(f"cluster: every monitor counts its pods {out['pods_counted_s']}s later")
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
        resync_s: float, pods_s: float, steady_s: float, burst_cordons: int = 6,
        remediation_first_s: float | None = None, rule_form: str = PER_MONITOR,
        profile: Path | None = None, reconcile_workers: int | None = None) -> dict[str, Any]:  # fmt: skip
    """`remediation_first_s`: the operator's --remediation-first-seconds (None: its default); `rule_form`:
    its --rule-form; `profile`: where py-spy writes the operator's sampled stacks (collapsed), from its
    start to its stop."""
    with witness() as prometheus:
        return _run(plane, workdir, steps, nodes=nodes, pods_per_monitor=pods_per_monitor, resync_s=resync_s,
                    pods_s=pods_s, steady_s=steady_s, prometheus=prometheus, burst_cordons=burst_cordons,
                    remediation_first_s=remediation_first_s, rule_form=rule_form, profile=profile,
                    reconcile_workers=reconcile_workers)  # fmt: skip


def _run(plane: LocalControlPlane, workdir: Path, steps: list[int], *, nodes: int, pods_per_monitor: int,
         resync_s: float, pods_s: float, steady_s: float, prometheus: str, burst_cordons: int,
         remediation_first_s: float | None, rule_form: str, profile: Path | None,
         reconcile_workers: int | None) -> dict[str, Any]:  # fmt: skip
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
        # the production period (the e2e harness rewrites every Secret at each of its short resyncs)
        "--secret-rewrite-seconds", str(SECRET_REWRITE_S),
        "--node-lease-grace-seconds", "600", "--node-not-ready-seconds", "600", "--prometheus-url", prometheus,
        "--rule-form", rule_form,
        *(() if remediation_first_s is None else ("--remediation-first-seconds", f"{remediation_first_s:g}")),
        *(() if reconcile_workers is None else ("--reconcile-workers", str(reconcile_workers)))))  # fmt: skip
    out: dict[str, Any] = {"setup_s": 0.0, "stages": [], "remediation_first_s": remediation_first_s,
                           "rule_form": rule_form, "reconcile_workers": reconcile_workers}  # fmt: skip
    sampler = sampled(proc.pid, profile) if profile else None
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
            out["stages"].append(stage(bench, list(range(done, total)), total, steady_s, burst_cordons))
            done = total
    finally:
        if sampler is not None:
            sampler.send_signal(signal.SIGINT)  # py-spy writes what it sampled on an interrupt
            sampler.wait(timeout=60)
        cluster.stop_all_operators()
    return out


SCRAPE_TIMEOUT_S = 30.0
"""Prometheus's own scrape timeout is 10 s by default: a slower /metrics is a finding, not a crash."""


def operator_metrics(url: str) -> Any:
    """The operator's /metrics, given 30 s and a second try: under the apply burst its Python threads
    share two cores with the control plane; an answer slower than 5 s is logged with its time."""
    t = time.monotonic()
    try:
        samples = scrape(url, timeout=SCRAPE_TIMEOUT_S)
    except OSError as exc:
        log(f"cluster: the operator's /metrics did not answer in {time.monotonic() - t:.1f}s ({exc}); again")
        t = time.monotonic()
        samples = scrape(url, timeout=SCRAPE_TIMEOUT_S)
    if (took := time.monotonic() - t) > 5:
        log(f"cluster: the operator's /metrics answered in {took:.1f}s")
    return samples


def sampled(pid: int, path: Path) -> subprocess.Popen[bytes]:
    """py-spy recording `pid` into `path` (collapsed stacks, 50 samples a second, only the thread that holds
    the GIL: where the operator's Python spends its CPU, by thread), a sampler outside the process that
    does not pause it (--nonblocking): the operator runs unchanged. py-spy is no dependency of the project:
    `pip install py-spy` first."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        raise SystemExit("--profile needs py-spy: pip install py-spy (into the venv that runs the bench)")
    path.parent.mkdir(parents=True, exist_ok=True)
    log(f"cluster: py-spy samples the operator (pid {pid}) into {path}")
    return subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", "50", "--format", "raw",
                             "--gil", "--threads", "--nonblocking", "--output", str(path)], stdout=subprocess.DEVNULL)  # fmt: skip
