#!/usr/bin/env python3
"""The local demo, in two acts. Act 1, on the embedded quickstart and no cluster: a real exporter
(simulated GPUs) with a tiny trainer reporting through the SDK, scraped by a real Prometheus that
evaluates the rules trainguard renders and notifies a real Alertmanager with trainguard's routes. Two
faults are injected; you see each alert reach the receivers its severity routes to.

Act 2, when the local Kubernetes control plane's binaries are cached (`make controlplane`) or with
--with-operator (which builds them first): the operator on that control plane answers a node fault, the
page, the checkpoint, the cordon and the gang resumed told as they happen, with `trainguard status`
before and after (e2e/operator_act.py). It stops by itself and tears everything down.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from prometheus_api_client import PrometheusConnect

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
RECEIVER_PORT = 9101  # the quickstart's receivers post to http://127.0.0.1:9101/<name>
DEMO_FAULTS = [("thermal", "GPUThermalThrottling"), ("xid-79", "GPUCriticalXid")]


_SAY = threading.Lock()


def say(msg: str) -> None:
    # the receivers' handler threads say things at once: one write per line, or their lines interleave
    with _SAY:
        sys.stdout.write(f"[demo {time.strftime('%H:%M:%S')}] {msg}\n")
        sys.stdout.flush()


def wait_up(url: str, proc: subprocess.Popen[bytes], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode}")
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{what} did not come up at {url}")


def demo_documents() -> str:
    """The quickstart, made quick: 1s scrapes and the demo's alerts without a `for`."""
    docs = [d for d in yaml.safe_load_all(QUICKSTART.read_text()) if d]
    for d in docs:
        if d["kind"] == "TrainingJobMonitor":
            d["spec"]["exporter"]["scrapeInterval"] = "1s"
        else:
            d["spec"]["quietHours"]["enabled"] = False  # a demo at night should still ring
            d["spec"]["alerts"] = [{"name": name, "for": "0s"} for _, name in DEMO_FAULTS]
    return yaml.safe_dump_all(docs)


def receiver(log: list[tuple[str, dict[str, Any]]]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            log.append((self.path.strip("/"), body))
            for alert in body.get("alerts", []):
                labels = alert["labels"]
                grade = labels.get("priority", "")
                severity = labels.get("severity", "")
                shown = grade if severity in ("", grade) else f"{grade}, severity {severity}"
                say(f"  -> receiver '{self.path.strip('/')}' got {body['status']} {labels['alertname']} "
                    f"[{shown}] on {labels.get('node', '-')} gpu {labels.get('gpu', '-')}")  # fmt: skip
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", RECEIVER_PORT), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keep", action="store_true", help="keep the work folders (configs and logs)")
    p.add_argument("--severity-style", choices=["grade", "mapped"], default="grade",
                   help="act 1's rules' severity label: grade (P0..P3) or mapped (critical, warning, none; "
                   "docs/severity.md); the routes match the priority label either way")  # fmt: skip
    act = p.add_mutually_exclusive_group()
    act.add_argument("--with-operator", dest="operator", action="store_const", const=True, default=None,
                     help="run act 2, building the local control plane first if it is not cached "
                     "(about 8 minutes on 2 cores, needs Go)")  # fmt: skip
    act.add_argument("--no-operator", dest="operator", action="store_const", const=False,
                     help="act 1 only, even with the control plane cached")  # fmt: skip
    args = p.parse_args()
    prometheus = shutil.which("prometheus")
    alertmanager = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    if not prometheus or not alertmanager:
        say("prometheus and alertmanager are needed: apt-get install prometheus prometheus-alertmanager")
        return 1
    sys.path[:0] = [str(ROOT), str(ROOT / "operator")]
    from e2e import operator_act  # noqa: PLC0415

    choice = operator_act.choose(
        asked=args.operator, cached=operator_act.binaries_cached(), go=shutil.which("go") is not None
    )
    if choice.failed:
        say(choice.note)
        return 1
    try:
        if choice.build:
            say(choice.note)
            operator_act.build(say)
        rules_and_routes(args, prometheus, alertmanager)
        if not choice.run:
            say(choice.note)
            return 0
        say(choice.note)
        work = Path(tempfile.mkdtemp(prefix="trainguard-demo-operator-"))
        t0, keep = time.monotonic(), True
        try:
            outcome = operator_act.operator_act(say, work)
            say(f"act 2 done in {time.monotonic() - t0:.0f}s; everything it started is stopped")
            keep = args.keep or bool(outcome.missing)
        except KeyboardInterrupt:
            keep = args.keep
            raise
        finally:
            if keep:
                say(f"the operator act's logs are kept in {work}")
            else:
                shutil.rmtree(work, ignore_errors=True)
        return 1 if outcome.missing else 0
    except subprocess.CalledProcessError as exc:
        say(f"{' '.join(map(str, exc.cmd))} failed with {exc.returncode} (its log is above)")
        return 1
    except KeyboardInterrupt:
        say("interrupted: everything the demo started is stopped")
        return 130


