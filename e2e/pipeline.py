"""The monitoring half of the full pipeline on the local control plane: a real Prometheus and a real
Alertmanager, run from what the real prometheus-operator makes of the objects the operator reconciled
into the apiserver (e2e/prometheus_operator.py), and a notification sink standing in for phones, IM and
e-mail (the receivers' webhooks point at it).

Config changes are picked up the way prometheus-operator's config-reloader picks them up: the files are
rewritten and Prometheus and Alertmanager are told to reload.

And what the pipeline's tests share: an operator of their own in front of it (operator_stack, the
`stack` fixture of e2e/conftest.py), a job started and scraped (start), its remediation records done
(finished), and what to show when something never came (diagnostics).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from kubernetes import client

from e2e import prometheus_operator as po
from e2e.cluster import Cluster
from e2e.monitors import ready
from e2e.podprocesses import PodProcesses
from e2e.receiver import records
from tests.processes import free_port, http_json, wait_for
from trainguard.api.common import duration_seconds
from trainguard.render.sidecar import EXPORTER

SCRAPE_SECONDS = 1
EVAL_SECONDS = 1
JOB = "llama-pretrain"
SELECTOR = f"app={JOB}"
OPERATOR = "pipeline"
"""The name of the stack's operator replica (its log is {workdir}/pipeline.log)."""
FINAL = ("Succeeded", "Failed", "Skipped", "DryRun")
"""A remediation record's phases once it is done."""


@dataclass
class Notification:
    receiver: str
    status: str
    alerts: list[dict[str, Any]]
    at: float


@dataclass
class Sink:
    """Records every webhook notification by the path it was posted to (/phone, /im, /email ...)."""

    port: int = field(default_factory=free_port)
    got: list[Notification] = field(default_factory=list)

    def url(self, receiver: str) -> str:
        return f"http://127.0.0.1:{self.port}/{receiver}"

    def received(self, receiver: str, alertname: str, **labels: str) -> list[dict[str, Any]]:
        return [
            a
            for n in list(self.got)
            if n.receiver == receiver
            for a in n.alerts
            if a["labels"].get("alertname") == alertname
            and a["status"] == "firing"
            and all(a["labels"].get(k, "") == v for k, v in labels.items())
        ]

    @contextmanager
    def serve(self) -> Iterator[Sink]:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                sink.got.append(Notification(self.path.strip("/"), body.get("status", ""), body.get("alerts", []),
                                             time.time()))  # fmt: skip
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            server.shutdown()
            server.server_close()