def rules_and_routes(args: argparse.Namespace, prometheus: str, alertmanager: str) -> None:
    """Act 1: the quickstart's rules and routes on real Prometheus and Alertmanager, no cluster."""
    from tests.processes import free_port, http_json, stop  # noqa: PLC0415
    from trainguard.api import load_documents  # noqa: PLC0415
    from trainguard.render import dump_yaml, render_prometheus  # noqa: PLC0415

    work = Path(tempfile.mkdtemp(prefix="trainguard-demo-"))
    say("act 1: the quickstart's rules and routes on a real Prometheus and Alertmanager, no cluster")
    t0 = time.monotonic()
    files = render_prometheus(
        load_documents([("quickstart", demo_documents())]), severity_style=args.severity_style
    )
    (work / "rules.yml").write_text(dump_yaml(files["rules.yml"]))
    (work / "alertmanager.yml").write_text(dump_yaml(files["alertmanager.yml"]))
    say(f"rendered examples/quickstart.yaml into {work}/rules.yml and alertmanager.yml")
    exp_port, prom_port, am_port = free_port(), free_port(), free_port()
    identity = {
        "namespace": "ml",
        "training_job": "llama-pretrain",
        "node": "gpu-node-1",
        "pod": "llama-pretrain-0",
    }
    (work / "prometheus.yml").write_text(dump_yaml({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(work / "rules.yml")],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]},
        # a static target, so no label can come from Kubernetes discovery: the exporter's own identity (the same
        # values as the target's) is honoured here; the PodMonitor sets it from the target and drops the pod's
        # (tests/integration/test_tenant_cannot_pose.py)
        "scrape_configs": [{"job_name": "trainguard", "honor_labels": True,
                            "static_configs": [{"targets": [f"127.0.0.1:{exp_port}"], "labels": identity}]}],
    }))  # fmt: skip
    notifications: list[tuple[str, dict[str, Any]]] = []
    server = receiver(notifications)
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            cmd, stdout=(work / f"{name}.log").open("wb"), stderr=subprocess.STDOUT, cwd=ROOT
        )
        procs.append(proc)
        return proc

    try:
        exporter = start("exporter", [sys.executable, "-m", "trainguard.cli", "exporter", "--backend", "simulated",
                                      "--gpus", "8", "--enable-fault-injection", "--sdk-tcp", "--listen", f"127.0.0.1:{exp_port}",
                                      *[x for k, v in identity.items() for x in (f"--{k.replace('_', '-')}", v)]])  # fmt: skip
        wait_up(f"http://127.0.0.1:{exp_port}/healthz", exporter, "the exporter")
        say(f"exporter: 8 simulated H100s on http://127.0.0.1:{exp_port}/metrics (fault injection on)")
        start("trainer", [sys.executable, "examples/train_tiny.py", "--steps", "100000000", "--step-delay", "0.02",
                          "--endpoint", f"http://127.0.0.1:{exp_port}", "--checkpoint-dir", str(work / "ckpt")])  # fmt: skip
        am = start("alertmanager", [alertmanager, f"--config.file={work / 'alertmanager.yml'}",
                                    f"--storage.path={work / 'am'}", f"--web.listen-address=127.0.0.1:{am_port}",
                                    "--cluster.listen-address="])  # fmt: skip
        prom = start("prometheus", [prometheus, f"--config.file={work / 'prometheus.yml'}",
                                    f"--storage.tsdb.path={work / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"])  # fmt: skip
        wait_up(f"http://127.0.0.1:{am_port}/-/ready", am, "alertmanager")
        wait_up(f"http://127.0.0.1:{prom_port}/-/ready", prom, "prometheus")
        say(
            f"prometheus http://127.0.0.1:{prom_port}  alertmanager http://127.0.0.1:{am_port}  receivers :{RECEIVER_PORT}"
        )
        time.sleep(8)
        prometheus_api = PrometheusConnect(f"http://127.0.0.1:{prom_port}", disable_ssl=True)
        query = prometheus_api.get_current_metric_value("trainguard_train_step")
        loss = prometheus_api.get_current_metric_value("trainguard_train_loss")
        if query:
            say(
                f"training: step {float(query[0]['value'][1]):.0f}, loss {float(loss[0]['value'][1]):.4f} (scraped by Prometheus)"
            )
        for fault, alert in DEMO_FAULTS:
            wait_note = (
                "P1 routes wait group_wait 30s" if alert == "GPUThermalThrottling" else "P0 routes wait 5s"
            )
            say(f"injecting '{fault}' on GPU 1: expecting {alert} ({wait_note})")
            http_json(f"http://127.0.0.1:{exp_port}/v1/faults", {"fault": fault, "gpu": 1})
            deadline = time.monotonic() + 40
            while time.monotonic() < deadline:
                if any(
                    a["labels"]["alertname"] == alert
                    for _, body in notifications
                    for a in body.get("alerts", [])
                ):
                    break
                time.sleep(0.5)
            else:
                say(f"  {alert} did not reach a receiver within 40s (logs in {work})")
                args.keep = True
            http_json(f"http://127.0.0.1:{exp_port}/v1/faults", method="DELETE")
        time.sleep(2)
        say(f"act 1 done in {time.monotonic() - t0:.0f}s: {len(notifications)} notifications; P1 went to 'im', "
            "P0 to 'phone' and 'im', as routed")  # fmt: skip
    finally:
        stop(procs)
        server.shutdown()
        if args.keep:
            say(f"configs and logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