class Monitoring:
    """Prometheus and Alertmanager as processes, run from what the real prometheus-operator generates for
    a Prometheus and an Alertmanager object of their own (e2e/prometheus_operator.py), and kept in step with
    it by a sync thread, as the config-reloader keeps a pod in step.

    `prometheus_spec` and `alertmanager_spec` are merged into those objects' specs (selectors, say), and
    `objects` are applied with them (an Alertmanager's base configuration Secret, say)."""

    def __init__(self, cluster: Cluster, name: str = "e2e", *, namespace: str = "monitoring",
                 prometheus_spec: dict[str, Any] | None = None, alertmanager_spec: dict[str, Any] | None = None,
                 objects: tuple[dict[str, Any], ...] = ()) -> None:  # fmt: skip
        self.cluster = cluster
        self.core = client.CoreV1Api(cluster.api)
        self.apps = client.AppsV1Api(cluster.api)
        self.custom = client.CustomObjectsApi(cluster.api)
        self.name, self.ns = name, namespace
        self.dir = cluster.workdir / f"monitoring-{name}"
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.prom_port, self.am_port = free_port(), free_port()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.stopping = threading.Event()
        self.errors: list[str] = []
        self.prometheus_spec, self.alertmanager_spec = prometheus_spec or {}, alertmanager_spec or {}
        self.extra = objects
        self.prom_files = po.Materializer(self.dir / "prometheus", "prometheus")
        self.am_files = po.Materializer(self.dir / "alertmanager", "alertmanager")
        self.reloads: list[tuple[float, str]] = []
        """(monotonic time, what) of each reload: Prometheus drops alerts that fire within its
        discovery's 5 s update interval after a reload (it forgets its Alertmanagers until then)."""

    @property
    def prometheus(self) -> str:
        return f"http://127.0.0.1:{self.prom_port}"

    @property
    def alertmanager(self) -> str:
        return f"http://127.0.0.1:{self.am_port}"

    def _objects(self) -> list[dict[str, Any]]:
        creds = self.cluster.prometheus_operator()
        secret = f"{self.name}-alertmanagers"
        return [
            *self.extra,
            po.alertmanagers_secret(secret, self.ns, f"127.0.0.1:{self.am_port}"),
            po.prometheus(self.name, self.ns, creds, interval=f"{SCRAPE_SECONDS}s", alertmanagers_secret=secret,
                          selectors=self.prometheus_spec),
            po.alertmanager(self.name, self.ns, spec=self.alertmanager_spec),
        ]  # fmt: skip

    def __enter__(self) -> Monitoring:
        self.cluster.namespace(self.ns)
        self.cluster.apply(self._objects())
        d = self.dir
        wait_for("prometheus-operator's configuration for the local Prometheus and Alertmanager",
                 lambda: self._sync_files() is not None, timeout=60)  # fmt: skip
        self.procs.append(self._start("alertmanager", ["prometheus-alertmanager", f"--config.file={self.am_files.config}",
                          f"--storage.path={d / 'am-data'}", f"--web.listen-address=127.0.0.1:{self.am_port}",
                          "--cluster.listen-address="]))  # fmt: skip
        self.procs.append(self._start("prometheus", [str(po.binary("prometheus")), f"--config.file={self.prom_files.config}",
                          f"--storage.tsdb.path={d / 'prom-data'}", f"--web.listen-address=127.0.0.1:{self.prom_port}",
                          "--web.enable-lifecycle"]))  # fmt: skip
        for url, proc in ((self.alertmanager, self.procs[0]), (self.prometheus, self.procs[1])):
            self._wait_ready(url, proc)
        self.thread = threading.Thread(target=self._loop, name="config-reloader", daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        if hasattr(self, "thread"):
            self.thread.join(timeout=10)
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        for obj in self._objects()[::-1]:
            self.cluster.delete(obj)

    def _start(self, name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(cmd, stdout=(self.dir / f"{name}.log").open("ab"), stderr=subprocess.STDOUT)

    def _wait_ready(self, url: str, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"{proc.args[0]} exited:\n{self.logs()}")
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"{url} not ready:\n{self.logs()}")

    def logs(self) -> str:
        return (
            "\n".join(
                f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                for p in sorted(self.dir.glob("*.log"))
            )
            + f"\n--- prometheus-operator\n{po.logs(self.cluster.workdir)}"
        )

    # ---- the config-reloader ----

    def _sync_files(self) -> tuple[bool, bool] | None:
        """(Prometheus' files changed, Alertmanager's changed); None until both configurations exist."""
        prom = po.read_for(self.core, self.apps, self.ns, f"prometheus-{self.name}")
        am = po.read_for(self.core, self.apps, self.ns, f"alertmanager-{self.name}")
        if prom[0] is None or am[0] is None:
            return None
        p, a = self.prom_files.sync(*prom), self.am_files.sync(*am)  # type: ignore[arg-type]
        if p is None or a is None:
            return None
        return p, a

    def sync(self) -> None:
        changed = self._sync_files()
        if changed is None:
            return
        if changed[0]:
            self._reload(self.prometheus, "prometheus")
        if changed[1]:
            self._reload(self.alertmanager, "alertmanager")

    def _reload(self, url: str, what: str) -> None:
        req = urllib.request.Request(f"{url}/-/reload", method="POST")
        with urllib.request.urlopen(req, timeout=10):
            self.reloads.append((time.monotonic(), what))

    def settled(self, seconds: float = 6.0) -> bool:
        """Prometheus has not reloaded for `seconds`: it knows its Alertmanager again."""
        last = max((t for t, what in self.reloads if what == "prometheus"), default=0.0)
        return time.monotonic() - last > seconds

    def _loop(self) -> None:
        while not self.stopping.is_set():
            try:
                self.sync()
            except Exception as exc:  # shown by a failing test; the next pass tries again
                self.errors.append(repr(exc))
            self.stopping.wait(1)

    # ---- what tests ask ----

    def alerts(self, **labels: str) -> list[dict[str, Any]]:
        """Alertmanager's alerts (API v2), with their status (active, suppressed and by what)."""
        with urllib.request.urlopen(f"{self.alertmanager}/api/v2/alerts", timeout=10) as resp:
            found = json.loads(resp.read())
        return [a for a in found if all(a["labels"].get(k, "") == v for k, v in labels.items())]

    def firing(self, alertname: str, **labels: str) -> list[dict[str, Any]]:
        """Prometheus' firing alerts of that name, matching labels."""
        with urllib.request.urlopen(f"{self.prometheus}/api/v1/alerts", timeout=10) as resp:
            found = json.loads(resp.read())["data"]["alerts"]
        return [
            a
            for a in found
            if a["state"] == "firing"
            and a["labels"].get("alertname") == alertname
            and all(a["labels"].get(k, "") == v for k, v in labels.items())
        ]

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"{self.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as resp:
            return list(json.loads(resp.read())["data"]["result"])


def objects(ns: str, sink: Sink, remediation: dict[str, Any] | None = None, gpus: int = 8, *,
            policy: dict[str, Any] | None = None, baseline: dict[str, Any] | None = None,
            scrape_interval: str = "1s") -> list[dict[str, Any]]:  # fmt: skip
    monitor = {
        "apiVersion": "trainguard.io/v1alpha1", "kind": "TrainingJobMonitor",
        "metadata": {"name": JOB, "namespace": ns},
        "spec": {
            "selector": {"matchLabels": {"app": JOB}}, "workloadRef": {"kind": "Job", "name": JOB},
            "gpusPerPod": gpus, "exporter": {"gpuBackend": "simulated", "scrapeInterval": scrape_interval},
            # no baseline alert may fire by chance during these short runs
            "baseline": baseline or {"warmupSteps": 100_000_000},
            "checkpoint": {"incrementalEverySteps": 20, "fullEverySteps": 100},
            "remediation": {"emergencyCheckpointTimeout": "20s", **(remediation or {})},
            "policyRefs": [{"name": "pipeline"}],
        },
    }  # fmt: skip
    alerts = [{"name": a, "for": "0s"} for a in
              ("GPUThermalThrottling", "NetworkPacketLossHigh", "GPUMemoryCritical")]  # fmt: skip
    policy_obj = {
        "apiVersion": "trainguard.io/v1alpha1", "kind": "AlertPolicy",
        "metadata": {"name": "pipeline", "namespace": ns},
        "spec": {
            "receivers": [
                {"name": "phone", "type": "webhook", "roles": ["phone"], "url": sink.url("phone")},
                {"name": "im", "type": "webhook", "roles": ["im"], "url": sink.url("im")},
                {"name": "email", "type": "webhook", "roles": ["email", "ticket"], "url": sink.url("email")},
            ],
            "quietHours": {"enabled": False},
            "alerts": alerts,
            **(policy or {}),
        },
    }  # fmt: skip
    return [monitor, policy_obj]


def job(ns: str, completions: int = 2, gpus: int = 8) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": JOB, "namespace": ns},
        "spec": {
            "completionMode": "Indexed", "completions": completions, "parallelism": completions,
            "backoffLimit": 6,
            "template": {
                "metadata": {"labels": {"app": JOB}},
                "spec": {"restartPolicy": "Never", "containers": [
                    {"name": "trainer", "image": "registry.invalid/llama:1",
                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            },
        },
    }  # fmt: skip


def exporter_step(run: Any) -> float:
    text = http_text(f"{run.url}/metrics")
    for line in text.splitlines():
        if line.startswith("trainguard_train_step{") or line.startswith("trainguard_train_step "):
            return float(line.rsplit(" ", 1)[1])
    return -1.0


def http_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return str(resp.read().decode())


def inject(run: Any, fault: str, gpu: int | None = 1) -> None:
    http_json(f"{run.url}/v1/faults", {"fault": fault, **({"gpu": gpu} if gpu is not None else {})})


def resumed_from(pods: Any, old: set[str]) -> list[str]:
    return [ln for r in pods.running() if r.name not in old for ln in r.trainer_log().splitlines()
            if ln.startswith("resuming after the checkpoint of step")]  # fmt: skip


@contextmanager
def monitoring_stack(
    cluster: Cluster, monitoring: dict[str, Any] | None = None
) -> Iterator[tuple[Cluster, Monitoring, Sink]]:
    """Prometheus, Alertmanager (Monitoring(cluster, **monitoring)) and the sink, and no operator: the
    caller starts the replicas it wants in front of them. The session's operator steps aside (the sidecars
    and Alertmanager must reach the caller's) and comes back."""
    with cluster.operators_aside(), Sink().serve() as sink, Monitoring(cluster, **(monitoring or {})) as mon:
        try:
            yield cluster, mon, sink
        finally:
            cluster.stop_all_operators()  # the caller's replicas, before Monitoring goes


@contextmanager
def operator_stack(
    cluster: Cluster, name: str = OPERATOR, *, prometheus: bool = False, flags: tuple[str, ...] = (),
    monitoring: dict[str, Any] | None = None,
) -> Iterator[tuple[Cluster, Monitoring, Sink]]:  # fmt: skip
    """monitoring_stack(cluster, **monitoring) and an operator replica `name` that knows where Alertmanager
    is (and Prometheus, with `prometheus`), started with `flags` besides."""
    with monitoring_stack(cluster, monitoring) as (_, mon, sink):
        extra = ["--alertmanager-url", mon.alertmanager]
        if prometheus:
            extra += ["--prometheus-url", mon.prometheus]
        cluster.start_operator(priority=200, name=name, extra=(*extra, *flags))
        yield cluster, mon, sink


def start(
    stack: tuple[Cluster, Monitoring, Sink], ns: str, tmp: Path, remediation: dict[str, Any] | None = None, *,
    fastpath: bool = True, policy: dict[str, Any] | None = None, completions: int = 2, gpus: int = 8,
    baseline: dict[str, Any] | None = None, scrape_interval: str = "1s",
) -> PodProcesses:  # fmt: skip
    """The monitor and policy of objects() Ready, and the job's pods running as processes, each trainer past
    its first checkpoint and each exporter scraped by a settled Prometheus: the PodProcesses, entered."""
    cluster, mon, sink = stack
    cluster.apply(objects(ns, sink, remediation, gpus, policy=policy, baseline=baseline,
                          scrape_interval=scrape_interval))  # fmt: skip
    wait_for("monitor Ready", lambda: ready(cluster, ns), timeout=60)
    workload = job(ns, completions, gpus)
    wait_for(
        "the admission webhook injecting the exporter", lambda: injected(cluster, ns, workload), timeout=30
    )
    cluster.apply([workload])
    pods = PodProcesses(cluster.api, ns, SELECTOR, tmp, fastpath=fastpath).__enter__()
    try:
        wait_for(f"{completions} trainers past their first checkpoint", lambda: len(r := pods.running()) == completions
                 and all(exporter_step(x) >= 120 for x in r), timeout=120)  # fmt: skip
        wait_for("Prometheus scraping every exporter", lambda: len(
            [t for t in mon.query(f'up{{namespace="{ns}", container="trainguard-exporter"}} == 1')]) == completions,
            timeout=30 + 2 * duration_seconds(scrape_interval))  # fmt: skip
        wait_for("Prometheus settled after its last reload", mon.settled, timeout=30)
    except AssertionError:
        pods.__exit__(None, None, None)
        raise AssertionError(diagnostics(cluster, mon, pods, ns)) from None
    return pods


def injected(cluster: Cluster, ns: str, workload: dict[str, Any]) -> bool:
    """A pod of the workload's template, created with dryRun, comes back with the exporter: the operator's
    admission sees the monitor. Its Ready condition is not enough: the webhook reads the monitors from a
    watch cache of its own, which can lag behind the handler that wrote Ready, and a pod admitted before
    that cache has the monitor runs without the sidecar."""
    template = workload["spec"]["template"]
    probe = {"apiVersion": "v1", "kind": "Pod", "spec": template["spec"],
             "metadata": {"generateName": f"{JOB}-admission-probe-", "labels": template["metadata"]["labels"]}}  # fmt: skip
    pod = cluster.core.create_namespaced_pod(ns, probe, dry_run="All")
    return any(c.name == EXPORTER for c in [*(pod.spec.init_containers or []), *pod.spec.containers])


def diagnostics(
    cluster: Cluster, mon: Monitoring, pods: PodProcesses, ns: str, sink: Sink | None = None
) -> str:
    """The records, Prometheus' and Alertmanager's view, and each pod's exporter and trainer logs."""
    runs = [*pods.finished, *pods.runs.values()]
    try:
        am = [
            (a["labels"].get("alertname"), a["labels"].get("severity"), a["status"])
            for a in mon.alerts(namespace=ns)
        ]
    except OSError as exc:
        am = [repr(exc)]
    parts = [f"records: {json.dumps(records(cluster, ns), indent=1)}", f"sync errors: {mon.errors[-3:]}",
             f"Alertmanager: {am}", "notifier: " + " ".join(
                 ln for ln in http_text(f"{mon.prometheus}/metrics").splitlines() if ln.startswith("prometheus_notifications_")
                 and "latency" not in ln), f"reloads: {[(round(t - time.monotonic(), 1), w) for t, w in mon.reloads]}", f"notified: {[(n.receiver, len(n.alerts)) for n in (sink.got if sink else [])][-20:]}",
             f"pod runner errors: {pods.errors[-3:]}", mon.logs()]  # fmt: skip
    for r in runs:
        parts.append(f"--- {r.name} on {r.node} ({r.ip})\nexporter: {r.exporter_log()[-1500:]}\n"
                     f"trainer: {r.trainer_log()[-800:]}")  # fmt: skip
    return "\n".join(parts)


def finished(cluster: Cluster, ns: str, n: int = 1, timeout: float = 150) -> list[dict[str, Any]]:
    """The monitor's remediation records once there are `n` or more and all are done."""
    return wait_for(
        f"{n} remediation record(s) done",
        lambda: len(r := records(cluster, ns)) >= n and all(x["phase"] in FINAL for x in r) and r,
        timeout=timeout,
    )
